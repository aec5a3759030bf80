package selfdrain

import (
	"context"
	"errors"
	"fmt"
	"time"

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

	// statusReserve ends the engine's drain this long before the Guard's
	// deadline, so the final status is written before the lock goes. It
	// covers the in-flight evictions and four writes in a row (the engine's
	// status and condition, then drainedInTime and NodeShuttingDown); on a
	// loaded control plane one write took over 500ms, the Guard released
	// first and the record of an incomplete drain was lost
	// (test/e2e/reboot_test.go, TestRebootReleasesLockAtDeadline).
	statusReserve = 2 * time.Second
)

// ShutdownResult is what a shutdown drain achieved.
type ShutdownResult struct {
	// Complete is true when every pod to evict has left the node.
	Complete bool
	// Message says what is left or what happened.
	Message string
}

// DrainForShutdown is the shutdown guard's one way in; the wiring hands it
// to the guard, and this package knows nothing of logind. It takes the
// engine from any maintenance drain, which stops, and starts none until
// ShutdownCancelled; marks the node NodeShuttingDown; drains it without
// waiting for a drain slot (the host goes down either way, which the status
// records), so that the final status is written before deadline; and
// records whether the drain was complete.
func (c *Controller) DrainForShutdown(ctx context.Context, deadline time.Time) (ShutdownResult, error) {
	c.setShutdown(true)
	e := c.engine
	e.announceShutdown(ctx, deadline)
	c.takeActive().stop()
	st, err := e.shutdownDrain(ctx, deadline.Add(-statusReserve))
	if st == nil {
		return ShutdownResult{}, err
	}
	res := e.recordShutdownDrain(ctx, st)
	if err != nil && ctx.Err() == nil {
		return res, err
	}
	return res, nil
}

// ShutdownCancelled undoes a shutdown drain after logind cancelled the
// shutdown, and gives the engine back to the maintenance requests, whose
// drain starts again if maintenance is still requested.
func (c *Controller) ShutdownCancelled(ctx context.Context) error {
	err := c.engine.End(ctx, "shutdown cancelled")
	c.setShutdown(false)
	c.enqueue()
	if err != nil {
		return errors.Join(errors.New("undoing the shutdown drain"), err)
	}
	return nil
}

// setShutdown says whether the shutdown guard owns the engine; while it
// does, reconcile starts no drain.
func (c *Controller) setShutdown(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shutdown = on
}

// announceShutdown marks the node NodeShuttingDown and says so in an Event.
func (e *Engine) announceShutdown(ctx context.Context, deadline time.Time) {
	now := e.now()
	window := deadline.Sub(now.Time).Round(time.Second)
	msg := fmt.Sprintf("node is shutting down; node-agent drains it within %s", window)
	if err := e.setShutdownCondition(ctx, msg, now); err != nil {
		e.Logger.Warn("Could not mark the node as shutting down", "err", err)
	}
	e.event(corev1.EventTypeWarning, "NodeShuttingDown", "Host is shutting down; draining within %s (cluster-wide drain slot not awaited)", window)
}

// shutdownDrain begins and drains until the node is drained or deadline
// has passed. It returns no status when the drain could not begin.
func (e *Engine) shutdownDrain(ctx context.Context, deadline time.Time) (*Status, error) {
	req := Request{Trigger: TriggerShutdown, Reason: "host is shutting down", Deadline: deadline, SkippedConcurrencyWait: true}
	st, err := e.Begin(ctx, req)
	if err != nil {
		return nil, err
	}
	return e.Drain(ctx, st, req)
}

// recordShutdownDrain records on the Node whether the shutdown drain that
// ended with st was complete.
func (e *Engine) recordShutdownDrain(ctx context.Context, st *Status) ShutdownResult {
	complete := st.Phase == PhaseSucceeded
	st.DrainedInTime = &complete
	// The guard's context may end any moment now; the record must still
	// reach the Node.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusReserve)
	defer cancel()
	e.writeStatus(wctx, st)
	msg := fmt.Sprintf("drained %d pods in time", st.EvictionPods)
	typ := corev1.EventTypeNormal
	if !complete {
		typ = corev1.EventTypeWarning
		msg = fmt.Sprintf("drain incomplete: %d of %d pods still on the node: %s", len(st.PendingPods), st.EvictionPods, st.LastError)
	}
	if err := e.setShutdownCondition(wctx, "node is shutting down; "+msg, e.now()); err != nil {
		e.Logger.Warn("Could not record the shutdown drain result", "err", err)
	}
	e.event(typ, "ShutdownDrainFinished", "Shutdown drain: %s; releasing the delay lock", msg)
	return ShutdownResult{Complete: complete, Message: msg}
}

// setShutdownCondition sets NodeShuttingDown True with msg; End removes it
// with UnderMaintenance.
func (e *Engine) setShutdownCondition(ctx context.Context, msg string, now metav1.Time) error {
	written, err := patchCondition(ctx, e.Client, e.NodeName, e.cached(), ShuttingDownCondition, corev1.ConditionTrue, ReasonPrepareForShutdown, msg, now)
	if err == nil {
		e.afterConditionWrite(ctx, written, now)
	}
	return err
}
