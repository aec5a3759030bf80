package selfdrain

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/config"
)

// Tests of the controller's decision and of a maintenance run's steps, one
// at a time, on the fake clientset and clock.

func TestDecide(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	running := &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation, StartTime: &t0}
	drained := &Status{Phase: PhaseSucceeded, Trigger: TriggerAnnotation, StartTime: &t0}
	shutdownDrained := &Status{Phase: PhaseSucceeded, Trigger: TriggerShutdown, StartTime: &t0}
	ended := &Status{Phase: PhaseSucceeded, Trigger: TriggerAnnotation, StartTime: &t0, EndTime: &t0}
	timedOut := &Status{Phase: PhaseFailed, Trigger: TriggerAnnotation, Reason: "kernel", StartTime: &t0}
	timedOutUndone := &Status{Phase: PhaseFailed, Trigger: TriggerAnnotation, Reason: "kernel", StartTime: &t0, UndoneAt: &t0}
	objectTimedOut := &Status{Phase: PhaseFailed, Trigger: TriggerNodeMaintenance, Reason: "NIC replacement", StartTime: &t0}
	rebootTimedOut := &Status{Phase: PhaseFailed, Trigger: TriggerReboot, Reason: "reboot coordinator: needed", StartTime: &t0}
	shutdownFailed := &Status{Phase: PhaseFailed, Trigger: TriggerShutdown, StartTime: &t0}
	rebootDrained := &Status{Phase: PhaseSucceeded, Trigger: TriggerReboot, Reason: "reboot coordinator: kernel", StartTime: &t0}
	rebootRunning := &Status{Phase: PhaseRunning, Trigger: TriggerReboot, Reason: "reboot coordinator: kernel", StartTime: &t0}
	rebootWaiting := &Status{Phase: PhaseWaiting, Trigger: TriggerReboot, Reason: "reboot coordinator: kernel", StartTime: &t0}
	objectRunning := &Status{Phase: PhaseRunning, Trigger: TriggerNodeMaintenance, Reason: "NIC replacement", StartTime: &t0}
	object := nmObject("nodemaintenance.medik8s.io", "nm", t0.Time)
	unreadable := errors.New("not valid status JSON")

	tests := []struct {
		name          string
		req           request
		st            *Status
		perr          error
		active        bool    // a drain runs
		activeTrigger Trigger // its trigger; the annotation when not set
		shutdown      bool
		uncordon      bool // drain.onTimeout uncordon
		want          decision
		wantTrigger   Trigger // of the run started
		wantReason    string
		wantStopped   bool // the running drain is taken from its place, to stop
	}{
		{name: "nothing asked, nothing recorded", want: keep},
		{name: "annotation asks", req: request{annotation: "kernel"}, want: startDrain, wantTrigger: TriggerAnnotation, wantReason: "kernel"},
		{name: "object asks", req: request{object: object}, want: startDrain, wantTrigger: TriggerNodeMaintenance, wantReason: "NIC replacement"},
		{name: "both ask: the annotation names the drain", req: request{annotation: "kernel", object: object}, want: startDrain, wantTrigger: TriggerAnnotation, wantReason: "kernel"},
		{name: "asked, a restarted agent resumes", req: request{annotation: "kernel"}, st: running, want: startDrain, wantTrigger: TriggerAnnotation},
		{name: "asked and draining", req: request{annotation: "kernel"}, st: running, active: true, want: keep},
		{name: "asked and drained", req: request{annotation: "kernel"}, st: drained, want: keep},
		{name: "asked, host back from a shutdown drain", req: request{annotation: "kernel"}, st: shutdownDrained, want: startDrain, wantTrigger: TriggerAnnotation},
		{name: "asked, record unreadable", req: request{annotation: "kernel"}, perr: unreadable, want: keep},
		{name: "no longer asked while draining", st: running, active: true, want: stopDrain},
		{name: "no longer asked, nothing runs", st: drained, want: endMaintenance},
		{name: "no longer asked, already ended", st: ended, want: keep},
		{name: "no longer asked, record unreadable", perr: unreadable, want: keep},
		{name: "the shutdown guard owns the engine", req: request{annotation: "kernel"}, shutdown: true, want: keep},
		{name: "timed out, the same request stays", req: request{annotation: "kernel"}, st: timedOut, want: keep},
		{name: "timed out, asked with another reason", req: request{annotation: "kernel 6.12"}, st: timedOut, want: startDrain, wantTrigger: TriggerAnnotation, wantReason: "kernel 6.12"},
		{name: "timed out, now asked by an object", req: request{object: object}, st: timedOut, want: startDrain, wantTrigger: TriggerNodeMaintenance},
		{name: "object timed out, the same object stays", req: request{object: object}, st: objectTimedOut, want: keep},
		{name: "reboot timed out while the coordinator's message changes", req: request{reboot: "reboot coordinator: draining"}, st: rebootTimedOut, want: keep},
		{name: "timed out, no longer asked", st: timedOut, want: endMaintenance},
		{name: "timed out, uncordon: undo", req: request{annotation: "kernel"}, st: timedOut, uncordon: true, want: undoAfterTimeout},
		{name: "timed out, uncordon, already undone", req: request{annotation: "kernel"}, st: timedOutUndone, uncordon: true, want: keep},
		{name: "timed out, uncordon, asked with another reason", req: request{annotation: "kernel 6.12"}, st: timedOutUndone, uncordon: true, want: startDrain, wantTrigger: TriggerAnnotation},
		{name: "reboot timed out, uncordon: left to the reboot coordinator", req: request{reboot: "reboot coordinator: draining"}, st: rebootTimedOut, uncordon: true, want: keep},
		{name: "asked, host back from a shutdown drain that failed", req: request{annotation: "kernel"}, st: shutdownFailed, want: startDrain, wantTrigger: TriggerAnnotation},
		{name: "a restarted agent resumes a reboot's drain as the reboot's, the annotation added since", req: request{reboot: "reboot coordinator: draining", annotation: "kernel"}, st: rebootRunning, want: startDrain, wantTrigger: TriggerReboot, wantReason: "reboot coordinator: draining"},
		{name: "a restarted agent resumes an object's drain as the object's", req: request{annotation: "kernel", object: object}, st: objectRunning, want: startDrain, wantTrigger: TriggerNodeMaintenance, wantReason: "NIC replacement"},
		{name: "reboot drained, the reboot still asks", req: request{reboot: "reboot coordinator: rebooting", annotation: "kernel"}, st: rebootDrained, want: keep},
		{name: "reboot done, the annotation keeps the node", req: request{annotation: "kernel"}, st: rebootDrained, want: handOver},
		{name: "reboot done, an object keeps the node", req: request{object: object}, st: rebootDrained, want: handOver},
		{name: "reboot done, nothing keeps the node", st: rebootDrained, want: endMaintenance},
		{name: "a reboot's drain no longer asked, the annotation takes it over", req: request{annotation: "kernel"}, st: rebootRunning, want: handOver},
		{name: "a reboot's drain no longer asked while it runs: stopped, the annotation takes it over", req: request{annotation: "kernel"}, st: rebootRunning, active: true, activeTrigger: TriggerReboot, want: handOver, wantStopped: true},
		{name: "a reboot's drain no longer asked while the annotation's run waits for its slot: the run goes on", req: request{annotation: "kernel"}, st: rebootTimedOut, active: true, want: handOver},
		{name: "a reboot's timed-out drain no longer asked, an object keeps the node", req: request{object: object}, st: rebootTimedOut, want: handOver},
		{name: "a reboot's drain waiting for its slot no longer asked, the annotation takes it over", req: request{annotation: "kernel"}, st: rebootWaiting, want: handOver},
		{name: "a reboot's drain under way, no longer asked, nothing keeps the node", st: rebootRunning, active: true, activeTrigger: TriggerReboot, want: stopDrain},
		{name: "a reboot's drain record unreadable, the annotation asks", req: request{annotation: "kernel"}, perr: unreadable, want: keep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			c, _ := h.controller()
			var before *maintenanceRun
			if tt.active {
				before = c.newRun(context.Background(), cmp.Or(tt.activeTrigger, TriggerAnnotation), "kernel")
				c.active = before
			}
			c.shutdown = tt.shutdown
			if tt.uncordon {
				h.engine.Config.OnTimeout = config.OnTimeoutUncordon
			}
			got, run := c.decide(context.Background(), tt.req, tt.st, tt.perr)
			if got != tt.want {
				t.Fatalf("decide = %d, want %d", got, tt.want)
			}
			switch got {
			case startDrain:
				if run == nil || c.active != run || run.trigger != tt.wantTrigger || (tt.wantReason != "" && run.reason != tt.wantReason) {
					t.Errorf("started %+v (active %p), want the active run for %s %q", run, c.active, tt.wantTrigger, tt.wantReason)
				}
			case stopDrain:
				if run != before || c.active != nil {
					t.Errorf("stop returned %p with %p active, want the running drain %p taken from its place", run, c.active, before)
				}
			case handOver:
				if tt.wantStopped && (run != before || c.active != nil) {
					t.Errorf("hand-over returned %p with %p active, want the reboot's drain %p taken from its place", run, c.active, before)
				}
				if !tt.wantStopped && (run != nil || c.active != before) {
					t.Errorf("hand-over returned %p with %p active; want the run %p left as it is", run, c.active, before)
				}
			default:
				if run != nil || c.active != before {
					t.Errorf("run %p, active %p; want no change", run, c.active)
				}
			}
		})
	}
}

func (h *harness) slotHolder() string { return h.slots.holderName() }

// events takes the Events recorded so far.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case ev := <-h.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	for _, ev := range events {
		if strings.HasPrefix(ev, prefix) {
			return true
		}
	}
	return false
}

// A run whose slot is held by another node says so on the Node and takes
// the slot once the holder gives it up.
func TestRunTakeSlotWaits(t *testing.T) {
	h := newHarness(t)
	h.slots.hold("node-2")
	c, _ := h.controller()
	r := c.newRun(context.Background(), TriggerAnnotation, "kernel update")
	var waiting *Status
	h.slots.onWaitHook = func() {
		waiting = h.status()
		h.slots.hold("")
	}
	var slot Slot
	var err error
	h.run(func() { slot, err = r.takeSlot() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.slotHolder(); got != testNode {
		t.Errorf("slot held by %q, want %q", got, testNode)
	}
	if waiting == nil || waiting.Phase != PhaseWaiting || waiting.Trigger != TriggerAnnotation || waiting.Reason != "kernel update" ||
		!strings.Contains(waiting.LastError, "drain.maxConcurrentNodes") {
		t.Errorf("status while waiting = %+v", waiting)
	}
	if cond := h.condition(ConditionType); cond == nil || cond.Reason != ReasonWaiting {
		t.Errorf("condition = %+v, want reason %s", cond, ReasonWaiting)
	}
	if ev := h.events(); !hasEvent(ev, "Normal MaintenanceWaiting") {
		t.Errorf("events = %q, want MaintenanceWaiting", ev)
	}
	slot.Release()
	if got := h.slotHolder(); got != "" {
		t.Errorf("slot still held by %q after release", got)
	}
}

// A run stopped while it waits gives up without a slot.
func TestRunTakeSlotStops(t *testing.T) {
	h := newHarness(t)
	h.slots.hold("node-2")
	c, _ := h.controller()
	r := c.newRun(context.Background(), TriggerAnnotation, "kernel update")
	r.cancel()
	if _, err := r.takeSlot(); !errors.Is(err, context.Canceled) {
		t.Errorf("takeSlot = %v, want context.Canceled", err)
	}
	if got := h.slotHolder(); got != "node-2" {
		t.Errorf("slot held by %q, want still node-2", got)
	}
}

// A slot the coordinator takes back stops the drain, which is retried and
// asks anew: the next node's turn has come.
func TestRunStopsWhenTheSlotIsLost(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error {
		return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	})
	c, _ := h.controller()
	r := c.newRun(context.Background(), TriggerAnnotation, "kernel update")
	c.active = r
	h.run(r.run, func() bool {
		if len(h.evicted()) > 0 {
			select {
			case <-h.slots.lost:
			default:
				close(h.slots.lost)
			}
		}
		return true
	})
	if got := h.slotHolder(); got != "" {
		t.Errorf("slot still held by %q after the drain stopped", got)
	}
	if c.queue.NumRequeues(testNode) != 1 {
		t.Errorf("requeues %d, want the run retried", c.queue.NumRequeues(testNode))
	}
	if ev := h.events(); !hasEvent(ev, "Warning DrainSlotLost") {
		t.Errorf("events = %q, want DrainSlotLost", ev)
	}
}

func TestRunBegin(t *testing.T) {
	h := newHarness(t)
	h.engine.Metrics = NewMetrics(nil)
	c, _ := h.controller()
	st, err := c.newRun(context.Background(), TriggerAnnotation, "kernel update").begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseRunning || !st.CordonedByAgent || !h.node().Spec.Unschedulable {
		t.Errorf("status = %s, node unschedulable %t; want Running and cordoned by the agent", st.Encode(), h.node().Spec.Unschedulable)
	}
	if v := testutil.ToFloat64(h.engine.Metrics.MaintenanceActive); v != 1 {
		t.Errorf("maintenance_active = %v, want 1", v)
	}
}

// A failure to begin is reported, unless the run was stopped: then the
// failure is only the stop.
func TestRunBeginFails(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		h := newHarness(t)
		failNodePatches(h, 1)
		c, _ := h.controller()
		r := c.newRun(context.Background(), TriggerAnnotation, "kernel update")
		if stopped {
			r.cancel()
		}
		if _, err := r.begin(r.ctx); err == nil {
			t.Fatal("begin succeeded with the Node's patch failing")
		}
		if got := hasEvent(h.events(), "Warning MaintenanceStartFailed"); got == stopped {
			t.Errorf("stopped %t: MaintenanceStartFailed Event %t, want %t", stopped, got, !stopped)
		}
	}
}

// A whole run whose drain passes drain.timeout: it stops evicting and
// returns, which gives its drain slot back and its place up; the node stays
// cordoned, and a reconcile is asked for to decide what follows.
func TestRunTimesOutAndGivesTheSlotBack(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.engine.Config.Timeout = metav1.Duration{Duration: 10 * time.Second}
	h.onEvict(func(eviction) error {
		return refusal("The disruption budget web-pdb needs 1 healthy pods and has 1 currently")
	})
	c, _ := h.controller()
	r := c.newRun(context.Background(), TriggerAnnotation, "kernel update")
	c.active = r
	start := h.clock.Now()
	h.run(r.run, nil)
	select {
	case <-r.done:
	default:
		t.Fatal("the run did not finish")
	}
	if d := h.clock.Since(start); d < 10*time.Second {
		t.Errorf("the run ended after %s, before drain.timeout", d)
	}
	if got := h.slotHolder(); got != "" {
		t.Errorf("slot still held by %q after the timeout", got)
	}
	st := h.status()
	if st.Phase != PhaseFailed || len(st.PendingPods) != 1 || st.DrainStartTime == nil {
		t.Errorf("status = %s, want Failed with the pod pending and the drain's start", st.Encode())
	}
	if n := h.node(); !n.Spec.Unschedulable || !hasTaint(n, h.engine.Config.TaintKey) {
		t.Errorf("node not cordoned and tainted after the timeout: %+v", n.Spec)
	}
	if c.active != nil || c.queue.Len() != 1 || c.queue.NumRequeues(testNode) != 0 {
		t.Errorf("active %p, queue length %d, requeues %d; want the place given up and one reconcile asked for, not a retry",
			c.active, c.queue.Len(), c.queue.NumRequeues(testNode))
	}
	// Nothing runs any more: the clock moves on and no eviction follows.
	before := len(h.evicted())
	h.clock.Step(time.Hour)
	if got := len(h.evicted()); got != before {
		t.Errorf("%d evictions after the run ended, want none", got-before)
	}
}

func TestMaintenanceDeadline(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(3 * time.Hour)) // the slot came free
	tests := []struct {
		name    string
		timeout time.Duration
		st      *Status
		want    time.Time
	}{
		{"no timeout", 0, &Status{StartTime: &t0}, time.Time{}},
		{"no start time", time.Minute, &Status{}, time.Time{}},
		{"after the drain began, not the request", time.Minute, &Status{StartTime: &t0, DrainStartTime: &t1}, t1.Add(time.Minute)},
		{"a record from before drainStartTime: after the request", time.Minute, &Status{StartTime: &t0}, t0.Add(time.Minute)},
	}
	for _, tt := range tests {
		h := newHarness(t)
		h.engine.Config.Timeout = metav1.Duration{Duration: tt.timeout}
		if got := h.engine.maintenanceDeadline(tt.st); !got.Equal(tt.want) {
			t.Errorf("%s: deadline %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestRunFinish(t *testing.T) {
	failed := errors.New("etcd is down")
	tests := []struct {
		name        string
		err         error
		stopped     bool
		replaced    bool // another run took the place
		wantRequeue bool
	}{
		{name: "drained"},
		{name: "failed", err: failed, wantRequeue: true},
		{name: "stopped", err: context.Canceled, stopped: true, replaced: true},
		{name: "failed while being stopped", err: failed, stopped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			c, _ := h.controller()
			r := c.newRun(context.Background(), TriggerAnnotation, "kernel update")
			c.active = r
			var other *maintenanceRun
			if tt.replaced {
				other = c.newRun(context.Background(), TriggerAnnotation, "kernel update")
				c.active = other
			}
			if tt.stopped {
				r.cancel()
			}
			r.finish(tt.err)
			if c.active != other {
				t.Errorf("active %p after finish, want %p", c.active, other)
			}
			if got := c.queue.NumRequeues(testNode) == 1; got != tt.wantRequeue {
				t.Errorf("requeued %t, want %t", got, tt.wantRequeue)
			}
		})
	}
}

// A whole run: it waits for nothing, drains, gives the slot back and its
// place up.
func TestRunDrainsAndGivesUpItsPlace(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	c, _ := h.controller()
	r := c.newRun(context.Background(), TriggerAnnotation, "kernel update")
	c.active = r
	h.run(r.run, nil)
	if st := h.status(); st.Phase != PhaseSucceeded || st.EvictionPods != 1 {
		t.Errorf("status = %s, want Succeeded with one pod", st.Encode())
	}
	if got := h.slotHolder(); got != "" {
		t.Errorf("slot still held by %q", got)
	}
	if c.active != nil || c.queue.NumRequeues(testNode) != 0 {
		t.Errorf("active %p, requeues %d; want the place given up, nothing to retry", c.active, c.queue.NumRequeues(testNode))
	}
	select {
	case <-r.done:
	default:
		t.Error("done not closed")
	}
}

// A reboot's drain takes no slot of its own: the reboot coordinator holds
// one, as the same node, and a second hold would give it back at the end of
// the drain while the host still has to reboot. It waits for the
// coordinator's all the same, and leaves it held.
func TestRunRebootWaitsForTheCoordinatorsSlot(t *testing.T) {
	h := newHarness(t)
	h.slots.hold("node-2")
	h.rebootSlot.hold("")
	h.rebootSlot.onWaitHook = func() { h.rebootSlot.hold(testNode) }
	c, _ := h.controller()
	var slot Slot
	var err error
	h.run(func() { slot, err = c.newRun(context.Background(), TriggerReboot, "reboot coordinator").takeSlot() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := h.status(); st == nil || st.Phase != PhaseWaiting || st.Trigger != TriggerReboot || st.LastError != slotWaitMessage {
		t.Errorf("status while it waited: %+v, want Waiting for the reboot, saying why", st)
	}
	slot.Release()
	if got, reboot := h.slotHolder(), h.rebootSlot.holderName(); got != "node-2" || reboot != testNode {
		t.Errorf("maintenance slot held by %q, the reboot's by %q; want node-2 untouched and the coordinator's slot kept", got, reboot)
	}
}

// A reboot's drain that a restarted agent resumes while the coordinator
// does not hold its slot (taken back from the silent agent, asked for
// anew) evicts nothing until the coordinator holds it again: the record
// stays Running and says the drain waits. A slot taken back mid-drain
// stops the drain, as a maintenance slot's does.
func TestControllerResumesARebootDrainOnlyInTheCoordinatorsSlot(t *testing.T) {
	h := newHarness(t, testPod("a"), testPod("b"))
	h.onEvict(func(ev eviction) error {
		if ev.key == "ns/b" {
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return nil
	})
	ctx := context.Background()
	const asks = "reboot coordinator: draining"
	if _, err := h.engine.Begin(ctx, Request{Trigger: TriggerReboot, Reason: asks}); err != nil {
		t.Fatal(err)
	}
	h.rebootSlot.hold("")
	c := NewController(ControllerOptions{Engine: h.engine, Slots: h.slots, RebootSlot: h.rebootSlot, RebootDrain: func(*corev1.Node) string { return asks }})
	_, v := h.controller()
	if err := c.reconcile(ctx, v); err != nil {
		t.Fatal(err)
	}
	run := c.active
	if run == nil || run.trigger != TriggerReboot {
		t.Fatalf("active run %+v, want the reboot's", run)
	}
	h.waitFor("the drain to say it waits", func() bool { return h.status().LastError == slotWaitMessage })
	h.clock.Step(time.Minute)
	if ev := h.evicted(); len(ev) != 0 {
		t.Fatalf("evicted %v without the coordinator's slot", ev)
	}
	if st := h.status(); st.Phase != PhaseRunning || st.Trigger != TriggerReboot || !st.CordonedByAgent {
		t.Errorf("status while it waits: %s; want the resumed drain's record kept", st.Encode())
	}

	h.rebootSlot.hold(testNode)
	h.waitFor("the eviction of a", func() bool { return len(h.evicted()) > 0 })
	close(h.rebootSlot.lost)
	h.run(func() { <-run.done }, nil)
	if c.queue.NumRequeues(testNode) != 1 || !hasEvent(h.events(), "Warning DrainSlotLost") {
		t.Errorf("requeues %d, want the run stopped by the lost slot and retried", c.queue.NumRequeues(testNode))
	}
	if got := h.rebootSlot.holderName(); got != testNode {
		t.Errorf("the coordinator's slot held by %q, want it left to the coordinator", got)
	}
}

// The reboot coordinator's request starts a drain with trigger reboot, and
// its withdrawal ends the maintenance.
func TestRebootDrainRequest(t *testing.T) {
	r := request{reboot: "reboot coordinator: kernel"}
	if !r.wanted() {
		t.Fatal("a reboot request is not wanted")
	}
	if tr, reason := r.trigger(); tr != TriggerReboot || reason != "reboot coordinator: kernel" {
		t.Errorf("trigger = %s %q", tr, reason)
	}
	r.annotation = "NIC"
	if tr, _ := r.trigger(); tr != TriggerAnnotation {
		t.Errorf("with the annotation too, trigger = %s, want annotation", tr)
	}
	if endReason(TriggerReboot) == endReason(TriggerAnnotation) {
		t.Error("a reboot's end reason is the annotation's")
	}
}
