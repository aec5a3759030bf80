package selfdrain

import (
	"context"
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

// DrainForShutdown drains the node because the host is going down: it marks
// the node NodeShuttingDown, drains it (see ShutdownDrain) so that the final
// status is written before deadline, and records whether the drain was
// complete. The wiring hands it to the shutdown guard; this package knows
// nothing of logind.
func (c *Controller) DrainForShutdown(ctx context.Context, deadline time.Time) (ShutdownResult, error) {
	e := c.engine
	now := e.now()
	window := deadline.Sub(now.Time).Round(time.Second)
	if err := setShutdownCondition(ctx, e, corev1.ConditionTrue, ReasonPrepareForShutdown,
		fmt.Sprintf("node is shutting down; node-agent drains it within %s", window), now); err != nil {
		e.Logger.Warn("Could not mark the node as shutting down", "err", err)
	}
	e.event(corev1.EventTypeWarning, "NodeShuttingDown", "Host is shutting down; draining within %s (cluster-wide drain slot not awaited)", window)
	st, err := c.ShutdownDrain(ctx, deadline.Add(-statusReserve))
	if st == nil {
		return ShutdownResult{}, err
	}
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
	if err := setShutdownCondition(wctx, e, corev1.ConditionTrue, ReasonPrepareForShutdown, "node is shutting down; "+msg, e.now()); err != nil {
		e.Logger.Warn("Could not record the shutdown drain result", "err", err)
	}
	e.event(typ, "ShutdownDrainFinished", "Shutdown drain: %s; releasing the inhibitor lock", msg)
	res := ShutdownResult{Complete: complete, Message: msg}
	if err != nil && ctx.Err() == nil {
		return res, err
	}
	return res, nil
}

func setShutdownCondition(ctx context.Context, e *Engine, status corev1.ConditionStatus, reason, msg string, now metav1.Time) error {
	return patchCondition(ctx, e.Client, e.NodeName, ShuttingDownCondition, status, reason, msg, now)
}
