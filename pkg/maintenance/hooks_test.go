package maintenance

import (
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/agent/agenttest"
	"github.com/node-agent/node-agent/pkg/hooks"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// told collects what the hooks tell the Node's Events.
type told struct {
	mu   sync.Mutex
	msgs []string // reason: message
}

func (t *told) add(reason, message string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.msgs = append(t.msgs, reason+": "+message)
}

func (t *told) with(reason string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, m := range t.msgs {
		if strings.HasPrefix(m, reason+": ") {
			out = append(out, m)
		}
	}
	return out
}

// hookController is h.controller with hooks bounded by bound and, when
// reboot, the reboot controller asking for the drain.
func (h *harness) hookController(bound time.Duration, reboot bool) (*Controller, *nodeView, *Hooks, *told) {
	tl := &told{}
	hk := &Hooks{Bound: bound, Clock: h.clock, Warn: tl.add, Told: tl.add}
	o := ControllerOptions{Engine: h.engine, Slots: harnessSlots{h.slots, h.rebootSlot}, Hooks: hk}
	if reboot {
		o.RebootDrain = func(*corev1.Node) string { return DrainRequestPrefix + "kernel" }
	}
	return NewController(o), &nodeView{NodeView: agenttest.NodeView{Client: kubetest.Wrap(h.client), Name: testNode}, t: h.t}, hk, tl
}

// A pre-drain hook holds a maintenance before the cordon, saying so in
// the record, until it is removed; a reboot's drain as well.
func TestPreDrainHookHolds(t *testing.T) {
	for _, reboot := range []bool{false, true} {
		t.Run(map[bool]string{false: "maintenance", true: "reboot"}[reboot], func(t *testing.T) {
			h := newHarness(t, testPod("a"))
			h.onEvict(func(eviction) error { return nil })
			c, v, _, _ := h.hookController(24*time.Hour, reboot)
			h.patchNode(`{"metadata":{"annotations":{"pre-drain.hook.node-agent.io/backup":"velero"}}}`)
			if !reboot {
				h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel update"}}}`)
			}
			runController(t, c, v)
			h.waitFor("the drain to wait for its hook", func() bool {
				st := h.status()
				return st != nil && st.Phase == selfdrain.PhaseWaiting && strings.Contains(st.LastError, "waiting for pre-drain hooks: backup (velero)")
			})
			if n := h.node(); n.Spec.Unschedulable || hasTaint(n, h.engine.Config.TaintKey) || len(h.evicted()) != 0 {
				t.Fatalf("held by its hook, the node changed: %+v, evictions %v", n.Spec, h.evicted())
			}
			h.patchNode(`{"metadata":{"annotations":{"pre-drain.hook.node-agent.io/backup":null}}}`)
			v.touch()
			h.waitFor("the drain to succeed once the hook is gone", func() bool { st := h.status(); return st != nil && st.Phase == selfdrain.PhaseSucceeded })
		})
	}
}

// A pre-drain hook past maintenance.hookBound holds no longer, and a
// Warning names it.
func TestPreDrainHookBound(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	c, v, _, tl := h.hookController(time.Minute, false)
	h.patchNode(`{"metadata":{"annotations":{"pre-drain.hook.node-agent.io/gone":"a controller that is gone","node-agent.io/maintenance":"x"}}}`)
	runController(t, c, v)
	h.waitFor("the drain past its hook's bound", func() bool { st := h.status(); return st != nil && st.Phase == selfdrain.PhaseSucceeded })
	if w := tl.with(hooks.ReasonPassed); len(w) != 1 || !strings.Contains(w[0], "gone (a controller that is gone)") {
		t.Errorf("warnings %q, want one naming the hook", w)
	}
}

// A post-drain hook keeps a drained reboot's maintenance from being
// reported done, until it is removed or its bound passes.
func TestPostDrainHookHolds(t *testing.T) {
	for _, how := range []string{"removed", "bound"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t, testPod("a"))
			h.onEvict(func(eviction) error { return nil })
			c, v, hk, tl := h.hookController(time.Hour, true)
			h.patchNode(`{"metadata":{"annotations":{"post-drain.hook.node-agent.io/firmware":"fw-operator"}}}`)
			runController(t, c, v)
			h.waitFor("the drain to succeed", func() bool { st := h.status(); return st != nil && st.Phase == selfdrain.PhaseSucceeded })
			if m, err := hk.Maintenance(h.node()); err != nil || !m.Active || m.Drained {
				t.Fatalf("Maintenance = %+v, %v; want active and not drained while the hook holds", m, err)
			}
			v.touch()
			h.waitFor("the hold told", func() bool { return len(tl.with(ReasonPostDrainHooks)) == 1 })
			if got := tl.with(ReasonPostDrainHooks)[0]; !strings.Contains(got, "firmware (fw-operator)") {
				t.Errorf("told %q, want the hook named", got)
			}
			if how == "removed" {
				h.patchNode(`{"metadata":{"annotations":{"post-drain.hook.node-agent.io/firmware":null}}}`)
			} else {
				h.clock.Step(time.Hour)
				v.touch()
				h.waitFor("the bound told", func() bool { return len(tl.with(hooks.ReasonPassed)) == 1 })
			}
			if m, err := hk.Maintenance(h.node()); err != nil || !m.Drained {
				t.Errorf("Maintenance = %+v, %v; want drained once the hook %s", m, err, how)
			}
		})
	}
}

// A NodeMaintenance object mirrors a drained maintenance that post-drain
// hooks hold as Running, with the hooks in its lastError.
func TestHeldStatusMirrored(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerNodeMaintenance, StartTime: &now, LastUpdate: &now}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{hooks.PostDrain.Prefix() + "x": "me"}}}
	hk := &Hooks{Bound: time.Hour, Clock: clocktesting.NewFakeClock(now.Time.Add(time.Minute))}
	got := mirrorStatus(NodeMaintenanceStatus{}, heldStatus(st, hk.PostDrain(node, st)), nil)
	if got == nil || got.Phase != selfdrain.PhaseRunning || !strings.Contains(got.LastError, "post-drain hooks: x (me)") {
		t.Errorf("mirrored %+v, want Running naming the hook", got)
	}
	if st.Phase != selfdrain.PhaseSucceeded {
		t.Error("the record itself changed")
	}
	hk.Clock = clocktesting.NewFakeClock(now.Time.Add(time.Hour))
	if got := mirrorStatus(NodeMaintenanceStatus{}, heldStatus(st, hk.PostDrain(node, st)), nil); got.Phase != selfdrain.PhaseSucceeded {
		t.Errorf("past the bound: %+v, want Succeeded", got)
	}
}

// An agent restarted mid-drain resumes it past a pre-drain hook added
// meanwhile: the node is cordoned already.
func TestPreDrainHookDoesNotHoldAResumedDrain(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	if _, err := h.engine.Begin(t.Context(), selfdrain.Request{Trigger: selfdrain.TriggerAnnotation, Reason: "x"}); err != nil {
		t.Fatal(err)
	}
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"x","pre-drain.hook.node-agent.io/late":"added mid-drain"}}}`)
	c, v, _, _ := h.hookController(24*time.Hour, false)
	runController(t, c, v)
	h.waitFor("the resumed drain to succeed", func() bool { st := h.status(); return st != nil && st.Phase == selfdrain.PhaseSucceeded })
}

// A change of the pre-drain hooks wakes their wait at once; any other
// change of the Node (the wait's own record writes) does not.
func TestHookWatchWakesOnlyOnHookChanges(t *testing.T) {
	var w hookWatch
	wake := w.wake()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{hooks.PreDrain.Prefix() + "a": "me"}}}
	woken := func() bool {
		select {
		case <-wake:
			return true
		default:
			return false
		}
	}
	w.observe(node)
	if !woken() {
		t.Fatal("a hook appeared: not woken")
	}
	node.Annotations[selfdrain.StatusAnnotation] = `{"phase":"Waiting"}`
	node.Annotations[hooks.PostDrain.Prefix()+"b"] = "me"
	w.observe(node)
	if woken() {
		t.Fatal("woken by a change that is not a pre-drain hook's")
	}
	delete(node.Annotations, hooks.PreDrain.Prefix()+"a")
	w.observe(node)
	if !woken() {
		t.Fatal("the hook was removed: not woken")
	}
}

// Gates.Wait asks again when woken, before its interval is over.
func TestGatesWake(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	gates := fakeGates{holds: make(chan []reboot.Blocker, 2)}
	wake := make(chan struct{}, 1)
	g := &Gates{Checks: []Check{{What: "pre-drain hooks", Checker: gates}}, Interval: time.Hour, Clock: clk, Wake: wake}
	gates.holds <- []reboot.Blocker{{Name: "a (me)"}}
	done := make(chan error, 1)
	go func() { done <- g.Wait(t.Context(), func(error) {}) }()
	gates.holds <- nil
	wake <- struct{}{}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end when woken")
	}
}
