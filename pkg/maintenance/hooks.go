package maintenance

import (
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/hooks"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// Hooks are the lifecycle's hooks (pkg/hooks): annotations an outside
// controller adds to the Node to hold a maintenance, and removes to let it
// go, each phase for at most Bound (maintenance.hookBound).
//
//   - Pre-drain hooks hold a drain, a maintenance's or a reboot's, before
//     its gates and its slot, so before the cordon: a stage of their own
//     (Controller.takeSlot), reported as the gates are.
//   - Post-drain hooks hold a maintenance whose pods are gone: the drain's
//     record says Succeeded (pkg/selfdrain writes it, and is left alone),
//     but the maintenance is not reported done while they hold: the reboot
//     controller does not reboot (Maintenance), the NodeMaintenance object
//     stays Running with the hooks in its lastError, and Events say so
//     (Controller.watchPostDrain). Their bound counts from the record's
//     last update, the drain's end, so a restarted agent keeps it.
//
// A shutdown's drain waits for no hook: the host goes down either way.
type Hooks struct {
	Bound time.Duration
	Clock clock.Clock
	// Warn is told of malformed hooks and of hooks passed over at their
	// bound (a Warning Event, in the wiring); Told of those that hold.
	Warn func(reason, message string)
	Told func(reason, message string)
}

// Event reasons of the post-drain hooks (hooks.ReasonMalformed and
// hooks.ReasonPassed are the others).
const ReasonPostDrainHooks = "MaintenanceHeldByHooks"

// PostDrain is the hold of the post-drain hooks on node over the
// maintenance recorded in st: none unless its drain Succeeded.
func (h *Hooks) PostDrain(node *corev1.Node, st *selfdrain.Status) hooks.Hold {
	if h == nil || node == nil || !st.Active() || st.Phase != selfdrain.PhaseSucceeded || st.Trigger == selfdrain.TriggerShutdown {
		return hooks.Hold{}
	}
	now := h.Clock.Now()
	since := now
	if st.LastUpdate != nil {
		since = st.LastUpdate.Time
	}
	return hooks.HoldOf(node.Annotations, hooks.PostDrain, since, now, h.Bound)
}

// Maintenance is Maintenance for the reboot controller with the post-drain
// hooks: a reboot's drain they hold is not Drained yet, so the node does
// not reboot.
func (h *Hooks) Maintenance(node *corev1.Node) (reboot.Maintenance, error) {
	m, err := Maintenance(node)
	if err != nil || !m.Drained {
		return m, err
	}
	st, err := selfdrain.ParseStatus(node)
	if err != nil {
		return reboot.Maintenance{}, err
	}
	m.Drained = !h.PostDrain(node, st).Holds()
	return m, nil
}

// heldStatus is the record as a NodeMaintenance object mirrors it while
// post-drain hooks hold: Running, with what holds as its lastError.
func heldStatus(st *selfdrain.Status, held hooks.Hold) *selfdrain.Status {
	if !held.Holds() {
		return st
	}
	c := *st
	c.Phase = selfdrain.PhaseRunning
	c.LastError = held.Message()
	return &c
}

// preDrainStage is the wait for the pre-drain hooks, read from node: asked
// again every GateInterval, as the gates are (each wait rewrites the
// record), and at once when wake says the hooks changed, so that a hook
// removed lets the drain go without waiting out the interval.
func (h *Hooks) preDrainStage(node func() (*corev1.Node, error), wake <-chan struct{}) *Gates {
	if h == nil {
		return nil
	}
	check := &hooks.PreDrainCheck{Node: node, Clock: h.Clock, Bound: h.Bound, Warn: h.Warn, Begun: drainBegun}
	// A bound shorter than the interval is asked at its end (at most an
	// interval late otherwise).
	interval := GateInterval
	if h.Bound > 0 && h.Bound < interval {
		interval = h.Bound
	}
	return &Gates{Checks: []Check{{What: "pre-drain hooks", Checker: check}}, Interval: interval, Clock: h.Clock, Wake: wake}
}

// hookWatch tells a wait for the pre-drain hooks that they changed. Only
// a change of the hooks wakes it: the wait's own record writes change the
// Node too, and waking on those would write again at once.
type hookWatch struct {
	mu   sync.Mutex
	last string
	ch   chan struct{}
}

func (w *hookWatch) wake() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{}, 1)
	}
	return w.ch
}

// observe takes a Node the informer delivers.
func (w *hookWatch) observe(node *corev1.Node) {
	s := hooks.Parse(node.Annotations, hooks.PreDrain)
	now := s.Names() + "\x00" + strings.Join(s.Problems(), "\x00")
	w.mu.Lock()
	defer w.mu.Unlock()
	if now == w.last || w.ch == nil {
		w.last = now
		return
	}
	w.last = now
	select {
	case w.ch <- struct{}{}:
	default: // one wake-up pending is enough
	}
}

// watchPostDrain tells, once each, what the post-drain hooks on node do to
// the maintenance recorded in st, and comes back when their bound runs
// out. It returns the record as a NodeMaintenance object mirrors it.
func (c *Controller) watchPostDrain(node *corev1.Node, st *selfdrain.Status, perr error) *selfdrain.Status {
	if c.hooks == nil || perr != nil {
		return st
	}
	held := c.hooks.PostDrain(node, st)
	if msg := held.Message(); msg != c.postDrainMsg {
		c.postDrainMsg = msg
		c.tellPostDrain(held)
	}
	if until := held.Until(); held.Holds() && !until.IsZero() {
		// Nothing on the Node changes when the bound runs out.
		c.queue.AddAfter(c.node, until.Sub(c.hooks.Clock.Now()))
	}
	return heldStatus(st, held)
}

func (c *Controller) tellPostDrain(held hooks.Hold) {
	h := c.hooks
	for _, p := range held.Problems() {
		c.log.Warn("Malformed maintenance hook; it holds all the same", "problem", p)
		if h.Warn != nil {
			h.Warn(hooks.ReasonMalformed, p+"; the hook holds all the same, at most maintenance.hookBound")
		}
	}
	switch {
	case held.Empty():
	case held.Passed:
		c.log.Warn("Post-drain hooks passed over at maintenance.hookBound", "hooks", held.Names())
		if h.Warn != nil {
			h.Warn(hooks.ReasonPassed, held.Message())
		}
	default:
		c.log.Info("Drained; the maintenance waits for its post-drain hooks", "hooks", held.Names())
		if h.Told != nil {
			h.Told(ReasonPostDrainHooks, "Drained; "+held.Message())
		}
	}
}

// drainBegun reports whether node's record shows a drain under way, which
// a restarted agent resumes past the pre-drain hooks.
func drainBegun(node *corev1.Node) bool {
	st, err := selfdrain.ParseStatus(node)
	return err == nil && st.Active() && st.Phase == selfdrain.PhaseRunning
}
