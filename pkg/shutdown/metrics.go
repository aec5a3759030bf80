package shutdown

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// Metrics are the shutdown guard's metrics. Their labels are bounded by the
// Outcome and State constants.
type Metrics struct {
	DelayLockHeld prometheus.Gauge
	Drains        *prometheus.CounterVec
	InhibitDelay  prometheus.Gauge
	GuardState    *prometheus.GaugeVec
}

// outcomes are the values of drains_total's result label; each is exported
// at 0 from the start, so that increase() sees a node's first shutdown.
var outcomes = []Outcome{OutcomeDrained, OutcomeIncomplete, OutcomeTimeout, OutcomeFailed, OutcomeCancelled, OutcomeSkipped}

// states are the values of guard_state's state label.
var states = []State{StateConnecting, StateHolding, StateDraining, StateReleased, StateReconnecting, StateUnavailable, StateStopped}

// NewMetrics creates the metrics and registers them on reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		DelayLockHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "shutdown", Name: "delay_lock_held",
			Help: "1 while node-agent holds its systemd-logind shutdown delay lock, else 0.",
		}),
		Drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "shutdown", Name: "drains_total",
			Help: "Drains started by a host shutdown, by result: drained, incomplete, timeout, failed, cancelled, skipped.",
		}, []string{"result"}),
		InhibitDelay: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "shutdown", Name: "inhibit_delay_seconds",
			Help: "systemd-logind's InhibitDelayMaxSec in force: the longest a shutdown waits for the delay lock.",
		}),
		GuardState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "shutdown", Name: "guard_state",
			Help: "1 for the shutdown guard's current state, 0 for the others; state unavailable means no system bus or no logind.",
		}, []string{"state"}),
	}
	for _, o := range outcomes {
		m.Drains.WithLabelValues(string(o))
	}
	for _, s := range states {
		m.GuardState.WithLabelValues(string(s))
	}
	if reg != nil {
		reg.MustRegister(m.DelayLockHeld, m.Drains, m.InhibitDelay, m.GuardState)
	}
	return m
}

// setState sets the series of s to 1 and every other state's to 0.
func (m *Metrics) setState(s State) { metrics.SetOneOf(m.GuardState, states, s) }

func (m *Metrics) setHeld(held bool) {
	v := 0.0
	if held {
		v = 1
	}
	m.DelayLockHeld.Set(v)
}

func (m *Metrics) setDelay(d time.Duration) { m.InhibitDelay.Set(d.Seconds()) }

func (m *Metrics) count(o Outcome) { m.Drains.WithLabelValues(string(o)).Inc() }
