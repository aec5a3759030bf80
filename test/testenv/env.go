package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// ServiceClusterIPRange is kube-apiserver's --service-cluster-ip-range.
	ServiceClusterIPRange = "10.96.0.0/16"
	// PodCIDR is the range kwok hands pod IPs out of. It is larger than
	// kwok's default /24 so that a few nodes of 110+ pods each fit, and it
	// does not overlap ServiceClusterIPRange.
	PodCIDR = "10.0.0.0/16"
	// ServiceAccountIssuer is the issuer of service-account tokens.
	ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

	// AdminUser is the user name in the admin client certificate; its group
	// is system:masters.
	AdminUser = "testenv-admin"
	// KwokUser is the user kwok acts as, so requests made by the fake
	// kubelets can be told apart from the test's own in audit logs.
	KwokUser = "testenv-kwok"

	// The default client rate limit of client-go (5 QPS) would make tests
	// that create a hundred objects measure the limiter, not the system.
	clientQPS   = 100
	clientBurst = 200

	// stopGrace is how long a component gets after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// logTailLines is how much of a component's log an error quotes.
	logTailLines = 20
)

// kubernetesServiceIP is the first address of ServiceClusterIPRange, which
// kube-apiserver gives the kubernetes Service; the serving certificate names
// it so in-cluster style clients would verify too.
var kubernetesServiceIP = net.ParseIP("10.96.0.1")

// Env is a running control plane. Its methods are safe for concurrent use.
type Env struct {
	opts       Options
	log        *slog.Logger
	workDir    string
	ownWorkDir bool
	logDir     string

	pki        *pki
	caFile     string
	server     string
	adminCfg   *rest.Config
	client     kubernetes.Interface
	kubeconfig string

	apiMu     sync.Mutex // serialises RestartAPIServer
	apiserver *component
	procs     []*component // in start order

	nodeMu  sync.Mutex
	nodeSeq int

	stopOnce sync.Once
	stopErr  error
}

// launchSpec is how to run a component on given ports.
type launchSpec struct {
	args  []string
	env   []string // added to the inherited environment
	url   string   // the health endpoint
	ready func(ctx context.Context) error
}

// specFunc builds a launchSpec for freshly chosen ports.
type specFunc func(ports []int) launchSpec

// component is a started process plus how to tell that it is ready.
type component struct {
	proc    *process
	url     string // the health endpoint polled
	version string
	ready   func(ctx context.Context) error
}

// Component describes one process of a running Env.
type Component struct {
	Name    string // binary name, for example "kube-apiserver"
	PID     int    // 0 when not running
	URL     string // the health endpoint the harness polls
	LogFile string
	Version string // as the component reports it, where it does
}

// Start runs the control plane the options describe and returns once every
// component reports ready. ctx bounds start-up only: the processes run until
// Stop. On error, everything already started is stopped again.
func Start(ctx context.Context, opts Options) (*Env, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := CheckBinaries(opts); err != nil {
		return nil, err
	}
	e := &Env{opts: opts, log: opts.Logger}
	if err := e.start(ctx); err != nil {
		if stopErr := e.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	return e, nil
}

func (e *Env) start(ctx context.Context) error {
	began := time.Now()
	var stagesConfig []byte
	if e.opts.Kwok {
		modDir := e.opts.KwokModuleDir
		if modDir == "" {
			var err error
			if modDir, err = findKwokModuleDir(ctx); err != nil {
				return fmt.Errorf("locating kwok stages: %w", err)
			}
		}
		var err error
		if stagesConfig, err = kwokStagesConfig(modDir, e.opts.PodStages); err != nil {
			return err
		}
	}

	if e.opts.WorkDir == "" {
		dir, err := os.MkdirTemp("", "node-agent-testenv-")
		if err != nil {
			return err
		}
		e.workDir, e.ownWorkDir = dir, true
	} else {
		e.workDir = e.opts.WorkDir
		if err := os.MkdirAll(e.workDir, 0o700); err != nil {
			return err
		}
	}
	e.logDir = e.opts.LogDir
	if e.logDir == "" {
		e.logDir = filepath.Join(e.workDir, "logs")
	}
	if err := os.MkdirAll(e.logDir, 0o755); err != nil {
		return err
	}
	pkiDir := filepath.Join(e.workDir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	creds, err := e.writeCredentials(pkiDir)
	if err != nil {
		return fmt.Errorf("generating credentials: %w", err)
	}

	etcd, err := e.launch(ctx, BinEtcd, 2, func(p []int) launchSpec {
		return e.etcdArgs(p[0], p[1])
	})
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(portOf(etcd.url))
	etcd.version = etcdVersion(ctx, etcdURL)

	apiserver, err := e.launch(ctx, BinKubeAPIServer, 1, func(p []int) launchSpec {
		return e.apiserverArgs(p[0], etcdURL, creds)
	})
	if err != nil {
		return err
	}
	e.apiserver = apiserver
	if err := e.setupClients(creds); err != nil {
		return err
	}
	if v, err := e.client.Discovery().ServerVersion(); err == nil {
		apiserver.version = v.GitVersion
	}

	// The remaining components only talk to kube-apiserver, so they start
	// together and are waited for one after the other.
	type pending struct {
		name  string
		ports int
		args  specFunc
	}
	var rest []pending
	if e.opts.Controllers {
		kc, err := e.componentKubeconfig("kube-controller-manager", creds.kcm)
		if err != nil {
			return err
		}
		rest = append(rest, pending{BinKubeControllerManager, 1, func(p []int) launchSpec {
			return e.controllerManagerArgs(p[0], kc, creds)
		}})
	}
	if e.opts.Scheduler {
		kc, err := e.componentKubeconfig("kube-scheduler", creds.scheduler)
		if err != nil {
			return err
		}
		configFile, err := e.writeSchedulerConfig(kc)
		if err != nil {
			return err
		}
		rest = append(rest, pending{BinKubeScheduler, 1, func(p []int) launchSpec {
			return e.schedulerArgs(p[0], configFile, creds)
		}})
	}
	if e.opts.Kwok {
		kc, err := e.componentKubeconfig("kwok", creds.kwok)
		if err != nil {
			return err
		}
		stagesFile := filepath.Join(e.workDir, "kwok-stages.yaml")
		if err := os.WriteFile(stagesFile, stagesConfig, 0o644); err != nil {
			return err
		}
		rest = append(rest, pending{BinKwok, 1, func(p []int) launchSpec {
			return e.kwokArgs(p[0], kc, stagesFile)
		}})
	}
	var launches []func() error
	for _, r := range rest {
		c, err := e.spawn(r.name, r.ports, r.args)
		if err != nil {
			return err
		}
		launches = append(launches, func() error {
			_, err := e.await(ctx, c, r.name, r.ports, r.args)
			return err
		})
	}
	for _, wait := range launches {
		if err := wait(); err != nil {
			return err
		}
	}

	if e.opts.Controllers {
		// The ServiceAccount admission plugin refuses pods in a namespace
		// whose "default" ServiceAccount the controller manager has not made
		// yet; waiting here spares every test that race in "default".
		if err := e.waitDefaultServiceAccount(ctx, metav1.NamespaceDefault); err != nil {
			return err
		}
	}
	e.log.Info("control plane ready", "server", e.server, "took", time.Since(began).Round(time.Millisecond), "workDir", e.workDir)
	return nil
}

// launch starts a component and waits until it is ready, retrying with new
// ports when another process took one of the free ports between choosing and
// binding.
func (e *Env) launch(ctx context.Context, name string, nports int, args specFunc) (*component, error) {
	c, err := e.spawn(name, nports, args)
	if err != nil {
		return nil, err
	}
	return e.await(ctx, c, name, nports, args)
}

func (e *Env) spawn(name string, nports int, args specFunc) (*component, error) {
	ports, err := freePorts(nports)
	if err != nil {
		return nil, err
	}
	spec := args(ports)
	c := &component{
		proc: &process{
			name:    name,
			path:    e.opts.binPath(name),
			args:    spec.args,
			env:     spec.env,
			logPath: filepath.Join(e.logDir, name+".log"),
		},
		url:   spec.url,
		ready: spec.ready,
	}
	if err := c.proc.start(); err != nil {
		return nil, err
	}
	e.procs = append(e.procs, c)
	e.log.Info("started", "component", name, "pid", c.proc.pid(), "url", spec.url)
	return c, nil
}

func (e *Env) await(ctx context.Context, c *component, name string, nports int, args specFunc) (*component, error) {
	const attempts = 3
	for attempt := 1; ; attempt++ {
		err := e.waitReady(ctx, c)
		if err == nil {
			if c.version == "" {
				c.version = binaryVersion(ctx, c.proc.path)
			}
			return c, nil
		}
		if attempt == attempts || c.proc.exitError() == nil || !strings.Contains(c.proc.tail(logTailLines), "address already in use") {
			return nil, err
		}
		e.log.Info("port taken, retrying on new ports", "component", name)
		if c, err = e.spawn(name, nports, args); err != nil {
			return nil, err
		}
	}
}

// waitReady polls the component's readiness until it passes, the process
// exits, or the start timeout runs out.
func (e *Env) waitReady(ctx context.Context, c *component) error {
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.opts.StartTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if err := c.proc.exitError(); err != nil {
			return fmt.Errorf("%s did not become ready: %w; last lines of %s:\n%s", c.proc.name, err, c.proc.logPath, c.proc.tail(logTailLines))
		}
		probeCtx, probeCancel := context.WithTimeout(ctx, 5*time.Second)
		last = c.ready(probeCtx)
		probeCancel()
		if last == nil {
			e.log.Info("ready", "component", c.proc.name, "pid", c.proc.pid(), "took", time.Since(began).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s (pid %d) not ready at %s after %s: %v; last lines of %s:\n%s",
				c.proc.name, c.proc.pid(), c.url, time.Since(began).Round(time.Second), last, c.proc.logPath, c.proc.tail(logTailLines))
		case <-tick.C:
		}
	}
}

// httpReady returns a probe that wants 200 from url.
func httpReady(client *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, lastLines(string(body), 5))
		}
		return nil
	}
}

func (e *Env) etcdArgs(clientPort, peerPort int) launchSpec {
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	args := []string{
		"--name=testenv",
		// Per client port, so a retry on new ports never meets a data
		// directory bootstrapped with the old peer URL.
		"--data-dir=" + filepath.Join(e.workDir, "etcd-"+strconv.Itoa(clientPort)),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL,
		// The data dies with the test; fsync would only slow every write.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
	url := clientURL + "/readyz"
	return launchSpec{args: args, url: url, ready: httpReady(&http.Client{}, url)}
}

// credentials are the files and clients made from an Env's pki.
type credentials struct {
	caFile, caKeyFile           string
	servingCert, servingKey     string
	saKey, saPub                string
	admin, kcm, scheduler, kwok keyPair
	// kubeletClient is how kube-apiserver authenticates to real kubelets
	// (logs, exec, port-forward), as kubeadm's apiserver-kubelet-client.
	kubeletClientCert, kubeletClientKey string
	caPool                              *x509.CertPool
	apiserverClient                     *http.Client // admin client for /readyz
}

func (e *Env) writeCredentials(dir string) (*credentials, error) {
	p, err := newPKI()
	if err != nil {
		return nil, err
	}
	e.pki = p
	c := &credentials{caFile: filepath.Join(dir, "ca.crt"), caKeyFile: filepath.Join(dir, "ca.key")}
	e.caFile = c.caFile
	if err := os.WriteFile(c.caFile, p.caPEM, 0o644); err != nil {
		return nil, err
	}
	caKey, err := p.caKeyPEM()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.caKeyFile, caKey, 0o600); err != nil {
		return nil, err
	}
	// One serving certificate for every component: they all listen on
	// 127.0.0.1 only.
	serving, err := p.serving("testenv-serving",
		[]net.IP{net.IPv4(127, 0, 0, 1), kubernetesServiceIP},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return nil, err
	}
	if c.servingCert, c.servingKey, err = writeKeyPair(dir, "serving", serving); err != nil {
		return nil, err
	}
	saPriv, saPub, err := newServiceAccountKey()
	if err != nil {
		return nil, err
	}
	c.saKey, c.saPub = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(c.saKey, saPriv, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.saPub, saPub, 0o644); err != nil {
		return nil, err
	}
	if c.admin, err = p.client(AdminUser, "system:masters"); err != nil {
		return nil, err
	}
	// The bootstrap RBAC policy binds its controller-manager and scheduler
	// roles to exactly these user names, so both run with the permissions
	// they have in a real cluster rather than as cluster-admin.
	if c.kcm, err = p.client("system:kube-controller-manager"); err != nil {
		return nil, err
	}
	if c.scheduler, err = p.client("system:kube-scheduler"); err != nil {
		return nil, err
	}
	// kwok writes Node and Pod status and deletes pods for every fake
	// node; there is no bootstrap role for that, so it is a master.
	if c.kwok, err = p.client(KwokUser, "system:masters"); err != nil {
		return nil, err
	}
	kubeletClient, err := p.client("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return nil, err
	}
	if c.kubeletClientCert, c.kubeletClientKey, err = writeKeyPair(dir, "kubelet-client", kubeletClient); err != nil {
		return nil, err
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	c.caPool = pool
	adminTLS, err := tls.X509KeyPair(c.admin.CertPEM, c.admin.KeyPEM)
	if err != nil {
		return nil, err
	}
	c.apiserverClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{adminTLS},
	}}}
	return c, nil
}

func (e *Env) apiserverArgs(port int, etcdURL string, c *credentials) launchSpec {
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + c.servingCert,
		"--tls-private-key-file=" + c.servingKey,
		"--client-ca-file=" + c.caFile,
		// Node and RBAC, as in the clusters node-agent runs in: least-privilege
		// tests must see the same 403s a real cluster would give. The Node
		// authorizer and the NodeRestriction admission plugin confine real
		// kubelets (test/testenv/realnode.go) to their own Node and pods.
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + c.kubeletClientCert,
		"--kubelet-client-key=" + c.kubeletClientKey,
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-signing-key-file=" + c.saKey,
		"--service-account-key-file=" + c.saPub,
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		// node-agent's DaemonSet needs privileged containers.
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}
	if e.opts.KubernetesVersion != "" {
		// kube-apiserver 1.37 refuses a loopback advertise address with its
		// endpoint reconciler on ("may not be in the loopback range"). The
		// test bed reaches the apiserver directly, never through the
		// kubernetes Service's endpoints (realnode_net.go), so it has none.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	// --authorization-mode is a list flag, which adds up over repeats: a
	// test's own (TestWithoutNodeAuthorizer) replaces the default.
	if !slices.ContainsFunc(e.opts.APIServerArgs, func(a string) bool { return strings.HasPrefix(a, "--authorization-mode") }) {
		args = append(args, "--authorization-mode=Node,RBAC")
	}
	args = append(args, e.opts.APIServerArgs...)
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	return launchSpec{args: args, url: url, ready: httpReady(c.apiserverClient, url)}
}

func (e *Env) controllerManagerArgs(port int, kubeconfig string, c *credentials) launchSpec {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + c.servingCert,
		"--tls-private-key-file=" + c.servingKey,
		// The default set includes everything tests rely on: disruption
		// (PDB status), replicaset, deployment, daemonset, garbage
		// collector, serviceaccount, serviceaccount-token, namespace,
		// node lifecycle.
		"--controllers=*",
		// With leader election a controller manager that cannot renew its
		// lease exits; RestartAPIServer would take it down.
		"--leader-elect=false",
		// Each controller acts as its own ServiceAccount, as in kubeadm
		// clusters, so RBAC problems show up here as they would there.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.saKey,
		"--root-ca-file=" + c.caFile,
		"--cluster-signing-cert-file=" + c.caFile,
		"--cluster-signing-key-file=" + c.caKeyFile,
		"--kube-api-qps=" + strconv.Itoa(clientQPS),
		"--kube-api-burst=" + strconv.Itoa(clientBurst),
		"--profiling=false",
	}
	args = append(args, e.opts.ControllerManagerArgs...)
	// kube-controller-manager serves /healthz only, no /readyz.
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	return launchSpec{args: args, url: url, ready: httpReady(componentHTTPClient(c), url)}
}

// writeSchedulerConfig writes the scheduler's configuration file; its
// --kubeconfig and --leader-elect flags are deprecated in favour of it.
func (e *Env) writeSchedulerConfig(kubeconfig string) (string, error) {
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  # A scheduler that cannot renew its lease exits; RestartAPIServer would take it down.
  leaderElect: false
`, kubeconfig, clientQPS, clientBurst)
	path := filepath.Join(e.workDir, "kube-scheduler.yaml")
	return path, os.WriteFile(path, []byte(config), 0o644)
}

func (e *Env) schedulerArgs(port int, configFile string, c *credentials) launchSpec {
	args := []string{
		"--config=" + configFile,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + c.servingCert,
		"--tls-private-key-file=" + c.servingKey,
	}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	return launchSpec{args: args, url: url, ready: httpReady(componentHTTPClient(c), url)}
}

func (e *Env) kwokArgs(port int, kubeconfig, stagesFile string) launchSpec {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + stagesFile,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + KwokNodeValue,
		// Leases are kwok's heartbeat; see kwokStageDirs.
		"--node-lease-duration-seconds=40",
		"--cidr=" + PodCIDR,
		// kwok serves health and debugging endpoints only when given an
		// address; without a host it would listen on every interface.
		"--server-address=127.0.0.1:" + strconv.Itoa(port),
	}
	// kwok also reads ~/.kwok/kwok.yaml when it exists; point it at a
	// directory of its own so a developer's kwok setup cannot leak in.
	env := []string{"KWOK_WORKDIR=" + filepath.Join(e.workDir, "kwok")}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	return launchSpec{args: args, env: env, url: url, ready: httpReady(&http.Client{}, url)}
}

func componentHTTPClient(c *credentials) *http.Client {
	// /healthz and /readyz are on the always-allowed paths of the delegated
	// authorizer, so no client certificate is needed.
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.caPool}}}
}

func (e *Env) setupClients(c *credentials) error {
	e.server = "https://127.0.0.1:" + strconv.Itoa(portOf(e.apiserver.url))
	e.adminCfg = &rest.Config{
		Host: e.server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   e.pki.caPEM,
			CertData: c.admin.CertPEM,
			KeyData:  c.admin.KeyPEM,
		},
		QPS:   clientQPS,
		Burst: clientBurst,
	}
	client, err := kubernetes.NewForConfig(e.adminCfg)
	if err != nil {
		return err
	}
	e.client = client
	e.kubeconfig = filepath.Join(e.workDir, "admin.kubeconfig")
	return WriteKubeconfig(e.kubeconfig, e.adminCfg)
}

func (e *Env) componentKubeconfig(name string, kp keyPair) (string, error) {
	path := filepath.Join(e.workDir, name+".kubeconfig")
	cfg := &rest.Config{Host: e.server, TLSClientConfig: rest.TLSClientConfig{
		CAData: e.pki.caPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM,
	}}
	return path, WriteKubeconfig(path, cfg)
}

func (e *Env) waitDefaultServiceAccount(ctx context.Context, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, e.opts.StartTimeout)
	defer cancel()
	for {
		_, err := e.client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			e.log.Debug("waiting for default ServiceAccount", "namespace", namespace, "err", err)
		}
		if exitErr := e.Err(); exitErr != nil {
			return exitErr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the default ServiceAccount of namespace %q did not appear within %s: %v; is kube-controller-manager's serviceaccount controller running? last lines of its log:\n%s",
				namespace, e.opts.StartTimeout, err, TailFile(filepath.Join(e.logDir, BinKubeControllerManager+".log"), logTailLines))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RESTConfig returns a copy of the admin client configuration (user
// AdminUser, group system:masters); callers may change the copy.
func (e *Env) RESTConfig() *rest.Config { return rest.CopyConfig(e.adminCfg) }

// Client returns an admin clientset.
func (e *Env) Client() kubernetes.Interface { return e.client }

// KubeconfigPath returns an admin kubeconfig file with embedded credentials,
// for kubectl and `node-agent run --kubeconfig`.
func (e *Env) KubeconfigPath() string { return e.kubeconfig }

// Server returns the URL of kube-apiserver.
func (e *Env) Server() string { return e.server }

// CAFile returns the CA certificate file every component's serving
// certificate chains to.
func (e *Env) CAFile() string { return e.caFile }

// WorkDir returns the directory holding credentials and kubeconfigs.
func (e *Env) WorkDir() string { return e.workDir }

// LogDir returns the directory holding one <component>.log per process.
func (e *Env) LogDir() string { return e.logDir }

// UserConfig returns a client configuration that authenticates with a new
// client certificate for user in groups, for testing RBAC. The user has no
// permissions beyond what RBAC grants it.
func (e *Env) UserConfig(user string, groups ...string) (*rest.Config, error) {
	kp, err := e.pki.client(user, groups...)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: e.server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: e.pki.caPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM,
		},
		QPS:   clientQPS,
		Burst: clientBurst,
	}, nil
}

// ClientCertificate issues a client certificate and key (PEM) for user in
// groups, signed by the control plane's CA: for example the identity of a
// real kubelet, system:node:NAME in system:nodes.
func (e *Env) ClientCertificate(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	kp, err := e.pki.client(user, groups...)
	return kp.CertPEM, kp.KeyPEM, err
}

// ServingCertificate issues a server certificate and key (PEM) for the given
// IP addresses, signed by the control plane's CA, for a server that
// kube-apiserver calls and trusts through CAPEM: a webhook on 127.0.0.1, say.
func (e *Env) ServingCertificate(ips []net.IP) (certPEM, keyPEM []byte, err error) {
	kp, err := e.pki.serving("testenv-webhook", ips, nil)
	return kp.CertPEM, kp.KeyPEM, err
}

// CAPEM returns the control plane's CA certificate.
func (e *Env) CAPEM() []byte { return e.pki.caPEM }

// TokenConfig returns a client configuration that authenticates with a
// bearer token, for example one from the TokenRequest API.
func (e *Env) TokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            e.server,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.pki.caPEM},
		BearerToken:     token,
		QPS:             clientQPS,
		Burst:           clientBurst,
	}
}

// Components lists the processes of the Env in start order.
func (e *Env) Components() []Component {
	out := make([]Component, 0, len(e.procs))
	for _, c := range e.liveComponents() {
		out = append(out, Component{
			Name:    c.proc.name,
			PID:     c.proc.pid(),
			URL:     c.url,
			LogFile: c.proc.logPath,
			Version: c.version,
		})
	}
	return out
}

// liveComponents drops components replaced by a retry on new ports.
func (e *Env) liveComponents() []*component {
	latest := map[string]*component{}
	var order []string
	for _, c := range e.procs {
		if _, seen := latest[c.proc.name]; !seen {
			order = append(order, c.proc.name)
		}
		latest[c.proc.name] = c
	}
	out := make([]*component, 0, len(order))
	for _, name := range order {
		out = append(out, latest[name])
	}
	return out
}

// LogTail returns up to n last lines of a component's log, by binary name.
func (e *Env) LogTail(name string, n int) string {
	return TailFile(filepath.Join(e.logDir, name+".log"), n)
}

// Err reports components that exited without being stopped, with the tail
// of their logs, or nil when all are running.
func (e *Env) Err() error {
	var errs []error
	for _, c := range e.liveComponents() {
		if err := c.proc.exitError(); err != nil {
			errs = append(errs, fmt.Errorf("%w; last lines of %s:\n%s", err, c.proc.logPath, c.proc.tail(logTailLines)))
		}
	}
	return errors.Join(errs...)
}

// RestartAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after a
// grace period) and starts it again on the same port with the same etcd and
// credentials, returning once /readyz passes. Clients keep working across
// the restart; the other components reconnect on their own. While the
// controller manager and kwok hold watches open, kube-apiserver rarely exits
// within the 5 s grace, so a restart takes about 5 s plus a start-up.
//
// The controllers log a burst of 403s while the new kube-apiserver serves but
// its RBAC informers have not synced; /readyz (which includes informer-sync)
// passes only after that, and requests made right after RestartAPIServer
// returns were not refused in the harness's own tests.
func (e *Env) RestartAPIServer(ctx context.Context) error {
	e.apiMu.Lock()
	defer e.apiMu.Unlock()
	c := e.apiserver
	if c == nil {
		return errors.New("kube-apiserver is not running")
	}
	began := time.Now()
	if err := c.proc.stop(stopGrace); err != nil {
		return err
	}
	e.log.Info("stopped", "component", c.proc.name, "took", time.Since(began).Round(time.Millisecond))
	if err := c.proc.start(); err != nil {
		return err
	}
	e.log.Info("started", "component", c.proc.name, "pid", c.proc.pid(), "url", c.url)
	return e.waitReady(ctx, c)
}

// Stop stops every process the Env started, newest first, and removes the
// work directory it created. Further calls (and Discard) return the first
// result.
func (e *Env) Stop() error { return e.stop(stopGrace) }

// Discard is Stop for a control plane whose test is over: every process is
// killed at once (SIGKILL) instead of being given stopGrace to shut down,
// since its state goes with the work directory. A test's teardown waits for
// nothing it would look at; StartForTest ends its Env this way, which saves
// about a second per control plane (kube-apiserver's graceful shutdown).
func (e *Env) Discard() error { return e.stop(0) }

func (e *Env) stop(grace time.Duration) error {
	e.stopOnce.Do(func() {
		began := time.Now()
		comps := e.procs
		// kwok, the scheduler and the controller manager only depend on
		// kube-apiserver, so they stop together; then kube-apiserver, then
		// etcd, so nobody logs errors about a vanished dependency.
		var clients, core []*component
		for _, c := range comps {
			switch c.proc.name {
			case BinEtcd, BinKubeAPIServer:
				core = append(core, c)
			default:
				clients = append(clients, c)
			}
		}
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() { _ = c.proc.stop(grace) })
		}
		wg.Wait()
		for i := len(core) - 1; i >= 0; i-- {
			_ = core[i].proc.stop(grace)
		}
		if e.ownWorkDir {
			// Logs go with it unless Options.LogDir put them elsewhere.
			e.stopErr = os.RemoveAll(e.workDir)
		}
		e.log.Info("control plane stopped", "took", time.Since(began).Round(time.Millisecond))
	})
	return e.stopErr
}

// freePorts reserves n distinct free TCP ports on 127.0.0.1 by listening on
// port 0, then releases them for the component to bind. Another process can
// take one in between; launch retries when that happens.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portOf returns the port of an http(s)://127.0.0.1:PORT/... URL.
func portOf(url string) int {
	rest := url[strings.Index(url, "127.0.0.1:")+len("127.0.0.1:"):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	p, _ := strconv.Atoi(rest)
	return p
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// binaryVersion runs `path --version` and returns the version word of its
// output ("Kubernetes v1.36.3", "kwok version v0.8.0 go1.26 ..."), for the
// log; "" when that fails.
func binaryVersion(ctx context.Context, path string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return ""
	}
	for _, word := range strings.Fields(string(out)) {
		if strings.HasPrefix(word, "v") && strings.Contains(word, ".") {
			return word
		}
	}
	return ""
}

// etcdVersion reads etcd's /version, for the log.
func etcdVersion(ctx context.Context, baseURL string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/version", nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Server string `json:"etcdserver"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return ""
	}
	return v.Server
}
