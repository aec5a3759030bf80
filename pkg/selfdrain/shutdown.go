package selfdrain

import (
	"context"
	"fmt"
	"time"

	"github.com/node-agent/node-agent/pkg/nodecondition"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// ShuttingDownCondition marks a Node whose host is powering off or
	// rebooting. The agent uses a condition of its own rather than the
	// kubelet's NotReady: the kubelet (or kwok) owns Ready and would
	// overwrite it, and NotReady would start the node lifecycle
	// controller's taint-based evictions, which ignore PodDisruptionBudgets.
	ShuttingDownCondition corev1.NodeConditionType = "NodeShuttingDown"
	// ReasonPrepareForShutdown is its reason while the drain runs.
	ReasonPrepareForShutdown = "PrepareForShutdown"

	// StatusReserve ends the engine's drain this long before the Guard's
	// deadline, so the final status is written before the lock goes. It
	// covers the in-flight evictions and four writes in a row (the engine's
	// status and condition, then drainedInTime and NodeShuttingDown); on a
	// loaded control plane one write took over 500ms, the Guard released
	// first and the record of an incomplete drain was lost
	// (test/e2e/reboot_test.go, TestRebootReleasesLockAtDeadline).
	StatusReserve = 2 * time.Second
)

// ShutdownResult is what a shutdown drain achieved.
type ShutdownResult struct {
	// Complete is true when every pod to evict has left the node.
	Complete bool
	// Message says what is left or what happened.
	Message string
}

// AnnounceShutdown marks the node NodeShuttingDown and says so in an Event.
func (e *Engine) AnnounceShutdown(ctx context.Context, deadline time.Time) {
	now := e.Now()
	window := deadline.Sub(now.Time).Round(time.Second)
	msg := fmt.Sprintf("node is shutting down; node-agent drains it within %s", window)
	if err := e.setShutdownCondition(ctx, msg, now); err != nil {
		e.Logger.Warn("Could not mark the node as shutting down", "err", err)
	}
	e.Event(corev1.EventTypeWarning, "NodeShuttingDown", "Host is shutting down; draining within %s (cluster-wide drain slot not awaited)", window)
}

// BeginAndDrain begins and drains until the node is drained or
// req.Deadline has passed. It returns no status when the drain could not
// begin.
func (e *Engine) BeginAndDrain(ctx context.Context, req Request) (*Status, error) {
	st, err := e.Begin(ctx, req)
	if err != nil {
		return nil, err
	}
	return e.Drain(ctx, st, req)
}

// RecordShutdownDrain records on the Node whether the shutdown drain that
// ended with st was complete.
func (e *Engine) RecordShutdownDrain(ctx context.Context, st *Status) ShutdownResult {
	complete := st.Phase == PhaseSucceeded
	st.DrainedInTime = &complete
	// The guard's context may end any moment now; the record must still
	// reach the Node.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StatusReserve)
	defer cancel()
	e.writeStatus(wctx, st)
	msg := fmt.Sprintf("drained %d pods in time", st.EvictionPods)
	typ := corev1.EventTypeNormal
	if !complete {
		typ = corev1.EventTypeWarning
		msg = fmt.Sprintf("drain incomplete: %d of %d pods still on the node: %s", len(st.PendingPods), st.EvictionPods, st.LastError)
	}
	if err := e.setShutdownCondition(wctx, "node is shutting down; "+msg, e.Now()); err != nil {
		e.Logger.Warn("Could not record the shutdown drain result", "err", err)
	}
	e.Event(typ, "ShutdownDrainFinished", "Shutdown drain: %s; releasing the delay lock", msg)
	return ShutdownResult{Complete: complete, Message: msg}
}

// setShutdownCondition sets NodeShuttingDown True with msg; End removes it
// with UnderMaintenance.
func (e *Engine) setShutdownCondition(ctx context.Context, msg string, now metav1.Time) error {
	written, err := nodecondition.Set(ctx, e.Client.CoreV1().Nodes(), e.NodeName, e.cached(), ShuttingDownCondition, corev1.ConditionTrue, ReasonPrepareForShutdown, msg, now)
	if err == nil {
		e.afterConditionWrite(ctx, written, now)
	}
	return err
}
