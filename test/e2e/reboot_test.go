//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// The scene of issue 6: kwok node node-1 carries a Deployment of 30 pods and
// a DaemonSet pod; node-2 and node-3 take the evicted pods.
const (
	rebootNode     = "node-1"
	rebootNS       = "work"
	rebootApp      = "web"
	rebootReplicas = 30
	rebootDaemon   = "ds"
	drainTaintKey  = "kubevirt.io/drain" // drain.taintKey's default

	agentUnit = "node-agent.service"
	// rebootHangGuard bounds one test, so a stuck container or control plane
	// fails it instead of hanging `go test`. It is not a performance bound.
	rebootHangGuard = 8 * time.Minute
)

// Lines matched in the journal of the boot that went down. Each program's
// lines keep their order there, and node-agent's carry its own time= field,
// taken before the line is written; every time is on the host's clock (the
// container shares the kernel). So the journal orders the agent's steps
// against logind's and against the container's exit, which no watch of the
// apiserver can do once the agent is gone.
const (
	// pkg/shutdown/guard.go, handleShutdown: PrepareForShutdown(true) arrived.
	logDrainStarted = `msg="Host is shutting down; draining the node before releasing the delay lock"`
	// pkg/selfdrain/engine.go, Drain: logged after the Succeeded status is
	// written, when the engine's own watch saw the last pod go.
	logNodeDrained = `msg="Node drained"`
	// pkg/shutdown/guard.go: Drainer.Drain returned complete, so its final
	// status (drainedInTime) is written; the lock goes next.
	logDrainedForShutdown = `msg="Node drained for shutdown; releasing the delay lock"`
	// pkg/shutdown/guard.go: Drain returned incomplete before the deadline.
	logDrainIncomplete = `msg="Shutdown drain ended incomplete; releasing the delay lock"`
	// pkg/shutdown/guard.go: the Guard's own deadline came first.
	logDrainDeadline = `msg="Shutdown drain deadline reached; releasing the delay lock so the host can go down"`
	// pkg/shutdown/guard.go, release: logged after the inhibitor fd is
	// closed, so logind may already have gone ahead.
	logReleased = `msg="Released the systemd-logind shutdown delay lock"`

	// systemd-logind (systemd 252 in the rootfs) when it accepts `systemctl
	// reboot`, sends PrepareForShutdown(true) and starts waiting for the
	// delay locks.
	logLogindScheduled = "The system will reboot now!"
	// systemd-logind when it hands the reboot to systemd: the delay locks
	// are gone, or its InhibitDelayMaxSec ran out.
	logLogindRebooting = "System is rebooting."
	// systemd-logind (src/login/logind-dbus.c, manager_dispatch_delayed)
	// when InhibitDelayMaxSec ran out with a delay lock still held: the
	// reboot went ahead because of logind's timeout, not because the agent
	// let it.
	logLogindTimeout = "inhibitor timeout is reached"
)

// TestRebootDrainsNodeFirst is the end-to-end case of issue 6: node-agent
// runs as a systemd service with its default settings in a container with
// real systemd and logind, and `systemctl reboot` waits until the agent has
// drained its Node, with the PodDisruptionBudget honoured; after the reboot
// the agent uncordons the Node.
func TestRebootDrainsNodeFirst(t *testing.T) {
	ctx := rebootContext(t)
	const inhibitDelay = 120 * time.Second
	b := newRebootBed(ctx, t, bedConfig{
		pdb:          policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(3))},
		allowed:      3,
		inhibitDelay: inhibitDelay,
	})
	b.bootAgent(ctx, t)
	lock, tLock := b.waitInhibitor(ctx, t)
	t.Logf("before the reboot, systemd-inhibit --list shows: %s", lock)
	b.checkGuardMetrics(ctx, t, inhibitDelay)

	w := watchDrain(ctx, t, b.client)
	tReboot, exited := b.reboot(ctx, t, w)
	tPreparing := b.waitPreparing(ctx, t)
	if line, ok := b.inhibitor(ctx); ok {
		t.Logf("while logind prepares for the reboot it still lists: %s", line)
	}
	code, tExit := b.waitExit(ctx, t, exited)
	if code != ExitReboot {
		t.Errorf("systemd-nspawn exited %d, want %d (reboot)", code, ExitReboot)
	}
	snap := w.settle(ctx, t, "the watch to see node-1 cordoned, emptied and Succeeded", func(s drainSnapshot) bool {
		return s.cordoned.seen() && s.lastPodGone.seen() && s.succeeded.seen()
	})
	j := readJournal(t, b.c)
	drainStarted, _ := j.agent(t, logDrainStarted)
	nodeDrained, _ := j.agent(t, logNodeDrained)
	drained, iDrained := j.agent(t, logDrainedForShutdown)
	released, iReleased := j.agent(t, logReleased)
	scheduled := j.logind(t, logLogindScheduled)
	rebooting := j.logind(t, logLogindRebooting)

	// The order of issue 6, each step on its own evidence.
	// 1. logind waits on the agent's lock: listed before the reboot (above),
	// and logind went ahead only after the agent's drain had finished.
	if !tLock.Before(tReboot) {
		t.Errorf("the agent's delay lock was not listed before the reboot")
	}
	if !drained.Logged.Before(rebooting.At) {
		t.Errorf("logind went ahead with the reboot at %s, before the agent had drained the node at %s", stampOf(rebooting.At), stampOf(drained.Logged))
	}
	// 2. node-1 is cordoned, after the reboot was asked for and before any
	// pod was evicted.
	if !snap.cordoned.At.After(tReboot) {
		t.Errorf("node-1 cordoned at %s, before systemctl reboot at %s", stampOf(snap.cordoned.At), stampOf(tReboot))
	}
	if !before(snap.cordoned, snap.firstPodGone) {
		t.Errorf("a Deployment pod left node-1 (resourceVersion %d) before it was cordoned (%d)", snap.firstPodGone.RV, snap.cordoned.RV)
	}
	// 3. Every Deployment pod leaves, the PDB honoured throughout.
	if snap.minAvailable < rebootReplicas-3 {
		t.Errorf("available pods fell to %d during the drain, below the PDB's %d (maxUnavailable 3)", snap.minAvailable, rebootReplicas-3)
	}
	// 4. Then the status says Succeeded, trigger shutdown.
	if !before(snap.lastPodGone, snap.succeeded) {
		t.Errorf("status Succeeded (resourceVersion %d) was written before the last Deployment pod left node-1 (%d)", snap.succeeded.RV, snap.lastPodGone.RV)
	}
	// 5. Only then is the lock released and the container exits. The
	// agent logs "drained for shutdown" after its last status write.
	if iReleased < iDrained {
		t.Errorf("the agent released its lock before its drain had finished")
	}
	if !drained.Logged.Before(tExit) || !released.At.Before(tExit) {
		t.Errorf("the container exited at %s, before the agent had drained (%s) and released its lock (%s)", stampOf(tExit), stampOf(drained.Logged), stampOf(released.At))
	}
	if e, i := j.search(logLogindTimeout, isLogind); i >= 0 {
		t.Errorf("logind's InhibitDelayMaxSec ran out at %s with the lock still held: %s", stampOf(e.At), e.Msg)
	}

	// What the Node records while the host is down.
	node, err := b.client.CoreV1().Nodes().Get(ctx, rebootNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := mustStatus(t, node)
	t.Logf("status after the shutdown drain: %s", st.Encode())
	if st.Phase != selfdrain.PhaseSucceeded || st.Trigger != selfdrain.TriggerShutdown || st.DrainedInTime == nil || !*st.DrainedInTime {
		t.Errorf("status %s/%s drainedInTime=%s, want Succeeded/shutdown drainedInTime=true", st.Phase, st.Trigger, fmtBool(st.DrainedInTime))
	}
	if !st.SkippedConcurrencyWait || !st.CordonedByAgent || !st.TaintedByAgent || st.EndTime != nil {
		t.Errorf("status record: skippedConcurrencyWait=%t cordonedByAgent=%t taintedByAgent=%t endTime=%v; want true, true, true, none",
			st.SkippedConcurrencyWait, st.CordonedByAgent, st.TaintedByAgent, st.EndTime)
	}
	if st.EvictionPods != rebootReplicas || st.TotalPods != rebootReplicas+1 || len(st.PendingPods) != 0 {
		t.Errorf("status counts: evictionPods=%d totalPods=%d pending=%v; want %d, %d, none", st.EvictionPods, st.TotalPods, st.PendingPods, rebootReplicas, rebootReplicas+1)
	}
	if !node.Spec.Unschedulable || !hasDrainTaint(node) {
		t.Errorf("node-1 while the host is down: unschedulable=%t taints=%v; want cordoned and tainted", node.Spec.Unschedulable, node.Spec.Taints)
	}
	if c := condition(node, selfdrain.ShuttingDownCondition); c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "in time") {
		t.Errorf("condition %s = %+v, want True saying the pods drained in time", selfdrain.ShuttingDownCondition, c)
	}
	pods, err := podsOn(ctx, b.client, rebootNode)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Labels["app"] != rebootDaemon {
		t.Errorf("pods left on node-1: %v, want only the DaemonSet's", podNames(pods))
	}
	waitDeploymentAvailable(ctx, t, b.client, rebootNS, rebootApp, rebootReplicas)
	t.Logf("Events on node-1: %s", nodeEvents(ctx, b.client))

	t.Logf("timeline (host clock): lock listed %s; systemctl reboot %s; logind waits for delay locks %s; agent starts draining %s; logind preparing seen %s; "+
		"cordoned %s; first pod gone %s; last pod gone %s; status Succeeded seen %s; engine drained %s; drain done %s; lock released %s; logind reboots %s; container exit %s",
		stampOf(tLock), stampOf(tReboot), stampOf(scheduled.At), stampOf(drainStarted.Logged), stampOf(tPreparing),
		stampOf(snap.cordoned.At), stampOf(snap.firstPodGone.At), stampOf(snap.lastPodGone.At), stampOf(snap.succeeded.At),
		stampOf(nodeDrained.Logged), stampOf(drained.Logged), stampOf(released.Logged), stampOf(rebooting.At), stampOf(tExit))
	t.Logf("PDB: at least %d pods available over %d samples during the drain (maxUnavailable 3 of %d)", snap.minAvailable, snap.samples, rebootReplicas)
	t.Logf("measured: systemctl reboot to container exit %s; drain %s (agent's PrepareForShutdown to engine drained; status startTime to lastUpdate %s, whole seconds); "+
		"logind held the reboot for %s",
		d(tExit.Sub(tReboot)), d(nodeDrained.Logged.Sub(drainStarted.Logged)), statusSpan(st), d(rebooting.At.Sub(scheduled.At)))
	t.Logf("measured: release overhead: last pod gone (seen by the test) to lock released %s, engine drained to lock released %s, lock released to container exit %s; last pod gone to container exit %s",
		d(released.Logged.Sub(snap.lastPodGone.At)), d(released.Logged.Sub(nodeDrained.Logged)), d(tExit.Sub(released.Logged)), d(tExit.Sub(snap.lastPodGone.At)))

	// The host is back: the agent starts again and undoes its shutdown
	// drain, because no maintenance was requested.
	tBoot := time.Now()
	b.bootAgent(ctx, t)
	waitFor(ctx, t, "node-1 to be uncordoned after the reboot", func() (bool, error) {
		n, err := b.client.CoreV1().Nodes().Get(ctx, rebootNode, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st, err := selfdrain.ParseStatus(n)
		if err != nil || st == nil {
			return false, err
		}
		return !n.Spec.Unschedulable && !hasDrainTaint(n) && st.EndTime != nil, nil
	})
	tUncordoned := time.Now()
	node, err = b.client.CoreV1().Nodes().Get(ctx, rebootNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []corev1.NodeConditionType{selfdrain.ShuttingDownCondition, selfdrain.ConditionType} {
		if c := condition(node, typ); c != nil {
			t.Errorf("condition %s still on node-1 after the reboot: %+v", typ, c)
		}
	}
	t.Logf("status after the reboot: %s", mustStatus(t, node).Encode())
	if _, ok := b.inhibitor(ctx); !ok {
		t.Errorf("the agent does not hold its delay lock again after the reboot")
	}
	t.Logf("measured: second boot to node-1 uncordoned %s", d(tUncordoned.Sub(tBoot)))
}

// TestRebootReleasesLockAtDeadline: a PodDisruptionBudget allows no eviction,
// so the drain cannot finish. The agent gives up at its deadline (logind's
// delay minus the safety margin) and releases the lock itself, before
// logind's own delay would; the host reboots and the Node records that the
// drain was incomplete.
func TestRebootReleasesLockAtDeadline(t *testing.T) {
	ctx := rebootContext(t)
	// Short, so the test is quick; the agent keeps its default
	// shutdown.safetyMargin (2s) and drain budget (5m, capped by this).
	const inhibitDelay = 15 * time.Second
	b := newRebootBed(ctx, t, bedConfig{
		pdb:          policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(rebootReplicas))},
		allowed:      0,
		inhibitDelay: inhibitDelay,
	})
	b.bootAgent(ctx, t)
	lock, _ := b.waitInhibitor(ctx, t)
	t.Logf("before the reboot, systemd-inhibit --list shows: %s", lock)
	b.checkGuardMetrics(ctx, t, inhibitDelay)

	w := watchDrain(ctx, t, b.client)
	tReboot, exited := b.reboot(ctx, t, w)
	b.waitPreparing(ctx, t)
	code, tExit := b.waitExit(ctx, t, exited)
	if code != ExitReboot {
		t.Errorf("systemd-nspawn exited %d, want %d (reboot)", code, ExitReboot)
	}
	snap := w.settle(ctx, t, "the watch to see node-1 cordoned and Failed", func(s drainSnapshot) bool {
		return s.cordoned.seen() && s.failed.seen()
	})
	j := readJournal(t, b.c)
	drainStarted, _ := j.agent(t, logDrainStarted)
	released, _ := j.agent(t, logReleased)
	scheduled := j.logind(t, logLogindScheduled)
	rebooting := j.logind(t, logLogindRebooting)
	how := "the drain returned incomplete"
	if _, i := j.search(logDrainIncomplete, isAgent); i < 0 {
		how = "the Guard's deadline"
		j.agent(t, logDrainDeadline)
	}

	// Released by the agent, not by logind's timeout: logind did not log
	// that its delay ran out, by its own clock it went ahead before its
	// delay was up, and the container was down before then too. The last
	// includes the container's own shutdown after the release (about 0.3s,
	// seconds on a loaded machine); the agent gives up its drain early
	// enough (safety margin and status reserve) to leave room for that.
	if e, i := j.search(logLogindTimeout, isLogind); i >= 0 {
		t.Errorf("logind's InhibitDelayMaxSec ran out at %s with the agent's lock still held: %s", stampOf(e.At), e.Msg)
	}
	if held := rebooting.At.Sub(scheduled.At); held >= inhibitDelay {
		t.Errorf("logind held the reboot for %s, its whole %s delay: the lock was not released by the agent", d(held), inhibitDelay)
	}
	// The exit time also counts the container's own shutdown, which depends
	// on the machine's load, so it is reported, not asserted: the two
	// checks above, from logind's own journal, are the proof.
	t.Logf("the container exited %s after systemctl reboot (logind's delay %s; logind held the reboot for %s; the agent released its lock %s after the reboot; the container's shutdown took %s after that)",
		d(tExit.Sub(tReboot)), inhibitDelay, d(rebooting.At.Sub(scheduled.At)), d(released.Logged.Sub(tReboot)), d(tExit.Sub(released.Logged)))

	// Had the Guard's deadline come first, the agent's last writes could
	// still be on their way to the apiserver when the container exited.
	node := finalNode(ctx, t, b.client, func(st *selfdrain.Status) bool { return st.DrainedInTime != nil })
	st := mustStatus(t, node)
	t.Logf("status after the shutdown drain: %s", st.Encode())
	if st.Phase != selfdrain.PhaseFailed || st.Trigger != selfdrain.TriggerShutdown || st.DrainedInTime == nil || *st.DrainedInTime {
		t.Errorf("status %s/%s drainedInTime=%s, want Failed/shutdown drainedInTime=false", st.Phase, st.Trigger, fmtBool(st.DrainedInTime))
	}
	if len(st.PendingPods) != rebootReplicas {
		t.Errorf("status lists %d pending pods, want all %d", len(st.PendingPods), rebootReplicas)
	}
	if c := condition(node, selfdrain.ShuttingDownCondition); c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "incomplete") {
		t.Errorf("condition %s = %+v, want True saying the drain was incomplete", selfdrain.ShuttingDownCondition, c)
	} else {
		t.Logf("condition %s: %s", c.Type, c.Message)
	}
	if !node.Spec.Unschedulable {
		t.Errorf("node-1 was not cordoned for the shutdown")
	}
	t.Logf("Events on node-1: %s", nodeEvents(ctx, b.client))
	if snap.firstPodGone.seen() || snap.minAvailable != rebootReplicas {
		t.Errorf("a pod left although the PDB allows no disruption: first gone at %s, at least %d available", stampOf(snap.firstPodGone.At), snap.minAvailable)
	}
	t.Logf("measured: systemctl reboot to container exit %s (logind's delay %s; logind held the reboot for %s); reboot to lock released %s, released by %s; "+
		"reboot to agent draining %s; lock released to container exit %s",
		d(tExit.Sub(tReboot)), inhibitDelay, d(rebooting.At.Sub(scheduled.At)), d(released.Logged.Sub(tReboot)), how,
		d(drainStarted.Logged.Sub(tReboot)), d(tExit.Sub(released.Logged)))
}

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
	c           *Container
	healthAddr  string
	metricsAddr string
}

func newRebootBed(ctx context.Context, t *testing.T, cfg bedConfig) *rebootBed {
	t.Helper()
	rootfs := RequirePrerequisites(t)
	if err := testenv.CheckBinaries(testenv.DefaultOptions()); err != nil && os.Getenv(EnvRequired) == "1" {
		// `make e2e` sets only NODE_AGENT_E2E; a missing control plane
		// must fail it too rather than skip.
		t.Fatalf("%v (a failure, not a skip, because %s=1)", err, EnvRequired)
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
	createDeployment(ctx, t, client, rebootNS, rebootApp, rebootReplicas, rebootNode)
	createDaemonSet(ctx, t, client, rebootNS, rebootDaemon)
	waitRunningOn(ctx, t, client, rebootNode, rebootReplicas+1)
	createPDB(ctx, t, client, rebootNS, rebootApp, cfg.pdb, rebootReplicas, cfg.allowed)
	// The targets come after the workload settled, so all of it starts on
	// node-1.
	if err := env.AddNodes(ctx, []string{"node-2", "node-3"}); err != nil {
		t.Fatal(err)
	}

	b := &rebootBed{client: client, healthAddr: freeLoopbackAddr(t), metricsAddr: freeLoopbackAddr(t)}
	b.c = New(t, Options{Rootfs: rootfs, Binds: []Bind{{Host: bin, Container: "/usr/local/bin/node-agent", ReadOnly: true}}})
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
func (b *rebootBed) inhibitor(ctx context.Context) (string, bool) {
	out, err := b.c.Exec(ctx, "systemd-inhibit", "--list", "--no-pager", "--no-legend")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		// WHO UID USER PID COMM WHAT WHY... MODE
		if len(f) >= 7 && f[0] == "node-agent" && f[5] == "shutdown" && f[len(f)-1] == "delay" {
			return strings.Join(f, " "), true
		}
	}
	return "", false
}

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
		"node_agent_shutdown_inhibitor_held":        1,
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
	if node.Spec.Unschedulable || hasDrainTaint(node) {
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

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// stamp is when the test saw a change, and the resourceVersion that made it.
type stamp struct {
	At time.Time
	RV uint64
}

func (s stamp) seen() bool { return !s.At.IsZero() }

// before reports whether a happened before b in the apiserver. The test's
// apiserver stores in etcd, whose resourceVersions are one revision counter
// across all objects, so they order a pod's deletion against a Node update
// exactly; times seen through two watches could be skewed by a loaded
// machine. (Clients of an arbitrary apiserver must treat resourceVersion as
// opaque; this test knows its backend.)
func before(a, b stamp) bool {
	if a.RV != 0 && b.RV != 0 {
		return a.RV < b.RV
	}
	return !a.At.After(b.At)
}

// drainWatch follows node-1 and the workload's pods through a shutdown drain.
// It keeps its own copy of the pods from the events, in order, rather than
// reading the informer's store, which may already be ahead of the event
// being handled and would hide a dip in the available pods.
type drainWatch struct {
	mu    sync.Mutex
	armed bool
	pods  map[types.UID]*corev1.Pod
	drainSnapshot
}

type drainSnapshot struct {
	cordoned, firstPodGone, lastPodGone, succeeded, failed stamp
	// onNode is the Deployment's pods still bound to node-1.
	onNode int
	// minAvailable is the fewest ready Deployment pods at any event since
	// arm.
	minAvailable, samples int
}

func watchDrain(ctx context.Context, t *testing.T, client kubernetes.Interface) *drainWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w := &drainWatch{pods: map[types.UID]*corev1.Pod{}}
	nodes := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + rebootNode
	}))
	pods := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(rebootNS))
	nodeInf := nodes.Core().V1().Nodes().Informer()
	podInf := pods.Core().V1().Pods().Informer()
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.node,
		UpdateFunc: func(_, obj any) { w.node(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.pod(obj, false) },
		UpdateFunc: func(_, obj any) { w.pod(obj, false) },
		DeleteFunc: func(obj any) { w.pod(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	nodes.Start(ctx.Done())
	pods.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		nodes.Shutdown()
		pods.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.HasSynced, podInf.HasSynced) {
		t.Fatal("watches of node-1 and its pods did not sync")
	}
	return w
}

// arm starts recording the drain's steps (the available pods are sampled
// from the start).
func (w *drainWatch) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = true
	w.minAvailable = w.available()
}

// settle waits until the watch has seen what cond wants: events that
// happened before the container exited may reach the test later on a loaded
// machine. The steps are ordered by resourceVersion, so a late arrival does
// not change the verdict.
func (w *drainWatch) settle(ctx context.Context, t *testing.T, what string, cond func(drainSnapshot) bool) drainSnapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var snap drainSnapshot
	waitFor(ctx, t, what, func() (bool, error) {
		snap = w.snapshot()
		return cond(snap), nil
	})
	return snap
}

func (w *drainWatch) snapshot() drainSnapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.drainSnapshot
}

func (w *drainWatch) node(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s := stamp{At: time.Now(), RV: resourceVersion(n.ObjectMeta)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed {
		return
	}
	if n.Spec.Unschedulable && !w.cordoned.seen() {
		w.cordoned = s
	}
	st, err := selfdrain.ParseStatus(n)
	if err != nil || st == nil || st.Trigger != selfdrain.TriggerShutdown || st.EndTime != nil {
		return
	}
	switch {
	case st.Phase == selfdrain.PhaseSucceeded && !w.succeeded.seen():
		w.succeeded = s
	case st.Phase == selfdrain.PhaseFailed && !w.failed.seen():
		w.failed = s
	}
}

func (w *drainWatch) pod(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Labels["app"] != rebootApp {
		return
	}
	s := stamp{At: time.Now(), RV: resourceVersion(p.ObjectMeta)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if deleted {
		delete(w.pods, p.UID)
	} else {
		w.pods[p.UID] = p
	}
	w.onNode = 0
	for _, q := range w.pods {
		if q.Spec.NodeName == rebootNode {
			w.onNode++
		}
	}
	// Sampled only once armed: while the informer syncs, its Add events
	// count the pods up from zero.
	if !w.armed {
		return
	}
	w.samples++
	w.minAvailable = min(w.minAvailable, w.available())
	if !deleted || p.Spec.NodeName != rebootNode {
		return
	}
	if !w.firstPodGone.seen() {
		w.firstPodGone = s
	}
	if w.onNode == 0 && !w.lastPodGone.seen() {
		w.lastPodGone = s
	}
}

// available counts the ready Deployment pods; w.mu is held.
func (w *drainWatch) available() int {
	n := 0
	for _, q := range w.pods {
		if podReady(q) {
			n++
		}
	}
	return n
}

func resourceVersion(m metav1.ObjectMeta) uint64 {
	rv, _ := strconv.ParseUint(m.ResourceVersion, 10, 64)
	return rv
}

// journal is the container's journal, read from the host with journalctl.
type journal []journalEntry

type journalEntry struct {
	// At is when journald received the line: never before it was logged,
	// and, journald running inside the container, before the container
	// exited.
	At time.Time
	// Logged is node-agent's own time= field (milliseconds), when it was
	// logged; At for lines of other programs.
	Logged time.Time
	Unit   string
	Ident  string
	Msg    string
}

// readJournal reads the container's persistent journal files, which works
// after the container has gone down. Read before the next boot, it holds the
// boot that went down and the ones before it.
func readJournal(t *testing.T, c *Container) journal {
	t.Helper()
	j, err := loadJournal(c)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func loadJournal(c *Container) (journal, error) {
	cmd := exec.Command("journalctl", "--directory="+c.JournalDir(), "--output=json", "--no-pager")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("journalctl --directory=%s: %v: %s", c.JournalDir(), err, strings.TrimSpace(stderr.String()))
	}
	var j journal
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			continue
		}
		us, err := strconv.ParseInt(journalField(raw["__REALTIME_TIMESTAMP"]), 10, 64)
		if err != nil {
			continue
		}
		e := journalEntry{
			At:    time.UnixMicro(us),
			Unit:  journalField(raw["_SYSTEMD_UNIT"]),
			Ident: journalField(raw["SYSLOG_IDENTIFIER"]),
			Msg:   journalField(raw["MESSAGE"]),
		}
		e.Logged = e.At
		if v, ok := strings.CutPrefix(e.Msg, "time="); ok {
			if at, err := time.Parse(time.RFC3339Nano, strings.Fields(v)[0]); err == nil {
				e.Logged = at
			}
		}
		j = append(j, e)
	}
	return j, sc.Err()
}

// journalField decodes a field of journalctl's JSON output: a string, or an
// array of bytes when the value is not printable UTF-8.
func journalField(m json.RawMessage) string {
	var s string
	if json.Unmarshal(m, &s) == nil {
		return s
	}
	var bs []int
	if json.Unmarshal(m, &bs) == nil {
		b := make([]byte, len(bs))
		for i, v := range bs {
			b[i] = byte(v)
		}
		return string(b)
	}
	return ""
}

// search returns the first line that match accepts and contains s, and its
// index (journal order, which keeps the order of one program's lines even
// when journald gives them the same time); -1 when there is none.
func (j journal) search(s string, match func(journalEntry) bool) (journalEntry, int) {
	for i, e := range j {
		if match(e) && strings.Contains(e.Msg, s) {
			return e, i
		}
	}
	return journalEntry{}, -1
}

func isAgent(e journalEntry) bool  { return e.Unit == agentUnit }
func isLogind(e journalEntry) bool { return e.Ident == "systemd-logind" }

// agent returns node-agent's first line containing s, failing the test when
// there is none.
func (j journal) agent(t *testing.T, s string) (journalEntry, int) {
	t.Helper()
	e, i := j.search(s, isAgent)
	if i < 0 {
		t.Fatalf("node-agent never logged %s", s)
	}
	return e, i
}

// logind returns systemd-logind's first line containing s, failing the test
// when there is none.
func (j journal) logind(t *testing.T, s string) journalEntry {
	t.Helper()
	e, i := j.search(s, isLogind)
	if i < 0 {
		t.Fatalf("systemd-logind never logged %q", s)
	}
	return e
}

// agentLog is node-agent's part of the journal, for failure reports.
func agentLog(c *Container) string {
	j, err := loadJournal(c)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range j {
		if isAgent(e) || isLogind(e) {
			fmt.Fprintf(&b, "%s %s: %s\n", e.At.Format("15:04:05.000000"), e.Ident, e.Msg)
		}
	}
	return b.String()
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

func hasDrainTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == drainTaintKey && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
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
