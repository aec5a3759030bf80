package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/test/testenv"
)

// The drain slot coordinator as deploy/coordinator.yaml runs it: its
// ServiceAccount, and the Lease it leads by (its --leader-election-name,
// which the Deployment leaves at the default).
const (
	coordinatorServiceAccount = "node-agent-coordinator"
	coordinatorUser           = "system:serviceaccount:" + agentNamespace + ":" + coordinatorServiceAccount
	coordinatorElectionLease  = "node-agent-coordinator"
	// coordinatorPodLabel selects the Deployment's pods.
	coordinatorPodLabel = "app.kubernetes.io/name=node-agent-coordinator"
)

// deployedCoordinator is a node-agent-coordinator process that runs as one
// pod of deploy/'s Deployment: with a token of its ServiceAccount bound to
// that pod (as the kubelet mounts it), $POD_NAME the pod's name, and the
// shipped ConfigMap's config.yaml as --config. kwok runs the pod itself
// (nothing in it), so the test bed runs its process.
type deployedCoordinator struct {
	// Identity is its name in the leader election: the pod's.
	Identity    string
	Pod         *corev1.Pod
	MetricsAddr string
	LogPath     string
	cmd         *exec.Cmd
	done        chan error
}

var coordinatorBuild struct {
	once sync.Once
	path string
	err  error
}

// deployedCoordinatorBinary returns node-agent-coordinator beside the
// node-agent the tests run, as `make build` puts it, or builds it there
// when that node-agent was built by the tests themselves.
func deployedCoordinatorBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(filepath.Dir(agentBinary), "node-agent-coordinator")
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o111 != 0 {
		return path
	}
	if p := os.Getenv(testenv.AgentBinaryEnv); p != "" {
		t.Fatalf("$%s=%s has no node-agent-coordinator beside it (%s); run `make build`, which builds both", testenv.AgentBinaryEnv, p, path)
	}
	coordinatorBuild.once.Do(func() {
		cmd := exec.Command("go", "build", "-tags", "libvirt_dlopen", "-o", path, testenv.ModulePath+"/cmd/node-agent-coordinator")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if msg, err := cmd.CombinedOutput(); err != nil {
			coordinatorBuild.err = fmt.Errorf("building node-agent-coordinator: %w\n%s", err, msg)
			return
		}
		coordinatorBuild.path = path
	})
	if coordinatorBuild.err != nil {
		t.Fatal(coordinatorBuild.err)
	}
	return coordinatorBuild.path
}

// coordinatorPods returns the running pods of the coordinator's
// Deployment, as admin.
func coordinatorPods(t *testing.T, env *testenv.Env) []corev1.Pod {
	t.Helper()
	pods, err := env.Client().CoreV1().Pods(agentNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: coordinatorPodLabel})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// coordinatorToken issues a token of pod's ServiceAccount bound to pod, as
// the kubelet mounts into it.
func coordinatorToken(t *testing.T, env *testenv.Env, pod *corev1.Pod) string {
	t.Helper()
	tr, err := env.Client().CoreV1().ServiceAccounts(pod.Namespace).CreateToken(t.Context(), pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// startDeployedCoordinator runs node-agent-coordinator as pod, one of the
// Deployment's pods, reading configYAML (the ConfigMap's config.yaml), and
// waits until it leads. Every request it makes goes out with the shipped
// RBAC and admission policies, so a refused one is a failure: it is stopped
// with SIGTERM when t ends, and its log must hold no refusal.
func startDeployedCoordinator(t *testing.T, env *testenv.Env, pod *corev1.Pod, configYAML string) *deployedCoordinator {
	t.Helper()
	if pod.Spec.ServiceAccountName != coordinatorServiceAccount {
		t.Fatalf("pod %s runs as %s, not %s", pod.Name, pod.Spec.ServiceAccountName, coordinatorServiceAccount)
	}
	cfg, _, err := config.Parse([]byte(configYAML), config.Default())
	if err != nil {
		t.Fatalf("the coordinator's config.yaml: %v", err)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "coordinator.kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, env.TokenConfig(coordinatorToken(t, env, pod))); err != nil {
		t.Fatal(err)
	}
	c := &deployedCoordinator{Identity: pod.Name, Pod: pod, MetricsAddr: testenv.FreeAddr(t),
		LogPath: filepath.Join(dir, "node-agent-coordinator.log"), done: make(chan error, 1)}
	logFile, err := os.Create(c.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	// As the Deployment runs it: --config and $POD_NAME; the addresses are
	// free ports, since several processes share this host.
	c.cmd = exec.Command(deployedCoordinatorBinary(t), "--config", cfgFile, "--kubeconfig", kubeconfig,
		"--metrics-bind-address", c.MetricsAddr, "--health-probe-bind-address", testenv.FreeAddr(t), "--log-level", "debug")
	c.cmd.Env = append(os.Environ(), "POD_NAME="+pod.Name)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting node-agent-coordinator: %v", err)
	}
	go func() {
		c.done <- c.cmd.Wait()
		logFile.Close()
	}()
	t.Logf("node-agent-coordinator (pid %d) runs as %s with a token bound to pod %s on %s; log %s",
		c.cmd.Process.Pid, coordinatorUser, pod.Name, pod.Spec.NodeName, c.LogPath)
	t.Cleanup(func() {
		if err := c.Stop(t); err != nil {
			t.Errorf("node-agent-coordinator exited with %v after SIGTERM, want status 0", err)
		}
		if lines := c.refusals(); lines != "" {
			t.Errorf("node-agent-coordinator, running as %s, was refused requests:\n%s", coordinatorUser, lines)
		}
		if t.Failed() {
			t.Logf("node-agent-coordinator log:\n%s", testenv.TailFile(c.LogPath, 40))
		}
	})

	testenv.WaitFor(t, time.Minute, c.Identity+" leading (election Lease "+cfg.Slots.Namespace+"/"+coordinatorElectionLease+")", func() (bool, error) {
		if err, exited := c.exited(); exited {
			return false, fmt.Errorf("node-agent-coordinator exited (%v):\n%s", err, testenv.TailFile(c.LogPath, 20))
		}
		l, err := env.Client().CoordinationV1().Leases(cfg.Slots.Namespace).Get(t.Context(), coordinatorElectionLease, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return ptr.Deref(l.Spec.HolderIdentity, "") == c.Identity, nil
	})
	return c
}

func (c *deployedCoordinator) exited() (error, bool) {
	select {
	case err := <-c.done:
		c.done <- err
		return err, true
	default:
		return nil, false
	}
}

// Stop sends SIGTERM and returns the exit error; it kills the process and
// fails t when it still runs 30 s later.
func (c *deployedCoordinator) Stop(t *testing.T) error {
	t.Helper()
	if err, exited := c.exited(); exited {
		return err
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		t.Errorf("node-agent-coordinator still running 30s after SIGTERM; killed\n%s", testenv.TailFile(c.LogPath, 40))
		return nil
	}
}

// Log returns its log so far.
func (c *deployedCoordinator) Log() string {
	b, err := os.ReadFile(c.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// refusals returns the lines of its log that report a refused request.
func (c *deployedCoordinator) refusals() string {
	var out []string
	for _, l := range strings.Split(c.Log(), "\n") {
		for _, bad := range []string{"forbidden", "Forbidden", "Unauthorized", " 403", "is invalid"} {
			if strings.Contains(l, bad) {
				out = append(out, l)
				break
			}
		}
	}
	if len(out) > 10 {
		out = out[:10]
	}
	return strings.Join(out, "\n")
}
