package selfdrain

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// This file is what a maintenance drain (annotation, NodeMaintenance object
// or reboot) does when drain.timeout passes. It stops: one pod that cannot
// leave (a PodDisruptionBudget that allows nothing, a VM that cannot
// migrate) must not hold the drain slot, and with it every other node's
// maintenance, for ever. The run then returns, which gives its slot back,
// and the controller does not start the same request again (decide).

// timeOut ends a maintenance drain at drain.timeout: no eviction is asked
// for any more, the status turns Failed and says so, and Drain returns.
func (r *drainRun) timeOut() *Status {
	e, st := r.e, r.st
	st.Phase = PhaseFailed
	if st.LastError == "" {
		st.LastError = fmt.Sprintf("drain.timeout (%s) passed; %d pods left", e.Config.Timeout.Duration, len(r.pending))
	}
	r.pw.stop()
	e.finishStatus(r.ctx, st, e.Clock.Now())
	e.event(corev1.EventTypeWarning, "DrainTimedOut", "Drain did not finish within drain.timeout (%s): %d of %d pods still on the node; it stopped evicting and gave its drain slot back. Last error: %s",
		e.Config.Timeout.Duration, len(r.pending), st.EvictionPods, st.LastError)
	e.Logger.Warn("Drain timed out; no more evictions, drain slot given back", "timeout", e.Config.Timeout.Duration, "pending", len(r.pending), "lastError", st.LastError)
	e.Metrics.observeDrain(r.req.Trigger, "failed", e.Clock.Since(r.start))
	return st
}
