package maintenance

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"
)

func TestDrainForShutdown(t *testing.T) {
	h := newHarness(t, testPod("a"), testPod("b"))
	h.onEvict(func(eviction) error { return nil })
	c, _ := h.controller()
	var res selfdrain.ShutdownResult
	var err error
	h.run(func() { res, err = c.DrainForShutdown(context.Background(), h.clock.Now().Add(time.Minute)) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete || !strings.Contains(res.Message, "drained 2 pods") {
		t.Errorf("result = %+v, want complete with 2 pods", res)
	}
	st := h.status()
	if st.Trigger != selfdrain.TriggerShutdown || st.Phase != selfdrain.PhaseSucceeded || st.DrainedInTime == nil || !*st.DrainedInTime || !st.SkippedConcurrencyWait {
		t.Errorf("status = %+v, want a shutdown drain, succeeded in time, slot not awaited", st)
	}
	if cond := h.condition(selfdrain.ShuttingDownCondition); cond == nil || !strings.Contains(cond.Message, "drained 2 pods in time") {
		t.Errorf("%s = %+v, want the result in its message", selfdrain.ShuttingDownCondition, cond)
	}

	// logind cancelled the shutdown: the node is given back.
	if err := c.ShutdownCancelled(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := h.node()
	if n.Spec.Unschedulable || h.condition(selfdrain.ShuttingDownCondition) != nil || h.condition(selfdrain.ConditionType) != nil {
		t.Errorf("after the cancelled shutdown: unschedulable %t, conditions %+v", n.Spec.Unschedulable, n.Status.Conditions)
	}
	if h.status().Active() {
		t.Error("maintenance still active after the cancelled shutdown")
	}
}

// A pod its budget keeps on the node makes the shutdown drain incomplete,
// and the record says so.
func TestDrainForShutdownIncomplete(t *testing.T) {
	h := newHarness(t, testPod("a"), testPod("b"))
	h.onEvict(func(ev eviction) error {
		if ev.key == "ns/b" {
			return refusal("The disruption budget db-pdb needs 1 healthy pods and has 1 currently")
		}
		return nil
	})
	c, _ := h.controller()
	deadline := h.clock.Now().Add(20 * time.Second)
	var res selfdrain.ShutdownResult
	var err error
	// The clock moves once both pods were asked for.
	h.run(func() { res, err = c.DrainForShutdown(context.Background(), deadline) }, func() bool { return len(h.evicted()) >= 2 })
	if err != nil {
		t.Fatal(err)
	}
	if res.Complete || !strings.Contains(res.Message, "still on the node") {
		t.Errorf("result = %+v, want incomplete", res)
	}
	st := h.status()
	if st.Phase != selfdrain.PhaseFailed || st.DrainedInTime == nil || *st.DrainedInTime || !slices.Contains(st.PendingPods, "ns/b") {
		t.Errorf("status = %+v, want Failed with ns/b pending, not drained in time", st)
	}
	if st.EndTime != nil {
		t.Errorf("endTime %s set: a shutdown drain stays active until the host is back", st.EndTime)
	}
}

// The shutdown takes the engine from a maintenance drain, which stops; no
// drain starts while the shutdown owns the engine, and the maintenance
// drain starts again once the shutdown is cancelled.
func TestDrainForShutdownTakesTheEngine(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error {
		return refusal("The disruption budget web-pdb needs 1 healthy pods and has 1 currently")
	})
	c, v := h.controller()
	runController(t, c, v)
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel update"}}}`)
	v.touch()
	h.waitFor("the maintenance drain to run", func() bool {
		st := h.status()
		return st != nil && st.Phase == selfdrain.PhaseRunning && st.Trigger == selfdrain.TriggerAnnotation
	})

	var res selfdrain.ShutdownResult
	var err error
	h.run(func() { res, err = c.DrainForShutdown(context.Background(), h.clock.Now().Add(20*time.Second)) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Complete {
		t.Errorf("result = %+v, want incomplete: the budget refuses", res)
	}
	if st := h.status(); st.Trigger != selfdrain.TriggerShutdown || st.Phase != selfdrain.PhaseFailed {
		t.Errorf("status = %s, want the shutdown drain's, Failed", st.Encode())
	}
	c.mu.Lock()
	active := c.active
	c.mu.Unlock()
	if active != nil {
		t.Error("the maintenance drain still holds its place after the shutdown drain")
	}
	if d, run := c.decide(context.Background(), Requests{Annotation: "kernel update"}, nil, h.status(), nil); d.Action != Keep {
		t.Errorf("decide = %v while the shutdown owns the engine, want Keep", d.Action)
		if d.Action == StartDrain {
			go run.run() // so that the controller can stop it at the end
		}
	}

	if err := c.ShutdownCancelled(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the maintenance drain to start again", func() bool {
		st := h.status()
		return st != nil && st.Trigger == selfdrain.TriggerAnnotation && st.Phase == selfdrain.PhaseRunning
	})
}
