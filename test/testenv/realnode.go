package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// BinKubelet is the kubelet binary hack/build-tools.sh writes into bin/.
const BinKubelet = "kubelet"

// RealNodeOptions describes a real node: a kubelet with containerd and runc.
type RealNodeOptions struct {
	// Name is the Node's name.
	Name string
	// PauseImage is the sandbox image, a localhost/NAME:TAG reference whose
	// archive is among Images: no registry is reachable here.
	PauseImage string
	// Images are image archives (OCI layout or docker save) imported into
	// containerd's k8s.io namespace before the kubelet starts.
	Images []string
	// KubeletConfig is YAML merged over the harness's KubeletConfiguration,
	// for example "shutdownGracePeriod: 30s".
	KubeletConfig string
}

// RealNode is a kubelet with containerd, runc and a CNI bridge, registered
// with an Env as a Node. It runs in a network namespace of its own, since the
// kubelet refuses a loopback node IP; see realnode_net.go.
type RealNode struct {
	env  *Env
	opts RealNodeOptions
	dir  string
	net  *NodeNetwork

	containerd *process
	kubelet    *process

	stopOnce sync.Once
	stopErr  error
}

// realNodeTools are the host programs a real node needs, besides the kubelet.
var realNodeTools = []string{
	"/usr/bin/containerd", "/usr/bin/ctr", "/usr/bin/containerd-shim-runc-v2", "/usr/sbin/runc",
	"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback",
	"/usr/sbin/ip", "/usr/bin/nsenter",
}

// CheckRealNode returns an error naming every missing prerequisite of a real
// node: root, the kubelet in the bin directory, and the Debian packages
// hack/install-deps.sh installs (group node).
func CheckRealNode(opts Options) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (network namespaces, mounts, cgroups)")
	}
	if !isExecutable(filepath.Join(o.BinDir, BinKubelet)) {
		missing = append(missing, filepath.Join(o.BinDir, BinKubelet)+" (make tools)")
	}
	for _, t := range realNodeTools {
		if !isExecutable(t) {
			missing = append(missing, t+" (hack/install-deps.sh node)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a real node needs: %s", strings.Join(missing, ", "))
	}
	return nil
}

// StartRealNode starts containerd and a kubelet for opts.Name and returns
// once the Node is Ready. Stop undoes everything it did.
func (e *Env) StartRealNode(ctx context.Context, opts RealNodeOptions) (n *RealNode, err error) {
	if err := CheckRealNode(e.opts); err != nil {
		return nil, err
	}
	if opts.Name == "" || opts.PauseImage == "" {
		return nil, errors.New("a real node needs a Name and a PauseImage")
	}
	// Short: containerd's socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "na-node-")
	if err != nil {
		return nil, err
	}
	n = &RealNode{env: e, opts: opts, dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop(context.WithoutCancel(ctx)))
			n = nil
		}
	}()
	began := time.Now()
	if n.net, err = e.NewNodeNetwork(filepath.Base(dir)[len("na-node-"):]); err != nil {
		return n, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	for _, img := range opts.Images {
		if err := n.ImportImage(ctx, img); err != nil {
			return n, err
		}
	}
	if err := n.startKubelet(ctx); err != nil {
		return n, err
	}
	e.log.Info("real node ready", "node", opts.Name, "ip", n.net.nodeIP, "took", time.Since(began).Round(time.Millisecond))
	return n, nil
}

// Name returns the Node's name.
func (n *RealNode) Name() string { return n.opts.Name }

// IP returns the node's address, inside its network namespace.
func (n *RealNode) IP() string { return n.net.nodeIP }

// Dir returns the directory holding the node's state and logs.
func (n *RealNode) Dir() string { return n.dir }

// KubeletLog and ContainerdLog return the paths of the two logs.
func (n *RealNode) KubeletLog() string {
	return filepath.Join(n.env.logDir, n.opts.Name+"-kubelet.log")
}
func (n *RealNode) ContainerdLog() string {
	return filepath.Join(n.env.logDir, n.opts.Name+"-containerd.log")
}

func (n *RealNode) sock() string { return filepath.Join(n.dir, "containerd.sock") }

// Ctr runs ctr against the node's containerd in the k8s.io namespace, the
// CRI's, and returns its standard output.
func (n *RealNode) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "/usr/bin/ctr", append([]string{"-a", n.sock(), "-n", "k8s.io"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ImportImage imports an image archive into the node's containerd.
func (n *RealNode) ImportImage(ctx context.Context, archive string) error {
	if _, err := n.Ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("importing %s: %w", archive, err)
	}
	return nil
}

func (n *RealNode) startContainerd(ctx context.Context) error {
	cfg := ContainerdConfig(ContainerdPaths{
		Root: filepath.Join(n.dir, "containerd/root"), State: filepath.Join(n.dir, "containerd/state"),
		Socket: n.sock(), Opt: filepath.Join(n.dir, "containerd/opt"), CNIConfDir: filepath.Join(n.dir, "cni"),
	}, n.opts.PauseImage)
	if err := writeFiles(map[string]string{
		filepath.Join(n.dir, "containerd.toml"):        cfg,
		filepath.Join(n.dir, "cni/10-bridge.conflist"): n.net.CNIConfig(filepath.Join(n.dir, "cni-ipam")),
	}); err != nil {
		return err
	}
	n.containerd = &process{
		name:    n.opts.Name + "-containerd",
		path:    "/usr/bin/nsenter",
		args:    []string{"--net=" + n.net.NSPath(), "--", "/usr/bin/containerd", "--config", filepath.Join(n.dir, "containerd.toml")},
		logPath: n.ContainerdLog(),
	}
	if err := n.containerd.start(); err != nil {
		return err
	}
	return n.poll(ctx, time.Minute, "containerd to serve", n.containerd, func() error {
		_, err := n.Ctr(ctx, "version")
		return err
	})
}

func (n *RealNode) startKubelet(ctx context.Context) error {
	e := n.env
	kubeconfig := filepath.Join(n.dir, "kubelet.kubeconfig")
	// The API through the node's own end of the proxy: the kubernetes
	// Service address, as pods see it.
	if err := e.NodeKubeconfig(kubeconfig, n.opts.Name, n.net.APIServer()); err != nil {
		return err
	}
	caFile := filepath.Join(n.dir, "ca.crt")
	configJSON, err := KubeletConfig(KubeletPaths{
		RuntimeSocket: n.sock(), PodLogsDir: filepath.Join(n.dir, "pod-logs"), ClientCAFile: caFile,
	}, n.net.nodeIP, n.opts.KubeletConfig)
	if err != nil {
		return err
	}
	if err := writeFiles(map[string]string{
		caFile:                               string(e.pki.caPEM),
		filepath.Join(n.dir, "kubelet.yaml"): string(configJSON), // JSON is YAML
	}); err != nil {
		return err
	}
	n.kubelet = &process{
		name: n.opts.Name + "-kubelet",
		path: "/usr/bin/nsenter",
		args: []string{"--net=" + n.net.NSPath(), "--", filepath.Join(e.opts.BinDir, BinKubelet),
			"--config=" + filepath.Join(n.dir, "kubelet.yaml"),
			"--kubeconfig=" + kubeconfig,
			"--root-dir=" + filepath.Join(n.dir, "kubelet"),
			"--cert-dir=" + filepath.Join(n.dir, "kubelet-pki"),
			"--hostname-override=" + n.opts.Name,
			"--node-ip=" + n.net.nodeIP,
			"--v=2",
		},
		logPath: n.KubeletLog(),
	}
	if err := n.kubelet.start(); err != nil {
		return err
	}
	return n.poll(ctx, 2*time.Minute, "the Node to be Ready", n.kubelet, func() error {
		node, err := e.client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("condition Ready=%s: %s", c.Status, c.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// RestartKubelet stops the kubelet and starts it again, as a node's
// reboot of the kubelet service would.
func (n *RealNode) RestartKubelet() error {
	if err := n.kubelet.stop(stopGrace); err != nil {
		return err
	}
	return n.kubelet.start()
}

// poll calls check every 250 ms until it passes, proc exits, or timeout;
// its error ends with the last lines of proc's log.
func (n *RealNode) poll(ctx context.Context, timeout time.Duration, what string, proc *process, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := Poll(ctx, 250*time.Millisecond, what, func() (bool, error) {
		err := check()
		if err == nil {
			return true, nil
		}
		if exit := proc.exitError(); exit != nil {
			return false, StopPolling(exit)
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("%w; last lines of %s:\n%s", err, proc.logPath, proc.tail(logTailLines))
	}
	return nil
}

// ContainerPID returns the host PID of a running container of a pod on
// this node, found through containerd's CRI labels.
func (n *RealNode) ContainerPID(ctx context.Context, namespace, pod, container string) (int, error) {
	out, err := n.Ctr(ctx, "tasks", "ls")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "RUNNING" {
			continue
		}
		info, err := n.Ctr(ctx, "containers", "info", f[0])
		if err != nil {
			continue // gone in between
		}
		var c struct {
			Labels map[string]string `json:"Labels"`
		}
		if err := json.Unmarshal(info, &c); err != nil {
			return 0, err
		}
		if c.Labels["io.kubernetes.pod.namespace"] == namespace && c.Labels["io.kubernetes.pod.name"] == pod &&
			c.Labels["io.kubernetes.container.name"] == container {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no running container %s of pod %s/%s on %s", container, namespace, pod, n.opts.Name)
}

// Stop stops the kubelet, removes every container, stops containerd, and
// removes the mounts, cgroups, network namespace and files the node made.
func (n *RealNode) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var errs []error
		if n.kubelet != nil {
			errs = append(errs, n.kubelet.stop(stopGrace))
		}
		if n.containerd != nil {
			errs = append(errs, n.removeContainers(ctx))
			errs = append(errs, n.containerd.stop(stopGrace))
		}
		errs = append(errs, unmountUnder(n.dir))
		errs = append(errs, RemoveKubepodsCgroups())
		if n.net != nil {
			errs = append(errs, n.net.Close())
		}
		if err := errors.Join(errs...); err != nil {
			n.stopErr = err
			return // keep the directory to look at
		}
		n.stopErr = os.RemoveAll(n.dir)
	})
	return n.stopErr
}

// removeContainers kills every task in the node's containerd and deletes
// the tasks and containers, so no runc container or shim outlives the test.
func (n *RealNode) removeContainers(ctx context.Context) error {
	out, err := n.Ctr(ctx, "tasks", "ls", "-q")
	if err != nil {
		return err
	}
	ids := strings.Fields(string(out))
	for _, id := range ids {
		_, _ = n.Ctr(ctx, "tasks", "kill", "-a", "-s", "SIGKILL", id)
	}
	var errs []error
	for _, id := range ids {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := n.Ctr(ctx, "tasks", "delete", id)
			if err == nil || strings.Contains(err.Error(), "not found") || time.Now().After(deadline) {
				if err != nil && !strings.Contains(err.Error(), "not found") {
					errs = append(errs, err)
				}
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	out, err = n.Ctr(ctx, "containers", "ls", "-q")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, id := range strings.Fields(string(out)) {
		if _, err := n.Ctr(ctx, "containers", "delete", id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func writeFiles(files map[string]string) error {
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ContainerdPaths are where a real node's containerd keeps its state.
type ContainerdPaths struct {
	Root, State, Socket, Opt, CNIConfDir string
}

// ContainerdConfig is the configuration of a real node's containerd 1.6
// (config version 2): the CRI with runc, the CNI plugins of Debian's
// containernetworking-plugins, and a local pause image.
func ContainerdConfig(p ContainerdPaths, pauseImage string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # The machine's root lacks CAP_SYS_RESOURCE: without this every sandbox
  # fails in runc ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
`, p.Root, p.State, p.Socket, p.Socket+".ttrpc", p.Opt, pauseImage, p.CNIConfDir)
}

// KubeletPaths are the files a real node's kubelet configuration names.
type KubeletPaths struct {
	RuntimeSocket, PodLogsDir, ClientCAFile string
}

// KubeletConfig is a real node's KubeletConfiguration, as JSON (which is
// YAML), with extra (YAML) merged over it.
func KubeletConfig(p KubeletPaths, nodeIP, extra string) ([]byte, error) {
	config := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// From 1.35 the kubelet refuses cgroup v1, which these hosts have.
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"failSwapOn":               false,
		"containerRuntimeEndpoint": "unix://" + p.RuntimeSocket,
		"address":                  nodeIP,
		"healthzBindAddress":       "127.0.0.1",
		"readOnlyPort":             0,
		"podLogsDir":               p.PodLogsDir,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": p.ClientCAFile},
		},
		"authorization": map[string]any{"mode": "Webhook"},
		// This is a test host's disk, shared with everything else: only
		// evict or collect images when it is really full.
		"evictionHard":                map[string]any{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"serializeImagePulls":         false,
		"shutdownGracePeriod":         "0s",
		"syncFrequency":               "10s",
		"fileCheckFrequency":          "10s",
		"nodeStatusUpdateFrequency":   "5s",
	}
	if extra != "" {
		var more map[string]any
		if err := yaml.Unmarshal([]byte(extra), &more); err != nil {
			return nil, fmt.Errorf("extra kubelet configuration: %w", err)
		}
		for k, v := range more {
			config[k] = v
		}
	}
	return json.MarshalIndent(config, "", "  ")
}

// NodeKubeconfig writes a kubeconfig for the kubelet of the Node name
// (system:node:NAME in system:nodes, as the Node authorizer wants), reaching
// kube-apiserver at server.
func (e *Env) NodeKubeconfig(path, name, server string) error {
	certPEM, keyPEM, err := e.ClientCertificate("system:node:"+name, "system:nodes")
	if err != nil {
		return err
	}
	return WriteKubeconfig(path, &rest.Config{
		Host:            server,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.pki.caPEM, CertData: certPEM, KeyData: keyPEM},
	})
}
