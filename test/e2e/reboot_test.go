//go:build linux

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// node-agent's steps, by the structured key its log line carries (not by
// the wording of the message, which may change).
var (
	// pkg/shutdown/guard.go, handleShutdown: PrepareForShutdown(true) arrived.
	logDrainStarted = logKey{"event", "ShutdownDrainStarted"}
	// pkg/selfdrain/engine.go, drainRun.succeed: logged after the Succeeded
	// status is written, when the engine's own watch saw the last pod go.
	logNodeDrained = logKey{"event", "DrainSucceeded"}
	// pkg/shutdown/guard.go: Drainer.Drain returned complete, so its final
	// status (drainedInTime) is written; the lock goes next.
	logDrainedForShutdown = logKey{"outcome", "drained"}
	// pkg/shutdown/guard.go: Drain returned incomplete before the deadline.
	logDrainIncomplete = logKey{"outcome", "incomplete"}
	// pkg/shutdown/guard.go: the Guard's own deadline came first.
	logDrainDeadline = logKey{"outcome", "timeout"}
	// pkg/shutdown/guard.go, release: logged after the inhibitor fd is
	// closed, so logind may already have gone ahead.
	logReleased = logKey{"event", "DelayLockReleased"}
)

// systemd-logind's lines, which carry no keys: matched by their text.
const (
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
		pdb:          testenv.MaxUnavailable(3),
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
	if code != testenv.ExitReboot {
		t.Errorf("systemd-nspawn exited %d, want %d (reboot)", code, testenv.ExitReboot)
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
	if e, i := j.find(logindSaid(logLogindTimeout)); i >= 0 {
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
	if !node.Spec.Unschedulable || !testenv.HasTaint(node, testenv.DrainTaint) {
		t.Errorf("node-1 while the host is down: unschedulable=%t taints=%v; want cordoned and tainted", node.Spec.Unschedulable, node.Spec.Taints)
	}
	if c := condition(node, selfdrain.ShuttingDownCondition); c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "in time") {
		t.Errorf("condition %s = %+v, want True saying the pods drained in time", selfdrain.ShuttingDownCondition, c)
	}
	pods, err := testenv.PodsOn(ctx, b.client, rebootNS, rebootNode)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Labels["app"] != rebootDaemon {
		t.Errorf("pods left on node-1: %v, want only the DaemonSet's", podNames(pods))
	}
	testenv.WaitDeploymentAvailable(ctx, t, b.client, rebootNS, rebootApp, rebootReplicas)
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
		return !n.Spec.Unschedulable && !testenv.HasTaint(n, testenv.DrainTaint) && st.EndTime != nil, nil
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
		pdb:          testenv.MinAvailable(rebootReplicas),
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
	if code != testenv.ExitReboot {
		t.Errorf("systemd-nspawn exited %d, want %d (reboot)", code, testenv.ExitReboot)
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
	if _, i := j.find(logDrainIncomplete.in); i < 0 {
		how = "the Guard's deadline"
		j.agent(t, logDrainDeadline)
	}

	// Released by the agent, not by logind's timeout: logind did not log
	// that its delay ran out, by its own clock it went ahead before its
	// delay was up, and the container was down before then too. The last
	// includes the container's own shutdown after the release (about 0.3s,
	// seconds on a loaded machine); the agent gives up its drain early
	// enough (safety margin and status reserve) to leave room for that.
	if e, i := j.find(logindSaid(logLogindTimeout)); i >= 0 {
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
