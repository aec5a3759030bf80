package maintenance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/config"
)

// runController runs c until the test ends.
func runController(t *testing.T, c *Controller, v *nodeView) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, v) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// The annotation starts a drain; removing it undoes what the agent did.
func TestControllerAnnotationLifecycle(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	c, v := h.controller()
	runController(t, c, v)

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel update"}}}`)
	v.touch()
	h.waitFor("the drain to succeed", func() bool {
		st := h.status()
		return st != nil && st.Phase == selfdrain.PhaseSucceeded
	})
	if st := h.status(); st.Trigger != selfdrain.TriggerAnnotation || st.Reason != "kernel update" || st.EvictionPods != 1 {
		t.Errorf("status = %+v, want the annotation's drain of one pod", st)
	}
	if n := h.node(); !n.Spec.Unschedulable || !hasTaint(n, h.engine.Config.TaintKey) {
		t.Errorf("drained node not cordoned and tainted: %+v", n.Spec)
	}

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":null}}}`)
	v.touch()
	h.waitFor("the maintenance to end", func() bool { return !h.status().Active() })
	if n := h.node(); n.Spec.Unschedulable || hasTaint(n, h.engine.Config.TaintKey) {
		t.Errorf("node still cordoned or tainted after the end: %+v", n.Spec)
	}
}

// A maintenance whose request went away while the agent was down ends at
// the first reconcile.
func TestControllerEndsAnOrphanedMaintenance(t *testing.T) {
	h := newHarness(t)
	if _, err := h.engine.Begin(context.Background(), selfdrain.Request{Trigger: selfdrain.TriggerAnnotation, Reason: "old"}); err != nil {
		t.Fatal(err)
	}
	c, v := h.controller()
	runController(t, c, v)
	h.waitFor("the maintenance to end", func() bool { return !h.status().Active() })
	if h.node().Spec.Unschedulable {
		t.Error("node still cordoned")
	}
}

// A node the reboot controller drained, and that the annotation keeps in
// maintenance after the reboot, is handed over to the annotation once the
// coordinator no longer asks: the record names the annotation, so that the
// coordinator sees its own maintenance over and gives its slot back (it
// held it for as long as the annotation stayed: test/property, P8), and
// the node stays cordoned until the annotation goes.
func TestControllerHandsARebootsDrainOver(t *testing.T) {
	h := newHarness(t)
	st, err := h.engine.Begin(context.Background(), selfdrain.Request{Trigger: selfdrain.TriggerReboot, Reason: "reboot controller: kernel"})
	if err != nil {
		t.Fatal(err)
	}
	st.Phase = selfdrain.PhaseSucceeded
	h.patchNode(fmt.Sprintf(`{"metadata":{"annotations":{"node-agent.io/maintenance":"NIC",%q:%q}}}`, selfdrain.StatusAnnotation, st.Encode()))
	rebootAsks := "reboot controller: rebooting"
	c := NewController(ControllerOptions{Engine: h.engine, Slots: harnessSlots{h.slots, h.rebootSlot}, RebootDrain: func(*corev1.Node) string { return rebootAsks }})
	_, v := h.controller()
	reconcile := func() {
		t.Helper()
		if err := c.reconcile(context.Background(), v); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	if got := h.status(); got.Trigger != selfdrain.TriggerReboot {
		t.Fatalf("handed over while the reboot still asks: %s", got.Encode())
	}

	rebootAsks = ""
	reconcile()
	got := h.status()
	if got.Trigger != selfdrain.TriggerAnnotation || got.Reason != "NIC" || got.Phase != selfdrain.PhaseSucceeded || !got.Active() || !got.CordonedByAgent {
		t.Fatalf("after the reboot: %s; want the drained record, in force, for the annotation", got.Encode())
	}
	if !h.node().Spec.Unschedulable || c.active != nil {
		t.Fatal("the handed-over node was uncordoned or drained again")
	}
	if !hasEvent(h.events(), "Normal MaintenanceHandedOver") {
		t.Error("no MaintenanceHandedOver Event")
	}

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":null}}}`)
	reconcile()
	if st := h.status(); st.Active() || h.node().Spec.Unschedulable {
		t.Errorf("after the annotation went: %s, unschedulable %t; want ended and uncordoned", st.Encode(), h.node().Spec.Unschedulable)
	}
}

// A reboot's drain under way that the reboot controller no longer asks for
// (the reboot was called off), while the annotation keeps the node in
// maintenance, is handed over: the reboot's run stops, the record names the
// annotation and says the drain waits for a slot of its own, so that the
// coordinator sees its maintenance over and gives the reboot's slot back.
// Before, the annotation's drain waited for a slot behind the reboot's
// (the agent asks for one purpose at a time, pkg/slots), and the
// coordinator held that slot until the reboot's maintenance ended: neither
// moved. The drain then goes on in the annotation's slot, with the agent's
// cordon on record.
func TestControllerHandsARunningRebootDrainOver(t *testing.T) {
	h := newHarness(t, testPod("a"))
	var mu sync.Mutex
	refuse := true
	h.onEvict(func(eviction) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return nil
	})
	rebootAsks := "reboot controller: kernel"
	c := NewController(ControllerOptions{Engine: h.engine, Slots: harnessSlots{h.slots, h.rebootSlot}, RebootDrain: func(*corev1.Node) string { return rebootAsks }})
	_, v := h.controller()
	ctx := context.Background()
	reconcile := func() {
		t.Helper()
		if err := c.reconcile(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	// The reboot's drain began before the annotation came.
	if _, err := h.engine.Begin(ctx, selfdrain.Request{Trigger: selfdrain.TriggerReboot, Reason: rebootAsks}); err != nil {
		t.Fatal(err)
	}
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"NIC"}}}`)
	reconcile()
	reboot := c.active
	if reboot == nil || reboot.trigger != selfdrain.TriggerReboot {
		t.Fatalf("active run %+v, want the reboot's", reboot)
	}
	h.waitFor("the reboot's drain to evict", func() bool { return len(h.evicted()) > 0 })

	rebootAsks = ""
	h.slots.hold("node-2")
	reconcile()
	select {
	case <-reboot.done:
	default:
		t.Fatal("the reboot's run still runs after the hand-over")
	}
	st := h.status()
	if st.Trigger != selfdrain.TriggerAnnotation || st.Reason != "NIC" || st.Phase != selfdrain.PhaseRunning || st.LastError != slotWaitMessage ||
		!st.CordonedByAgent || !st.TaintedByAgent || st.DrainStartTime != nil {
		t.Fatalf("after the hand-over: %s; want the annotation's drain, Running and waiting for its slot, with the agent's cordon and taint", st.Encode())
	}
	if !h.node().Spec.Unschedulable {
		t.Fatal("the handed-over node was uncordoned")
	}
	if cond := h.condition(selfdrain.ConditionType); cond == nil || cond.Reason != selfdrain.ReasonWaiting {
		t.Errorf("condition %+v, want %s", cond, selfdrain.ReasonWaiting)
	}
	if !hasEvent(h.events(), "Normal MaintenanceHandedOver") {
		t.Error("no MaintenanceHandedOver Event")
	}

	// The annotation's drain waits for its own slot, then resumes.
	reconcile()
	run := c.active
	if run == nil || run.trigger != selfdrain.TriggerAnnotation {
		t.Fatalf("active run %+v, want the annotation's", run)
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	h.slots.hold("")
	h.run(func() { <-run.done }, nil)
	st = h.status()
	if st.Trigger != selfdrain.TriggerAnnotation || st.Phase != selfdrain.PhaseSucceeded || !st.CordonedByAgent || st.DrainStartTime == nil {
		t.Fatalf("after the annotation's drain: %s; want it Succeeded, with the agent's cordon on record", st.Encode())
	}

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":null}}}`)
	reconcile()
	if st := h.status(); st.Active() || h.node().Spec.Unschedulable {
		t.Errorf("after the annotation went: %s, unschedulable %t; want ended and uncordoned", st.Encode(), h.node().Spec.Unschedulable)
	}
}

// failNodePatches makes the next n patches of the Node (not of its status,
// nor of the requesters list beside the record) fail, and records when on
// the fake clock each patch was tried.
func failNodePatches(h *harness, n int) func() []time.Time {
	var mu sync.Mutex
	var tries []time.Time
	h.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "" {
			return false, nil, nil
		}
		if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), RequestersAnnotation) {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		tries = append(tries, h.clock.Now())
		if len(tries) <= n {
			return true, nil, apierrors.NewInternalError(errors.New("etcd is down"))
		}
		return false, nil, nil
	})
	return func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), tries...)
	}
}

// A drain that cannot begin is started again through the rate-limited
// queue, not at once.
func TestControllerRetriesAFailedStart(t *testing.T) {
	h := newHarness(t)
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel update"}}}`)
	tries := failNodePatches(h, 1)
	c, v := h.controller()
	runController(t, c, v)
	h.waitFor("the drain to succeed", func() bool {
		st := h.status()
		return st != nil && st.Phase == selfdrain.PhaseSucceeded
	})
	got := tries()
	if len(got) < 2 {
		t.Fatalf("%d tries to begin, want a failed one and a retry", len(got))
	}
	if gap := got[1].Sub(got[0]); gap < retryAfterFailure {
		t.Errorf("retried %s after the failure, before the queue's %s", gap, retryAfterFailure)
	}
}

// A failure to end the maintenance is retried until it succeeds.
func TestControllerRetriesAFailedEnd(t *testing.T) {
	h := newHarness(t)
	if _, err := h.engine.Begin(context.Background(), selfdrain.Request{Trigger: selfdrain.TriggerAnnotation, Reason: "old"}); err != nil {
		t.Fatal(err)
	}
	tries := failNodePatches(h, 3)
	c, v := h.controller()
	runController(t, c, v)
	h.waitFor("the maintenance to end", func() bool { return !h.status().Active() })
	got := tries()
	if len(got) != 4 {
		t.Fatalf("%d tries to end, want 3 failed and 1 more", len(got))
	}
	for i := 1; i < len(got); i++ {
		if gap := got[i].Sub(got[i-1]); gap < retryAfterFailure {
			t.Errorf("retry %d came %s after the last, before %s", i, gap, retryAfterFailure)
		}
	}
}

// A drain that timed out is not started again while the same request
// stays, however often the controller reconciles: that would take a drain
// slot for another drain.timeout each time. Another reason starts it again,
// and so does a request that was ended and made again. Each reconcile is
// called directly, so that "nothing started" is seen, not waited for.
func TestControllerTimedOutDrainIsNotStartedAgain(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.engine.Config.Timeout = metav1.Duration{Duration: 30 * time.Second}
	h.onEvict(func(eviction) error {
		return refusal("The disruption budget web-pdb needs 1 healthy pods and has 1 currently")
	})
	c, v := h.controller()
	ctx := context.Background()
	reconcile := func() {
		t.Helper()
		if err := c.reconcile(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	// timeOut runs the drain reconcile started until it returns.
	timeOut := func(what string) *selfdrain.Status {
		t.Helper()
		run := c.active
		if run == nil {
			t.Fatalf("%s: no drain started", what)
		}
		h.run(func() { <-run.done }, nil)
		st := h.status()
		if st.Phase != selfdrain.PhaseFailed {
			t.Fatalf("%s: status %s, want Failed", what, st.Encode())
		}
		if got := h.slotHolder(); got != "" {
			t.Fatalf("%s: slot held by %q after the timeout", what, got)
		}
		return st
	}

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel"}}}`)
	reconcile()
	first := timeOut("first request")

	tries := len(h.evicted())
	for range 3 {
		h.clock.Step(time.Hour)
		reconcile()
		if c.active != nil {
			t.Fatalf("a drain started again for the request that timed out: status %s", h.status().Encode())
		}
	}
	if got := len(h.evicted()); got != tries {
		t.Errorf("%d evictions after the timeout while the request stayed, want none", got-tries)
	}
	if st := h.status(); st.Phase != selfdrain.PhaseFailed || !st.StartTime.Equal(first.StartTime) {
		t.Errorf("status %s, want the Failed record kept", st.Encode())
	}

	// Another reason is a new request: a new attempt with its own clock.
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel 6.12"}}}`)
	reconcile()
	second := timeOut("another reason")
	if second.Reason != "kernel 6.12" || !second.DrainStartTime.After(first.DrainStartTime.Time) || !second.CordonedByAgent {
		t.Errorf("second attempt %s, want the new reason, a later drain start, and the agent's cordon remembered", second.Encode())
	}
	reconcile()
	if c.active != nil {
		t.Fatal("the second attempt started again after its timeout")
	}

	// Ended and made again: a new request too.
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":null}}}`)
	reconcile()
	if st := h.status(); st.Active() || h.node().Spec.Unschedulable {
		t.Fatalf("after the request was removed: status %s, unschedulable %t; want ended and uncordoned", st.Encode(), h.node().Spec.Unschedulable)
	}
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel 6.12"}}}`)
	reconcile()
	timeOut("made again")
}

// What a timed-out drain leaves, per drain.onTimeout, while the request
// stays, and what the end of the maintenance does then. keepCordoned keeps
// the node cordoned and tainted until the end, which undoes both.
// uncordon undoes them at once, once, keeping the record Failed so that
// nothing starts again; the end then leaves alone a cordon an admin added
// since.
func TestControllerOnTimeout(t *testing.T) {
	for _, tt := range []struct {
		onTimeout string
		cordoned  bool // after the timeout, while the request stays
	}{
		{onTimeout: config.OnTimeoutKeepCordoned, cordoned: true},
		{onTimeout: config.OnTimeoutUncordon, cordoned: false},
	} {
		t.Run(tt.onTimeout, func(t *testing.T) {
			h := newHarness(t, testPod("a"))
			h.engine.Config.Timeout = metav1.Duration{Duration: 30 * time.Second}
			h.engine.Config.OnTimeout = tt.onTimeout
			h.engine.Metrics = selfdrain.NewMetrics(nil)
			h.onEvict(func(eviction) error {
				return refusal("The disruption budget web-pdb needs 1 healthy pods and has 1 currently")
			})
			c, v := h.controller()
			ctx := context.Background()
			reconcile := func() {
				t.Helper()
				if err := c.reconcile(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel"}}}`)
			reconcile()
			run := c.active
			h.run(func() { <-run.done }, nil)
			// The reconcile the run asked for, and more after it: the
			// undo happens once, and nothing starts again.
			for range 3 {
				reconcile()
				if c.active != nil {
					t.Fatal("a drain started again while the request stayed")
				}
			}
			n, st := h.node(), h.status()
			if n.Spec.Unschedulable != tt.cordoned || hasTaint(n, h.engine.Config.TaintKey) != tt.cordoned {
				t.Errorf("unschedulable %t, tainted %t; want both %t", n.Spec.Unschedulable, hasTaint(n, h.engine.Config.TaintKey), tt.cordoned)
			}
			if st.Phase != selfdrain.PhaseFailed || !st.Active() || (st.UndoneAt == nil) != tt.cordoned || !st.CordonedByAgent {
				t.Errorf("status %s: want Failed and in force, undone %t, with the agent's cordon on record", st.Encode(), !tt.cordoned)
			}
			if cond := h.condition(selfdrain.ConditionType); cond == nil || cond.Reason != selfdrain.ReasonDrainFailed || !strings.Contains(cond.Message, "drain.onTimeout "+tt.onTimeout) {
				t.Errorf("condition %+v, want DrainFailed naming drain.onTimeout %s", cond, tt.onTimeout)
			}
			var undone int
			for _, ev := range h.events() {
				if strings.HasPrefix(ev, "Normal MaintenanceUndone") {
					undone++
				}
			}
			if want := map[bool]int{true: 0, false: 1}[tt.cordoned]; undone != want {
				t.Errorf("%d MaintenanceUndone Events, want %d", undone, want)
			}
			if got, want := testutil.ToFloat64(h.engine.Metrics.MaintenanceActive), map[bool]float64{true: 1, false: 0}[tt.cordoned]; got != want {
				t.Errorf("maintenance_active = %v, want %v", got, want)
			}

			// An admin cordons the node, then ends the maintenance.
			h.patchNode(`{"spec":{"unschedulable":true}}`)
			h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":null}}}`)
			reconcile()
			n = h.node()
			if st := h.status(); st.Active() {
				t.Fatalf("status %s after the request went away, want ended", st.Encode())
			}
			// keepCordoned: the agent's own cordon is undone at the end.
			// uncordon: the cordon now is the admin's, and stays.
			if n.Spec.Unschedulable == tt.cordoned || hasTaint(n, h.engine.Config.TaintKey) {
				t.Errorf("after the end: unschedulable %t (want %t), tainted %t (want false)", n.Spec.Unschedulable, !tt.cordoned, hasTaint(n, h.engine.Config.TaintKey))
			}
		})
	}
}

// A failure to undo after a timeout is returned, so the queue retries it.
func TestControllerRetriesAFailedUndo(t *testing.T) {
	h := newHarness(t)
	h.engine.Config.OnTimeout = config.OnTimeoutUncordon
	if _, err := h.engine.Begin(context.Background(), selfdrain.Request{Trigger: selfdrain.TriggerAnnotation, Reason: "kernel"}); err != nil {
		t.Fatal(err)
	}
	st := h.status()
	st.Phase = selfdrain.PhaseFailed
	h.patchNode(fmt.Sprintf(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel",%q:%q}}}`, selfdrain.StatusAnnotation, st.Encode()))
	failNodePatches(h, 1)
	c, v := h.controller()
	if err := c.reconcile(context.Background(), v); err == nil {
		t.Fatal("reconcile succeeded with the Node's patch failing")
	}
	if !h.node().Spec.Unschedulable {
		t.Fatal("uncordoned although the patch failed")
	}
	if err := c.reconcile(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	if n, st := h.node(), h.status(); n.Spec.Unschedulable || st.UndoneAt == nil || st.Phase != selfdrain.PhaseFailed {
		t.Errorf("after the retry: unschedulable %t, status %s; want uncordoned, undone, still Failed", n.Spec.Unschedulable, st.Encode())
	}
}

// A drain that succeeded is not started again by the reconcile its run asks
// for, while the cache still shows it Running: it would take another slot
// and write Running over Succeeded (the flake of pkg/maintenance's
// TestHandshakeRebootThroughDrainAndShutdown, where the reboot controller
// already rebooted the drained node). Two interleavings:
//   - "cache behind": the cache stops at the Node as it was when the
//     eviction was asked for (Running), until the test lets it catch up;
//   - "handler saw it first": the informer takes the Succeeded copy just
//     after reconcile read the Running one, and hands it to the controller's
//     handler before reconcile decides; the handler's copy shows the write,
//     reconcile's is older (about 1 run in 150).
func TestControllerDoesNotResumeADrainThatSucceeded(t *testing.T) {
	for _, handlerFirst := range []bool{false, true} {
		name := "cache behind"
		if handlerFirst {
			name = "handler saw it first"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testPod("a"))
			c, v := h.controller()
			// The cache stops at the Node as it was when the eviction was
			// asked for: the drain recorded Running.
			h.onEvict(func(eviction) error {
				v.hold(h.trackedNode())
				return nil
			})
			h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel"}}}`)
			ctx := context.Background()
			if err := c.reconcile(ctx, v); err != nil {
				t.Fatal(err)
			}
			run := c.active
			h.run(func() { <-run.done }, nil)
			if st := h.status(); st.Phase != selfdrain.PhaseSucceeded {
				t.Fatalf("status %s, want Succeeded", st.Encode())
			}
			if handlerFirst {
				v.afterNextGet(func() {
					v.hold(nil)
					c.observe(h.node())
				})
			} else if held, _ := v.Get(); held.Annotations[selfdrain.StatusAnnotation] == h.node().Annotations[selfdrain.StatusAnnotation] {
				t.Fatal("the view is not behind")
			}

			if err := c.reconcile(ctx, v); err != nil {
				t.Fatal(err)
			}
			if c.active != nil {
				c.takeActive().stop()
				t.Fatal("the drain that succeeded was started again from a Running copy")
			}
			if !handlerFirst {
				v.hold(nil)
				if err := c.reconcile(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			if st := h.status(); c.active != nil || st.Phase != selfdrain.PhaseSucceeded || h.slotHolder() != "" {
				t.Errorf("once the cache caught up: active %p, status %s, slot held by %q; want nothing started", c.active, st.Encode(), h.slotHolder())
			}
		})
	}
}
