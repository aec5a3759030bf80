package selfdrain

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/shutdown"
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

// ShutdownDrainer adapts the controller to the shutdown Guard.
func (c *Controller) ShutdownDrainer() shutdown.Drainer { return shutdownDrainer{c} }

type shutdownDrainer struct{ c *Controller }

// Drain implements shutdown.Drainer.
func (d shutdownDrainer) Drain(ctx context.Context, deadline time.Time) (shutdown.Result, error) {
	e := d.c.Engine
	now := metav1.NewTime(e.Clock.Now())
	window := deadline.Sub(now.Time).Round(time.Second)
	if err := setShutdownCondition(ctx, e, corev1.ConditionTrue, ReasonPrepareForShutdown,
		fmt.Sprintf("node is shutting down; node-agent drains it within %s", window), now); err != nil {
		e.Logger.Warn("Could not mark the node as shutting down", "err", err)
	}
	e.Recorder.Eventf(e.nodeRef(), corev1.EventTypeWarning, "NodeShuttingDown", "Host is shutting down; draining within %s (cluster-wide drain slot not awaited)", window)
	st, err := d.c.ShutdownDrain(ctx, deadline.Add(-statusReserve))
	if st == nil {
		return shutdown.Result{}, err
	}
	complete := st.Phase == PhaseSucceeded
	st.DrainedInTime = &complete
	// The Guard's context may end any moment now; the record must still
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
	if err := setShutdownCondition(wctx, e, corev1.ConditionTrue, ReasonPrepareForShutdown, "node is shutting down; "+msg, metav1.NewTime(e.Clock.Now())); err != nil {
		e.Logger.Warn("Could not record the shutdown drain result", "err", err)
	}
	e.Recorder.Eventf(e.nodeRef(), typ, "ShutdownDrainFinished", "Shutdown drain: %s; releasing the inhibitor lock", msg)
	if err != nil && ctx.Err() == nil {
		return shutdown.Result{Complete: complete, Message: msg}, err
	}
	return shutdown.Result{Complete: complete, Message: msg}, nil
}

// Undo implements shutdown.Drainer.
func (d shutdownDrainer) Undo(ctx context.Context) error {
	return d.c.ShutdownCancelled(ctx)
}

func setShutdownCondition(ctx context.Context, e *Engine, status corev1.ConditionStatus, reason, msg string, now metav1.Time) error {
	return patchCondition(ctx, e.Client, e.NodeName, ShuttingDownCondition, status, reason, msg, now)
}
