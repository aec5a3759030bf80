package maintenance

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"

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
	running := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerAnnotation, StartTime: &t0}
	drained := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, StartTime: &t0}
	shutdownDrained := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerShutdown, StartTime: &t0}
	ended := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, StartTime: &t0, EndTime: &t0}
	timedOut := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerAnnotation, Reason: "kernel", StartTime: &t0}
	timedOutUndone := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerAnnotation, Reason: "kernel", StartTime: &t0, UndoneAt: &t0}
	objectTimedOut := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerNodeMaintenance, Reason: "NIC replacement", StartTime: &t0}
	rebootTimedOut := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerReboot, Reason: "reboot controller: needed", StartTime: &t0}
	shutdownFailed := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerShutdown, StartTime: &t0}
	rebootDrained := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerReboot, Reason: "reboot controller: kernel", StartTime: &t0}
	rebootRunning := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerReboot, Reason: "reboot controller: kernel", StartTime: &t0}
	rebootWaiting := &selfdrain.Status{Phase: selfdrain.PhaseWaiting, Trigger: selfdrain.TriggerReboot, Reason: "reboot controller: kernel", StartTime: &t0}
	objectRunning := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerNodeMaintenance, Reason: "NIC replacement", StartTime: &t0}
	object := nmObject("nodemaintenance.medik8s.io", "nm", t0.Time)
	unreadable := errors.New("not valid status JSON")

	tests := []struct {
		name          string
		req           Requests
		st            *selfdrain.Status
		perr          error
		active        bool              // a drain runs
		activeTrigger selfdrain.Trigger // its trigger; the annotation when not set
		shutdown      bool
		uncordon      bool // drain.onTimeout uncordon
		want          Action
		wantTrigger   selfdrain.Trigger // of the run started
		wantReason    string
		wantStopped   bool // the running drain is taken from its place, to stop
	}{
		{name: "nothing asked, nothing recorded", want: Keep},
		{name: "annotation asks", req: Requests{Annotation: "kernel"}, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation, wantReason: "kernel"},
		{name: "object asks", req: Requests{Object: object}, want: StartDrain, wantTrigger: selfdrain.TriggerNodeMaintenance, wantReason: "NIC replacement"},
		{name: "both ask: the annotation names the drain", req: Requests{Annotation: "kernel", Object: object}, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation, wantReason: "kernel"},
		{name: "asked, a restarted agent resumes", req: Requests{Annotation: "kernel"}, st: running, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation},
		{name: "asked and draining", req: Requests{Annotation: "kernel"}, st: running, active: true, want: Keep},
		{name: "asked and drained", req: Requests{Annotation: "kernel"}, st: drained, want: Keep},
		{name: "asked, host back from a shutdown drain", req: Requests{Annotation: "kernel"}, st: shutdownDrained, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation},
		{name: "asked, record unreadable", req: Requests{Annotation: "kernel"}, perr: unreadable, want: Keep},
		{name: "no longer asked while draining", st: running, active: true, want: StopDrain},
		{name: "no longer asked, nothing runs", st: drained, want: End},
		{name: "no longer asked, already ended", st: ended, want: Keep},
		{name: "no longer asked, record unreadable", perr: unreadable, want: Keep},
		{name: "the shutdown guard owns the engine", req: Requests{Annotation: "kernel"}, shutdown: true, want: Keep},
		{name: "timed out, the same request stays", req: Requests{Annotation: "kernel"}, st: timedOut, want: Keep},
		{name: "timed out, asked with another reason", req: Requests{Annotation: "kernel 6.12"}, st: timedOut, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation, wantReason: "kernel 6.12"},
		{name: "timed out, now asked by an object", req: Requests{Object: object}, st: timedOut, want: StartDrain, wantTrigger: selfdrain.TriggerNodeMaintenance},
		{name: "object timed out, the same object stays", req: Requests{Object: object}, st: objectTimedOut, want: Keep},
		{name: "reboot timed out while the coordinator's message changes", req: Requests{Reboot: "reboot controller: draining"}, st: rebootTimedOut, want: Keep},
		{name: "timed out, no longer asked", st: timedOut, want: End},
		{name: "timed out, uncordon: undo", req: Requests{Annotation: "kernel"}, st: timedOut, uncordon: true, want: UndoAfterTimeout},
		{name: "timed out, uncordon, already undone", req: Requests{Annotation: "kernel"}, st: timedOutUndone, uncordon: true, want: Keep},
		{name: "timed out, uncordon, asked with another reason", req: Requests{Annotation: "kernel 6.12"}, st: timedOutUndone, uncordon: true, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation},
		{name: "reboot timed out, uncordon: left to the reboot controller", req: Requests{Reboot: "reboot controller: draining"}, st: rebootTimedOut, uncordon: true, want: Keep},
		{name: "asked, host back from a shutdown drain that failed", req: Requests{Annotation: "kernel"}, st: shutdownFailed, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation},
		{name: "a restarted agent resumes a reboot's drain as the reboot's, the annotation added since", req: Requests{Reboot: "reboot controller: draining", Annotation: "kernel"}, st: rebootRunning, want: StartDrain, wantTrigger: selfdrain.TriggerReboot, wantReason: "reboot controller: draining"},
		{name: "a restarted agent resumes an object's drain as the object's", req: Requests{Annotation: "kernel", Object: object}, st: objectRunning, want: StartDrain, wantTrigger: selfdrain.TriggerNodeMaintenance, wantReason: "NIC replacement"},
		{name: "reboot drained, the reboot still asks", req: Requests{Reboot: "reboot controller: rebooting", Annotation: "kernel"}, st: rebootDrained, want: Keep},
		{name: "reboot done, the annotation keeps the node", req: Requests{Annotation: "kernel"}, st: rebootDrained, want: HandOver},
		{name: "reboot done, an object keeps the node", req: Requests{Object: object}, st: rebootDrained, want: HandOver},
		{name: "reboot done, nothing keeps the node", st: rebootDrained, want: End},
		{name: "a reboot's drain no longer asked, the annotation takes it over", req: Requests{Annotation: "kernel"}, st: rebootRunning, want: HandOver},
		{name: "a reboot's drain no longer asked while it runs: stopped, the annotation takes it over", req: Requests{Annotation: "kernel"}, st: rebootRunning, active: true, activeTrigger: selfdrain.TriggerReboot, want: HandOver, wantStopped: true},
		{name: "a reboot's drain no longer asked while the annotation's run waits for its slot: the run goes on", req: Requests{Annotation: "kernel"}, st: rebootTimedOut, active: true, want: HandOver},
		{name: "a reboot's timed-out drain no longer asked, an object keeps the node", req: Requests{Object: object}, st: rebootTimedOut, want: HandOver},
		{name: "a reboot's drain waiting for its slot no longer asked, the annotation takes it over", req: Requests{Annotation: "kernel"}, st: rebootWaiting, want: HandOver},
		{name: "a reboot's drain under way, no longer asked, nothing keeps the node", st: rebootRunning, active: true, activeTrigger: selfdrain.TriggerReboot, want: StopDrain},
		{name: "a reboot's drain record unreadable, the annotation asks", req: Requests{Annotation: "kernel"}, perr: unreadable, want: Keep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Requests: tt.req, Record: tt.st, RecordErr: tt.perr, Shutdown: tt.shutdown, OnTimeout: config.OnTimeoutKeepCordoned}
			if tt.active {
				in.Running = &Running{Trigger: cmp.Or(tt.activeTrigger, selfdrain.TriggerAnnotation), Reason: "kernel"}
			}
			if tt.uncordon {
				in.OnTimeout = config.OnTimeoutUncordon
			}
			got := Decide(in)
			if got.Action != tt.want {
				t.Fatalf("Decide = %v, want %v", got.Action, tt.want)
			}
			if got.Action == StartDrain && (got.Trigger != tt.wantTrigger || (tt.wantReason != "" && got.Reason != tt.wantReason)) {
				t.Errorf("start %s %q, want %s %q", got.Trigger, got.Reason, tt.wantTrigger, tt.wantReason)
			}
			if got.Action == HandOver && got.StopRunning != tt.wantStopped {
				t.Errorf("hand-over stops the running drain: %v, want %v", got.StopRunning, tt.wantStopped)
			}
		})
	}
}

// TestControllerDecideMovesTheRun: the controller carries Decide's answer
// out on its running drain, under its lock: a start makes the new run the
// active one, a stop or a hand-over that stops takes it from its place.
func TestControllerDecideMovesTheRun(t *testing.T) {
	h := newHarness(t)
	c, _ := h.controller()
	d, run := c.decide(context.Background(), Requests{Annotation: "kernel"}, nil, nil, nil)
	if d.Action != StartDrain || run == nil || c.active != run || run.trigger != selfdrain.TriggerAnnotation || run.reason != "kernel" {
		t.Fatalf("start: %v, run %+v, active %p", d.Action, run, c.active)
	}
	if d, again := c.decide(context.Background(), Requests{Annotation: "kernel"}, nil, nil, nil); d.Action != Keep || again != nil || c.active != run {
		t.Fatalf("while it runs: %v, run %p, active %p; want no change", d.Action, again, c.active)
	}
	d, stopped := c.decide(context.Background(), Requests{}, nil, nil, nil)
	if d.Action != StopDrain || stopped != run || c.active != nil {
		t.Fatalf("stop: %v, run %p, active %p; want the running drain %p taken from its place", d.Action, stopped, c.active, run)
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
	r := c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update")
	var waiting *selfdrain.Status
	h.slots.onWaitHook = func() {
		waiting = h.status()
		h.slots.hold("")
	}
	var slot slots.Slot
	var err error
	h.run(func() { slot, err = r.takeSlot() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.slotHolder(); got != testNode {
		t.Errorf("slot held by %q, want %q", got, testNode)
	}
	if waiting == nil || waiting.Phase != selfdrain.PhaseWaiting || waiting.Trigger != selfdrain.TriggerAnnotation || waiting.Reason != "kernel update" ||
		!strings.Contains(waiting.LastError, "slots.limit") {
		t.Errorf("status while waiting = %+v", waiting)
	}
	if cond := h.condition(selfdrain.ConditionType); cond == nil || cond.Reason != selfdrain.ReasonWaiting {
		t.Errorf("condition = %+v, want reason %s", cond, selfdrain.ReasonWaiting)
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
	r := c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update")
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
	r := c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update")
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
	h.engine.Metrics = selfdrain.NewMetrics(nil)
	c, _ := h.controller()
	st, err := c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update").begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != selfdrain.PhaseRunning || !st.CordonedByAgent || !h.node().Spec.Unschedulable {
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
		r := c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update")
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
	r := c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update")
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
	if st.Phase != selfdrain.PhaseFailed || len(st.PendingPods) != 1 || st.DrainStartTime == nil {
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
		st      *selfdrain.Status
		want    time.Time
	}{
		{"no timeout", 0, &selfdrain.Status{StartTime: &t0}, time.Time{}},
		{"no start time", time.Minute, &selfdrain.Status{}, time.Time{}},
		{"after the drain began, not the request", time.Minute, &selfdrain.Status{StartTime: &t0, DrainStartTime: &t1}, t1.Add(time.Minute)},
		{"a record from before drainStartTime: after the request", time.Minute, &selfdrain.Status{StartTime: &t0}, t0.Add(time.Minute)},
	}
	for _, tt := range tests {
		h := newHarness(t)
		h.engine.Config.Timeout = metav1.Duration{Duration: tt.timeout}
		if got := h.engine.MaintenanceDeadline(tt.st); !got.Equal(tt.want) {
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
			r := c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update")
			c.active = r
			var other *maintenanceRun
			if tt.replaced {
				other = c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update")
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
	r := c.newRun(context.Background(), selfdrain.TriggerAnnotation, "kernel update")
	c.active = r
	h.run(r.run, nil)
	if st := h.status(); st.Phase != selfdrain.PhaseSucceeded || st.EvictionPods != 1 {
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

// A reboot's drain takes no slot of its own: the reboot controller holds
// one, as the same node, and a second hold would give it back at the end of
// the drain while the host still has to reboot. It waits for the
// coordinator's all the same, and leaves it held.
func TestRunRebootWaitsForTheCoordinatorsSlot(t *testing.T) {
	h := newHarness(t)
	h.slots.hold("node-2")
	h.rebootSlot.hold("")
	h.rebootSlot.onWaitHook = func() { h.rebootSlot.hold(testNode) }
	c, _ := h.controller()
	var slot slots.Slot
	var err error
	h.run(func() {
		slot, err = c.newRun(context.Background(), selfdrain.TriggerReboot, "reboot controller").takeSlot()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := h.status(); st == nil || st.Phase != selfdrain.PhaseWaiting || st.Trigger != selfdrain.TriggerReboot || st.LastError != slotWaitMessage {
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
	const asks = "reboot controller: draining"
	if _, err := h.engine.Begin(ctx, selfdrain.Request{Trigger: selfdrain.TriggerReboot, Reason: asks}); err != nil {
		t.Fatal(err)
	}
	h.rebootSlot.hold("")
	c := NewController(ControllerOptions{Engine: h.engine, Slots: harnessSlots{h.slots, h.rebootSlot}, RebootDrain: func(*corev1.Node) string { return asks }})
	_, v := h.controller()
	if err := c.reconcile(ctx, v); err != nil {
		t.Fatal(err)
	}
	run := c.active
	if run == nil || run.trigger != selfdrain.TriggerReboot {
		t.Fatalf("active run %+v, want the reboot's", run)
	}
	h.waitFor("the drain to say it waits", func() bool { return h.status().LastError == slotWaitMessage })
	h.clock.Step(time.Minute)
	if ev := h.evicted(); len(ev) != 0 {
		t.Fatalf("evicted %v without the coordinator's slot", ev)
	}
	if st := h.status(); st.Phase != selfdrain.PhaseRunning || st.Trigger != selfdrain.TriggerReboot || !st.CordonedByAgent {
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

// The reboot controller's request starts a drain with trigger reboot, and
// its withdrawal ends the maintenance.
func TestRebootDrainRequest(t *testing.T) {
	r := Requests{Reboot: "reboot controller: kernel"}
	if !r.wanted() {
		t.Fatal("a reboot request is not wanted")
	}
	if tr, reason := r.trigger(); tr != selfdrain.TriggerReboot || reason != "reboot controller: kernel" {
		t.Errorf("trigger = %s %q", tr, reason)
	}
	r.Annotation = "NIC"
	if tr, _ := r.trigger(); tr != selfdrain.TriggerAnnotation {
		t.Errorf("with the annotation too, trigger = %s, want annotation", tr)
	}
	if endReason(selfdrain.TriggerReboot) == endReason(selfdrain.TriggerAnnotation) {
		t.Error("a reboot's end reason is the annotation's")
	}
}
