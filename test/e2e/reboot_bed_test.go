//go:build linux

package e2e

// The reboot tests' harness: the container with systemd, logind and node-agent as a
// unit, the control plane it reaches, and the steps of a reboot.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// rebootContext bounds a test by rebootHangGuard, and leaves a minute of go
// test's own -timeout for the cleanups (container, control plane).
func rebootContext(t *testing.T) context.Context {
	t.Helper()
	limit := rebootHangGuard
	if dl, ok := t.Deadline(); ok {
		limit = min(limit, time.Until(dl)-time.Minute)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return ctx
}

type bedConfig struct {
	pdb          policyv1.PodDisruptionBudgetSpec
	allowed      int32 // the disruptions the PDB allows once computed
	inhibitDelay time.Duration
}

// rebootBed is the real control plane with the workload on node-1, and a
// container whose systemd starts node-agent for node-1 at every boot.
type rebootBed struct {
	client      kubernetes.Interface
	c           *testenv.Container
	healthAddr  string
	metricsAddr string
}

func newRebootBed(ctx context.Context, t *testing.T, cfg bedConfig) *rebootBed {
	t.Helper()
	rootfs := testenv.RequireContainer(t)
	if err := testenv.CheckBinaries(testenv.DefaultOptions()); err != nil && os.Getenv(testenv.E2EEnv) == "1" {
		// `make e2e` sets only NODE_AGENT_E2E; a missing control plane
		// must fail it too rather than skip.
		t.Fatalf("%v (a failure, not a skip, because %s=1)", err, testenv.E2EEnv)
	}
	testenv.RequireBinaries(t, testenv.DefaultOptions())
	bin := agentBinary(t)
	env := testenv.StartForTest(t, testenv.DefaultOptions())
	client := env.Client()
	for _, ns := range []string{"node-agent", rebootNS} {
		if _, err := env.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.AddNode(ctx, rebootNode); err != nil {
		t.Fatal(err)
	}
	testenv.CreateDeployment(ctx, t, client, rebootNS, rebootApp, rebootReplicas, rebootNode)
	testenv.CreateDaemonSet(ctx, t, client, rebootNS, rebootDaemon)
	testenv.WaitRunningOn(ctx, t, client, rebootNS, rebootNode, rebootReplicas+1)
	testenv.CreatePDB(ctx, t, client, rebootNS, rebootApp, cfg.pdb, rebootReplicas, cfg.allowed)
	// The targets come after the workload settled, so all of it starts on
	// node-1.
	if err := env.AddNodes(ctx, []string{"node-2", "node-3"}); err != nil {
		t.Fatal(err)
	}

	b := &rebootBed{client: client, healthAddr: testenv.FreeAddr(t), metricsAddr: testenv.FreeAddr(t)}
	b.c = testenv.NewContainer(t, testenv.ContainerOptions{Rootfs: rootfs, Binds: []testenv.Bind{
		{Host: bin, Container: "/usr/local/bin/node-agent", ReadOnly: true},
		{Host: testenv.HelperBinary(bin), Container: "/usr/local/bin/node-agent-discover", ReadOnly: true},
	}})
	kubeconfig, err := os.ReadFile(env.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	// The agent runs as a DaemonSet would run it, with its defaults: only
	// the kubeconfig, the node name and the two listen addresses, on
	// loopback because the container shares the host's network.
	unit := fmt.Sprintf(`[Unit]
Description=node-agent for %[1]s (end-to-end test)
After=dbus.service systemd-logind.service

[Service]
ExecStart=/usr/local/bin/node-agent run --kubeconfig=/etc/node-agent/kubeconfig --node-name=%[1]s --metrics-bind-address=%[2]s --health-probe-bind-address=%[3]s
Restart=on-failure
RestartSec=1s

[Install]
WantedBy=multi-user.target
`, rebootNode, b.metricsAddr, b.healthAddr)
	logind := fmt.Sprintf("[Login]\nInhibitDelayMaxSec=%d\n", int(cfg.inhibitDelay.Seconds()))
	for _, f := range []struct {
		path string
		data string
		perm os.FileMode
	}{
		{"/etc/node-agent/kubeconfig", string(kubeconfig), 0o600},
		{"/etc/systemd/system/" + agentUnit, unit, 0o644},
		// Read by logind when it starts at boot.
		{"/etc/systemd/logind.conf.d/50-e2e.conf", logind, 0o644},
	} {
		if err := b.c.WriteFile(f.path, []byte(f.data), f.perm); err != nil {
			t.Fatal(err)
		}
	}
	// What `systemctl enable` would do.
	if err := b.c.Symlink("/etc/systemd/system/"+agentUnit, "/etc/systemd/system/multi-user.target.wants/"+agentUnit); err != nil {
		t.Fatal(err)
	}
	// Registered after New's cleanup, so it runs first, while the
	// container's journal is still mounted.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node-agent's and logind's journal (every boot):\n%s", agentLog(b.c))
		}
	})
	return b
}

// bootAgent boots the container and waits until the agent in it is ready.
func (b *rebootBed) bootAgent(ctx context.Context, t *testing.T) {
	t.Helper()
	bootReady(ctx, t, b.c)
	client := &http.Client{Timeout: 5 * time.Second}
	var last string
	waitFor(ctx, t, "node-agent's /readyz", func() (bool, error) {
		if !b.c.Running() {
			t.Fatalf("the container exited while waiting for node-agent; console:\n%s", b.c.Console())
		}
		resp, err := client.Get("http://" + b.healthAddr + "/readyz?verbose")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = strings.TrimSpace(string(body))
		return resp.StatusCode == http.StatusOK, nil
	})
	t.Logf("node-agent /readyz:\n%s", last)
}

// inhibitor returns the line of `systemd-inhibit --list` that is node-agent's
// shutdown delay lock.
func (b *rebootBed) inhibitor(ctx context.Context) (string, bool) { return b.c.DelayLock(ctx) }

// waitInhibitor waits until logind lists the agent's delay lock and returns
// that line and when it was seen.
func (b *rebootBed) waitInhibitor(ctx context.Context, t *testing.T) (string, time.Time) {
	t.Helper()
	var line string
	waitFor(ctx, t, "node-agent's delay lock in systemd-inhibit --list", func() (bool, error) {
		var ok bool
		line, ok = b.inhibitor(ctx)
		return ok, nil
	})
	return line, time.Now()
}

// checkGuardMetrics checks that the agent, with its default settings, reads
// the delay the test gave logind and holds the lock.
func (b *rebootBed) checkGuardMetrics(ctx context.Context, t *testing.T, inhibitDelay time.Duration) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.metricsAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := map[string]float64{
		"node_agent_shutdown_inhibit_delay_seconds": inhibitDelay.Seconds(),
		"node_agent_shutdown_delay_lock_held":       1,
	}
	for name, v := range want {
		got, ok := metricValue(string(body), name)
		if !ok || got != v {
			t.Errorf("metric %s = %v (found %t), want %v", name, got, ok, v)
		}
	}
}

func metricValue(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// reboot arms w, runs `systemctl reboot` in the container and returns when
// it was called and a channel that receives the time the container exited.
func (b *rebootBed) reboot(ctx context.Context, t *testing.T, w *drainWatch) (time.Time, <-chan time.Time) {
	t.Helper()
	exited := make(chan time.Time, 1)
	done := b.c.Exited()
	go func() {
		<-done
		exited <- time.Now()
	}()
	node, err := b.client.CoreV1().Nodes().Get(ctx, rebootNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.Unschedulable || testenv.HasTaint(node, testenv.DrainTaint) {
		t.Fatalf("node-1 is cordoned or tainted before the reboot: unschedulable=%t taints=%v", node.Spec.Unschedulable, node.Spec.Taints)
	}
	w.arm()
	at := time.Now()
	b.c.MustExec(ctx, "systemctl", "reboot")
	return at, exited
}

// waitPreparing waits until logind announces the shutdown; the container
// still runs because the agent's lock holds it up.
func (b *rebootBed) waitPreparing(ctx context.Context, t *testing.T) time.Time {
	t.Helper()
	args := append([]string{"busctl", "get-property"}, strings.Fields(busctlLogind)...)
	args = append(args, "PreparingForShutdown")
	waitFor(ctx, t, "logind to prepare for the reboot", func() (bool, error) {
		if !b.c.Running() {
			t.Fatal("the container went down before logind reported PreparingForShutdown")
		}
		out, err := b.c.Exec(ctx, args...)
		return strings.TrimSpace(string(out)) == "b true", err
	})
	return time.Now()
}

func (b *rebootBed) waitExit(ctx context.Context, t *testing.T, exited <-chan time.Time) (int, time.Time) {
	t.Helper()
	code, err := b.c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return code, <-exited
}

// nodeEvents lists the Events recorded on node-1, oldest first, for the log:
// the agent records them asynchronously, and the last ones race the host
// going down, so the test reports rather than requires them.
func nodeEvents(ctx context.Context, client kubernetes.Interface) string {
	l, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + rebootNode})
	if err != nil {
		return err.Error()
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].CreationTimestamp.Before(&l.Items[j].CreationTimestamp) })
	var out []string
	for _, e := range l.Items {
		if e.Source.Component != "node-agent" {
			continue
		}
		s := e.Type + " " + e.Reason
		if e.Count > 1 {
			s += fmt.Sprintf(" (x%d)", e.Count)
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// finalNode returns node-1 once its status satisfies done, or as it is after
// half a minute, for the assertions to report.
func finalNode(ctx context.Context, t *testing.T, client kubernetes.Interface, done func(*selfdrain.Status) bool) *corev1.Node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, rebootNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := selfdrain.ParseStatus(n)
		if err == nil && st != nil && done(st) || time.Now().After(deadline) {
			return n
		}
		select {
		case <-ctx.Done():
			return n
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func mustStatus(t *testing.T, n *corev1.Node) *selfdrain.Status {
	t.Helper()
	st, err := selfdrain.ParseStatus(n)
	if err != nil {
		t.Fatal(err)
	}
	if st == nil {
		t.Fatalf("node %s has no %s annotation", n.Name, selfdrain.StatusAnnotation)
	}
	return st
}

func condition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func podNames(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func fmtBool(b *bool) string {
	if b == nil {
		return "unset"
	}
	return strconv.FormatBool(*b)
}

func stampOf(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format("15:04:05.000")
}

// statusSpan is the status's startTime to lastUpdate; both have whole
// seconds only.
func statusSpan(st *selfdrain.Status) string {
	if st.StartTime == nil || st.LastUpdate == nil {
		return "unknown"
	}
	return st.LastUpdate.Sub(st.StartTime.Time).String()
}

func d(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
