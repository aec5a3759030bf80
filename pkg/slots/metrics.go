package slots

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// Metrics are the coordinator's metrics (subsystem drain_slot). Labels are
// pool names, which the configuration bounds.
type Metrics struct {
	Held        *prometheus.GaugeVec
	Waiting     *prometheus.GaugeVec
	Grants      prometheus.Counter
	Revocations prometheus.Counter
	Leader      prometheus.Gauge
}

// NewMetrics creates the metrics and registers them on reg when it is not
// nil. A nil *Metrics records nothing.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "drain_slot", Name: "held",
			Help: "Nodes holding a drain slot, by pool (default is slots.limit)."}, []string{"pool"}),
		Waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "drain_slot", Name: "waiting",
			Help: "Nodes whose request for a drain slot waits, by pool that keeps them waiting or that they belong to."}, []string{"pool"}),
		Grants: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "drain_slot", Name: "grants_total",
			Help: "Drain slots granted by this coordinator."}),
		Revocations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "drain_slot", Name: "revocations_total",
			Help: "Drain slots taken back from a holder whose heartbeat stopped or that held past its bound."}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "drain_slot", Name: "coordinator_leader",
			Help: "1 while this coordinator replica leads (decides), 0 otherwise."}),
	}
	if reg != nil {
		reg.MustRegister(m.Held, m.Waiting, m.Grants, m.Revocations, m.Leader)
	}
	return m
}

func (m *Metrics) observe(out Output) {
	if m == nil {
		return
	}
	for pool, n := range out.Held {
		m.Held.WithLabelValues(pool).Set(float64(n))
		m.Waiting.WithLabelValues(pool).Set(float64(out.Waiting[pool]))
	}
}

func (m *Metrics) granted() {
	if m != nil {
		m.Grants.Inc()
	}
}

func (m *Metrics) revoked() {
	if m != nil {
		m.Revocations.Inc()
	}
}

// SetLeader says whether this replica leads.
func (m *Metrics) SetLeader(leading bool) {
	if m == nil {
		return
	}
	v := 0.0
	if leading {
		v = 1
	}
	m.Leader.Set(v)
}
