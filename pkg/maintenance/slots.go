package maintenance

import (
	"context"
	"errors"
	"fmt"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Slots is where a maintenance's drain gets its drain slot: the node's one
// *slots.Requester, which asks the cluster's coordinator through the Node.
type Slots interface {
	// Acquire blocks until this node holds a slot for purpose, or ctx
	// ends. onWait is called with nil once the drain waits for room, and
	// with the error whenever the slot cannot be asked for or no
	// coordinator answers.
	Acquire(ctx context.Context, purpose slots.Purpose, onWait func(error)) (slots.Slot, error)
	// Await blocks until another caller of this node holds a slot for
	// purpose (the reboot controller, for its drain), and follows it.
	Await(ctx context.Context, purpose slots.Purpose, onWait func(error)) (slots.Slot, error)
}

// waitReporter says on the Node, in its log and in Events why a drain of
// trigger and reason waits (see slotWait): for a gate or for its slot.
func waitReporter(ctx context.Context, e *selfdrain.Engine, trigger selfdrain.Trigger, reason string) func(error) {
	w := &slotWait{e: e, trigger: trigger, reason: reason}
	return func(err error) { w.report(ctx, err) }
}

// WaitReason is a reason to wait that a stage passes to onWait, other
// than an error: it says what the drain waits for (a maintenance gate that
// holds, say). The drain reports it as it reports the wait for room, not
// as a failure.
type WaitReason interface {
	error
	WaitReason() string
}

// slotWaitMessage is a drain's lastError while it waits for its slot.
const slotWaitMessage = "waiting for a drain slot from the coordinator (slots.limit, slots.pools)"

// slotWait reports, while a drain waits for a slot, why it waits: every
// slot is held by other nodes, or a slot cannot be taken at all because of
// an error (the request cannot be written, no coordinator answers), which
// waiting will not cure and which the status and a Warning Event then name.
type slotWait struct {
	// e writes the status, the condition and the Events.
	e       *selfdrain.Engine
	trigger selfdrain.Trigger
	reason  string
	start   *metav1.Time
	errors  int
	lastMsg string
}

func (w *slotWait) report(ctx context.Context, cause error) {
	e := w.e
	now := e.Now()
	if w.start == nil {
		w.start = &now
	}
	msg := slotWaitMessage
	var waitFor WaitReason
	switch {
	case errors.As(cause, &waitFor):
		w.errors = 0
		msg = waitFor.WaitReason()
		cause = nil
	case cause != nil:
		w.errors++
		msg = fmt.Sprintf("cannot get a drain slot: %v", cause)
	default:
		w.errors = 0
	}
	if err := w.record(ctx, msg, now); err != nil {
		e.Logger.Warn("Could not record why the drain waits", "err", err)
	}
	if msg == w.lastMsg {
		return
	}
	w.lastMsg = msg
	if err := e.SetCondition(ctx, selfdrain.ReasonWaiting, msg, now); err != nil {
		e.Logger.Warn("Could not set the node condition", "err", err)
	}
	if cause != nil {
		e.Logger.Error("Cannot get a drain slot", "err", cause)
		e.Event(corev1.EventTypeWarning, "DrainSlotError", "Maintenance requested, but %s", msg)
		return
	}
	if waitFor != nil {
		e.Logger.Info("Maintenance waits", "for", msg)
		e.Event(corev1.EventTypeNormal, "MaintenanceWaiting", "Maintenance requested; %s", msg)
		return
	}
	e.Logger.Info("Waiting for a drain slot")
	e.Event(corev1.EventTypeNormal, "MaintenanceWaiting", "Maintenance requested; waiting for a drain slot (slots.limit and slots.pools bound how many nodes drain at once)")
}

// record writes phase Waiting with msg (selfdrain.Engine.RecordWait).
func (w *slotWait) record(ctx context.Context, msg string, now metav1.Time) error {
	return w.e.RecordWait(ctx, w.trigger, w.reason, w.start, now, msg, w.errors)
}
