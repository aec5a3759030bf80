package slots

import (
	"slices"

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
	// Unhealthy and SafetyStop are per pool with slots.pools[].maxUnhealthy
	// set.
	Unhealthy  *prometheus.GaugeVec
	SafetyStop *prometheus.GaugeVec
	// RecoveryStop is per pool: 1 while a node of it did not come back
	// healthy within slots.pools[].recoveryBound.
	RecoveryStop *prometheus.GaugeVec
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
		Unhealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "drain_slot", Name: "unhealthy_nodes",
			Help: "Nodes holding no drain slot that are not Ready or are cordoned other than by node-agent, by pool with slots.pools[].maxUnhealthy set."}, []string{"pool"}),
		SafetyStop: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "drain_slot", Name: "safety_stop",
			Help: "1 while the pool's safety stop holds (more unhealthy nodes than slots.pools[].maxUnhealthy): no new drain slot is granted in it."}, []string{"pool"}),
		RecoveryStop: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "drain_slot", Name: "recovery_stop",
			Help: "1 while a node of the pool that gave its drain slot back is not healthy again past slots.pools[].recoveryBound: it keeps the slot and no new one is granted in the pool."}, []string{"pool"}),
	}
	if reg != nil {
		reg.MustRegister(m.Held, m.Waiting, m.Grants, m.Revocations, m.Leader, m.Unhealthy, m.SafetyStop, m.RecoveryStop)
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
		m.RecoveryStop.WithLabelValues(pool).Set(float64(b2i(slices.Contains(out.RecoveryStopped, pool))))
	}
	for pool, n := range out.Unhealthy {
		m.Unhealthy.WithLabelValues(pool).Set(float64(n))
		m.SafetyStop.WithLabelValues(pool).Set(float64(b2i(slices.Contains(out.Stopped, pool))))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
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
