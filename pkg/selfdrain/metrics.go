package selfdrain

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// Metrics are the self-drain metrics.
type Metrics struct {
	DrainDuration     *prometheus.HistogramVec
	Evictions         *prometheus.CounterVec
	PendingPods       prometheus.Gauge
	MaintenanceActive prometheus.Gauge
}

// NewMetrics creates the metrics and registers them on reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		DrainDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Name: "drain_duration_seconds",
			Help:    "Time from the start of a drain to its end, by trigger (annotation, nodemaintenance, shutdown) and result (succeeded, failed, cancelled).",
			Buckets: []float64{0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"trigger", "result"}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "evictions_total",
			Help: "Eviction requests by result: evicted, blocked (429, e.g. a PodDisruptionBudget), not_found, error, deleted (drain.deleteAfter).",
		}, []string{"result"}),
		PendingPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "drain_pending_pods",
			Help: "Pods still on the node that the current drain must evict.",
		}),
		MaintenanceActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "maintenance_active",
			Help: "1 while the node is in maintenance (cordoned by the agent for a drain), else 0.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.DrainDuration, m.Evictions, m.PendingPods, m.MaintenanceActive)
	}
	return m
}
