package labeller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// syncResults are the values of label_sync_total's result label.
var syncResults = []string{"unchanged", "changed", "skipped", "conflict", "error"}

// discoverySources are the values of discovery_duration_seconds' source
// label.
var discoverySources = []string{"libvirt", "cpuid"}

// Metrics are the labeller's metrics.
type Metrics struct {
	Managed           prometheus.Gauge
	Syncs             *prometheus.CounterVec
	SyncDuration      prometheus.Histogram
	DiscoveryDuration *prometheus.HistogramVec
}

// NewMetrics creates the labeller's metrics and registers them on reg if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Managed: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "label", Name: "managed",
			Help: "Owned CPU labels currently desired on the node."}),
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "label", Name: "sync_total",
			Help: "Label syncs by result: unchanged (no write), changed (one patch), skipped (skip-node), conflict (the Node changed meanwhile; retried), error."}, []string{"result"}),
		SyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metrics.Namespace, Subsystem: "label", Name: "sync_duration_seconds",
			Help: "Time to compare and, when needed, patch the node's labels.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}),
		DiscoveryDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Subsystem: "label", Name: "discovery_duration_seconds",
			Help: "Time of one host CPU discovery, by source (libvirt, or cpuid when libvirt was unreachable).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}, []string{"source"}),
	}
	// Every result and source is exported from the start, at 0, so that
	// increase() over a window sees the first error or the first cpuid
	// fallback (alerts in deploy/components/monitoring rely on it).
	for _, r := range syncResults {
		m.Syncs.WithLabelValues(r)
	}
	for _, s := range discoverySources {
		m.DiscoveryDuration.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.Managed, m.Syncs, m.SyncDuration, m.DiscoveryDuration)
	}
	return m
}
