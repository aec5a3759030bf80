package reboot

import (
	"strings"

	// prom: the name prometheus is taken in this package (a test's fake
	// Prometheus server).
	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// Metrics are the controller's metrics. They mirror the Record on the Node,
// so that an alert sees what `node-agent reboot status` shows, and count the
// reboots by how they ended. Every label is bounded: the reasons (Reasons)
// and the results below. The wiring registers them only when reboot.enabled
// is on, so that a cluster without the controller exports no series that
// read "no reboot needed".
type Metrics struct {
	// Required is 1 while the record reports a reboot needed or under way
	// (Record.Needed), as kured's kured_reboot_required.
	Required prom.Gauge
	// Reason is 1 for the record's reason, 0 for the others.
	Reason *prom.GaugeVec
	// RequiredSince is Record.Since as Unix time; 0 when it is not set.
	RequiredSince prom.Gauge
	// Reboots counts the ends of reboot attempts by result.
	Reboots *prom.CounterVec
}

// The values of attempts_total's result label.
const (
	// ResultRebooted: the host came back from a reboot the controller
	// asked for. The agent after the reboot counts it: the one that asked
	// goes down with the host before any scrape.
	ResultRebooted = "rebooted"
	// ResultDrainFailed: the drain did not finish within drain.timeout,
	// and the host was not rebooted (reason DrainFailed).
	ResultDrainFailed = "drain_failed"
	// ResultLoop: the host came back from a reboot still needing one.
	ResultLoop = "loop"
)

// results are the values of attempts_total's result label; each is exported
// at 0 from the start, so that increase() sees a node's first reboot.
var results = []string{ResultRebooted, ResultDrainFailed, ResultLoop}

// NewMetrics creates the metrics and registers them on reg when it is not
// nil. A nil *Metrics records nothing, so every method below may be called
// on it.
func NewMetrics(reg prom.Registerer) *Metrics {
	m := &Metrics{
		Required: prom.NewGauge(prom.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "reboot", Name: "required",
			Help: "1 while the reboot controller finds that this node needs a reboot (sentinel file or command, or the node-agent.io/reboot annotation) or has one under way, else 0, as kured's kured_reboot_required. While the need cannot be found out, it keeps the last state found. Exported only with reboot.enabled.",
		}),
		Reason: prom.NewGaugeVec(prom.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "reboot", Name: "reason",
			Help: "1 for the reason of the node's RebootRequired condition, 0 for the others (" + strings.Join(Reasons, ", ") + "). Exported only with reboot.enabled.",
		}, []string{"reason"}),
		RequiredSince: prom.NewGauge(prom.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "reboot", Name: "required_since_timestamp_seconds",
			Help: "Unix time since which the node has needed a reboot, or the need has been unknown, without a break; 0 while none is needed. Exported only with reboot.enabled.",
		}),
		Reboots: prom.NewCounterVec(prom.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "reboot", Name: "attempts_total",
			Help: "Ends of the reboot controller's attempts, by result: rebooted (the host came back from a reboot the controller asked for, counted by the agent that starts after it), drain_failed (the drain did not finish within drain.timeout; no reboot), loop (the host came back still needing a reboot). Exported only with reboot.enabled.",
		}, []string{"result"}),
	}
	for _, r := range results {
		m.Reboots.WithLabelValues(r)
	}
	metrics.SetOneOf(m.Reason, Reasons, "")
	if reg != nil {
		reg.MustRegister(m.Required, m.Reason, m.RequiredSince, m.Reboots)
	}
	return m
}

// Observe mirrors rec, the Record the controller keeps on its Node; nil
// (no record yet) reads as nothing known: no reboot required, no reason
// set, no since.
func (m *Metrics) Observe(rec *Record) {
	if m == nil {
		return
	}
	required, since, reason := 0.0, 0.0, ""
	if rec != nil {
		if rec.Needed() {
			required = 1
		}
		if rec.Since != nil {
			since = float64(rec.Since.Unix())
		}
		reason = rec.Reason
	}
	m.Required.Set(required)
	m.RequiredSince.Set(since)
	metrics.SetOneOf(m.Reason, Reasons, reason)
}

// Rebooted counts a host back from the reboot the controller asked for;
// once per reboot, however often logind was asked.
func (m *Metrics) Rebooted() { m.count(ResultRebooted) }

// DrainFailed counts an attempt whose drain did not finish within
// drain.timeout.
func (m *Metrics) DrainFailed() { m.count(ResultDrainFailed) }

// Loop counts a host that came back from a reboot still needing one.
func (m *Metrics) Loop() { m.count(ResultLoop) }

func (m *Metrics) count(result string) {
	if m == nil {
		return
	}
	m.Reboots.WithLabelValues(result).Inc()
}

var _ Observer = (*Metrics)(nil)
