package metrics

import "github.com/prometheus/client_golang/prometheus"

// The waits a tenant or an outside service can prolong, each with an
// admin's bound (the wait label of WaitBound's metrics).
const (
	// WaitMaintenanceGates: the gates and the VMs that cannot leave,
	// holding a maintenance before its slot (maintenance.gateBound).
	WaitMaintenanceGates = "maintenance-gates"
	// WaitRebootBlockers: pods, alerts, gates and VMs holding a needed
	// reboot (reboot.blockerBound).
	WaitRebootBlockers = "reboot-blockers"
	// WaitMaintenanceHooks: the hooks an outside controller put on the
	// Node, holding a maintenance before the cordon or before it is
	// reported done (maintenance.hookBound). Past the bound they hold no
	// longer: its decision is always proceed.
	WaitMaintenanceHooks = "maintenance-hooks"
)

// The decisions taken when a wait's bound runs out (the decision label).
const (
	DecisionWait    = "wait"
	DecisionProceed = "proceed"
)

var (
	waits     = []string{WaitMaintenanceGates, WaitRebootBlockers, WaitMaintenanceHooks}
	decisions = []string{DecisionWait, DecisionProceed}
)

// WaitBound counts the bounded waits that ran out, and says which are held
// past their bound now. One is shared by every package with such a wait,
// so that one metric name serves the shipped alerts. A nil *WaitBound
// records nothing.
type WaitBound struct {
	Exceeded *prometheus.CounterVec
	Held     *prometheus.GaugeVec
}

// NewWaitBound creates the metrics and registers them on reg when it is not
// nil. Every series is exported at 0 from the start, so that increase()
// sees the first time a bound runs out.
func NewWaitBound(reg prometheus.Registerer) *WaitBound {
	w := &WaitBound{
		Exceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "wait_bound_exceeded_total",
			Help: "Times a wait that a tenant or an outside service can prolong ran past the bound an admin set, by wait (maintenance-gates: maintenance.gateBound; reboot-blockers: reboot.blockerBound; maintenance-hooks: maintenance.hookBound) and decision (wait: the node keeps waiting; proceed: what held it is passed over).",
		}, []string{"wait", "decision"}),
		Held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "wait_bound_held",
			Help: "1 while this node keeps waiting past a wait's bound (the decision wait: maintenance.onGateBound, reboot.onBlockerBound), by wait; else 0.",
		}, []string{"wait"}),
	}
	for _, wt := range waits {
		w.Held.WithLabelValues(wt)
		for _, d := range decisions {
			w.Exceeded.WithLabelValues(wt, d)
		}
	}
	if reg != nil {
		reg.MustRegister(w.Exceeded, w.Held)
	}
	return w
}

// Ran counts wait's bound running out with decision.
func (w *WaitBound) Ran(wait, decision string) {
	if w == nil {
		return
	}
	w.Exceeded.WithLabelValues(wait, decision).Inc()
}

// Hold says whether the node keeps waiting past wait's bound now.
func (w *WaitBound) Hold(wait string, held bool) {
	if w == nil {
		return
	}
	x := 0.0
	if held {
		x = 1
	}
	w.Held.WithLabelValues(wait).Set(x)
}
