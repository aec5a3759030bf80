// Package metrics owns node-agent's private Prometheus registry. Each package
// registers its own collectors on the registry it is given; nothing uses the
// global default registry, so tests can build as many agents as they like.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/node-agent/node-agent/pkg/version"
)

// Namespace prefixes every metric name.
const Namespace = "node_agent"

// NewRegistry returns a registry holding node_agent_build_info and the Go and
// process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	v := version.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace:   Namespace,
		Name:        "build_info",
		Help:        "Build identity of node-agent; always 1.",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "goversion": v.GoVersion},
	})
	buildInfo.Set(1)
	reg.MustRegister(buildInfo,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// SetOneOf sets g's series for each value in all: 1 for current, 0 for the
// others, so that exactly one series (or none, when current is not among
// them) reads 1. It serves the gauges that report one state out of a fixed
// set, such as a phase or a mode.
func SetOneOf[T ~string](g *prometheus.GaugeVec, all []T, current T) {
	for _, v := range all {
		x := 0.0
		if v == current {
			x = 1
		}
		g.WithLabelValues(string(v)).Set(x)
	}
}
