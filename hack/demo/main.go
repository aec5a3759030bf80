// Command demo is what `make demo` runs: a local control plane with three
// kwok nodes, node-agent for node-1 with this host's real CPU data, the CPU
// labels it writes, and a maintenance that drains a Deployment guarded by a
// PodDisruptionBudget, once node-agent-coordinator grants the drain slot. It
// stops everything it started before it exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/test/testenv"
)

const (
	node     = "node-1"
	ns       = "demo"
	app      = "web"
	replicas = 12
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("\n\033[1m==> %s\033[0m\n", fmt.Sprintf(format, args...))
}

func run(ctx context.Context) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(root, "bin")
	if dir := os.Getenv("NODE_AGENT_DEMO_BIN_DIR"); dir != "" {
		bin = dir // the integration test runs the demo with its own build
	}
	agentBin := filepath.Join(bin, "node-agent")
	coordinatorBin := filepath.Join(bin, "node-agent-coordinator")
	for _, b := range []string{agentBin, coordinatorBin} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s missing: run `make build` (make demo does)", b)
		}
	}
	logDir, err := os.MkdirTemp("", "node-agent-demo-")
	if err != nil {
		return err
	}

	step("Starting a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
	opts := testenv.DefaultOptions()
	opts.BinDir = bin
	opts.LogDir = logDir
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	start := time.Now()
	env, err := testenv.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping everything the demo started")
		if err := env.Stop(); err != nil {
			fmt.Println("  stop:", err)
		}
		fmt.Printf("  component logs kept in %s\n", logDir)
	}()
	for _, c := range env.Components() {
		fmt.Printf("  %-24s pid %-7d %s\n", c.Name, c.PID, c.Version)
	}
	fmt.Printf("  ready in %s at %s\n", time.Since(start).Round(100*time.Millisecond), env.Server())
	c := env.Client()
	for _, n := range []string{"node-agent", ns} {
		if _, err := env.CreateNamespace(ctx, n); err != nil {
			return err
		}
	}
	if err := env.AddNodes(ctx, []string{node, "node-2", "node-3"}); err != nil {
		return err
	}
	fmt.Println("  kwok nodes node-1, node-2, node-3 are Ready")

	step("Placing a Deployment of %d pods on %s, with a PodDisruptionBudget allowing 2 at a time", replicas, node)
	// Keep node-2 and node-3 cordoned while the workload lands on node-1.
	for _, n := range []string{"node-2", "node-3"} {
		if err := setUnschedulable(ctx, c, n, true); err != nil {
			return err
		}
	}
	if err := createWorkload(ctx, c); err != nil {
		return err
	}
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) { return countRunning(ctx, c, node) == replicas, nil }); err != nil {
		return fmt.Errorf("workload did not start on %s: %w", node, err)
	}
	for _, n := range []string{"node-2", "node-3"} {
		if err := setUnschedulable(ctx, c, n, false); err != nil {
			return err
		}
	}
	printPlacement(ctx, c)

	step("Running node-agent-coordinator, which grants the drain slots (slots.limit: 1)")
	coordinatorLog, err := os.Create(filepath.Join(logDir, "node-agent-coordinator.log"))
	if err != nil {
		return err
	}
	defer coordinatorLog.Close()
	coordinatorHealth := freeAddr()
	coordinator := exec.Command(coordinatorBin, "--kubeconfig", env.KubeconfigPath(), "--identity", "demo",
		"--health-probe-bind-address", coordinatorHealth, "--metrics-bind-address", freeAddr())
	coordinator.Stdout, coordinator.Stderr = coordinatorLog, coordinatorLog
	coordinator.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := coordinator.Start(); err != nil {
		return err
	}
	defer func() {
		_ = coordinator.Process.Signal(syscall.SIGTERM)
		_ = coordinator.Wait()
	}()
	fmt.Printf("  node-agent-coordinator pid %d; log %s\n", coordinator.Process.Pid, coordinatorLog.Name())
	if err := waitFor(ctx, time.Minute, func() (bool, error) { return httpOK("http://" + coordinatorHealth + "/readyz"), nil }); err != nil {
		return fmt.Errorf("node-agent-coordinator did not become ready (see %s): %w", coordinatorLog.Name(), err)
	}

	step("Running node-agent for %s with this host's CPU data (cpuid and the embedded libvirt)", node)
	healthAddr, metricsAddr := freeAddr(), freeAddr()
	stateDir := filepath.Join(logDir, "state")
	agentLog, err := os.Create(filepath.Join(logDir, "node-agent.log"))
	if err != nil {
		return err
	}
	defer agentLog.Close()
	agent := exec.Command(agentBin, "run", "--kubeconfig", env.KubeconfigPath(), "--node-name", node,
		"--health-probe-bind-address", healthAddr, "--metrics-bind-address", metricsAddr,
		"--state-dir", stateDir, "--libvirt-uri", "qemu:///embed?root="+stateDir+"/libvirt")
	agent.Stdout, agent.Stderr = agentLog, agentLog
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agent.Start(); err != nil {
		return err
	}
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		_ = agent.Wait()
	}()
	fmt.Printf("  node-agent pid %d; log %s\n", agent.Process.Pid, agentLog.Name())
	if err := waitFor(ctx, time.Minute, func() (bool, error) { return httpOK("http://" + healthAddr + "/readyz"), nil }); err != nil {
		return fmt.Errorf("node-agent did not become ready (see %s): %w", agentLog.Name(), err)
	}
	fmt.Println("  ready: /readyz answers ok")

	step("CPU labels node-agent wrote on %s", node)
	var labels map[string]string
	_ = waitFor(ctx, 2*time.Minute, func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		labels = cpuLabels(n.Labels)
		return len(labels) > 0, nil
	})
	printLabels(labels)

	step("node-agent maintenance start %s --reason 'demo: firmware update' --wait", node)
	cli := func(args ...string) error {
		cmd := exec.CommandContext(ctx, agentBin, append([]string{"maintenance"}, append(args, "--kubeconfig", env.KubeconfigPath())...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		return cmd.Run()
	}
	if err := cli("start", node, "--reason", "demo: firmware update", "--wait"); err != nil {
		return err
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("  %s: unschedulable=%t, taints=%s\n", node, n.Spec.Unschedulable, taintList(n))
	printPlacement(ctx, c)
	if err := cli("status", node); err != nil {
		return err
	}

	step("node-agent maintenance stop %s --wait", node)
	if err := cli("stop", node, "--wait"); err != nil {
		return err
	}
	n, err = c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("  %s: unschedulable=%t, taints=%s\n", node, n.Spec.Unschedulable, taintList(n))

	step("What to try next")
	fmt.Print(`  bin/node-agent labels                 the labels this host gets, no cluster needed
  bin/node-agent labels -o json         the same as a flat map
  bin/node-agent cpu-baseline --help    the newest CPU model a set of nodes shares
  bin/node-agent maintenance --help     the maintenance API
  bin/node-agent run --help             every flag; each is also a --config key
  make test                             unit, integration (real control plane) and end-to-end (real systemd) tests
`)
	return nil
}

func createWorkload(ctx context.Context, c kubernetes.Interface) error {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
				Spec: corev1.PodSpec{
					Containers:  []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}},
					Tolerations: []corev1.Toleration{testenv.KwokToleration()},
				},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(2)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}
	_, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	return err
}

func setUnschedulable(ctx context.Context, c kubernetes.Interface, name string, v bool) error {
	_, err := c.CoreV1().Nodes().Patch(ctx, name, "application/merge-patch+json",
		[]byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, v)), metav1.PatchOptions{})
	return err
}

func countRunning(ctx context.Context, c kubernetes.Interface, node string) int {
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range l.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

func printPlacement(ctx context.Context, c kubernetes.Interface) {
	var parts []string
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		parts = append(parts, fmt.Sprintf("%s: %d", n, countRunning(ctx, c, n)))
	}
	fmt.Printf("  Running %s pods per node: %s\n", app, strings.Join(parts, ", "))
}

// cpuLabels keeps the labels node-agent's labeller owns.
func cpuLabels(all map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range all {
		if labeller.IsOwnedKey(k) {
			out[k] = v
		}
	}
	return out
}

func printLabels(labels map[string]string) {
	if len(labels) == 0 {
		fmt.Println("  (none yet)")
		return
	}
	groups := map[string][]string{}
	for k, v := range labels {
		prefix, name, _ := strings.Cut(k, "/")
		item := name
		if v != "true" {
			item += "=" + v
		}
		groups[prefix] = append(groups[prefix], item)
	}
	prefixes := make([]string, 0, len(groups))
	for p := range groups {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		sort.Strings(groups[p])
		fmt.Printf("  %s/ (%d)\n      %s\n", p, len(groups[p]), wrap(groups[p], 90))
	}
	fmt.Printf("  %d labels in all\n", len(labels))
}

func wrap(items []string, width int) string {
	var b strings.Builder
	line := 0
	for i, it := range items {
		if i > 0 {
			if line+len(it)+1 > width {
				b.WriteString("\n      ")
				line = 0
			} else {
				b.WriteString(" ")
				line++
			}
		}
		b.WriteString(it)
		line += len(it)
	}
	return b.String()
}

func taintList(n *corev1.Node) string {
	var out []string
	for _, t := range n.Spec.Taints {
		out = append(out, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}

func httpOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return errors.Join(ctx.Err(), err)
			}
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
