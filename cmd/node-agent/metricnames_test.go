package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/node-agent/node-agent/pkg/metrics"
	"github.com/node-agent/node-agent/pkg/shutdown"
	"github.com/node-agent/node-agent/pkg/slots"
)

// TestMetricNamesFollowOneStyle: every metric of the agent and of the
// coordinator is named in the one style (metrics.CheckName), and no old name
// of metrics.Renamed is served any more.
func TestMetricNamesFollowOneStyle(t *testing.T) {
	rec := agentCollectors()
	shutdown.NewMetrics(rec)
	slots.NewMetrics(rec)
	// What a metric is: by its Go type, or, for a collector of its own
	// making, by what it exports.
	kinds := map[string]dto.MetricType{}
	reg := prometheus.NewRegistry()
	for _, c := range rec.collectors {
		switch c.(type) {
		case prometheus.Gauge, *prometheus.GaugeVec, prometheus.Histogram, *prometheus.HistogramVec:
			for _, n := range describedNames(c) {
				kinds[n] = dto.MetricType_GAUGE // not a counter; all the check asks
			}
		case prometheus.Counter, *prometheus.CounterVec:
			for _, n := range describedNames(c) {
				kinds[n] = dto.MetricType_COUNTER
			}
		default:
			reg.MustRegister(c)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		kinds[mf.GetName()] = mf.GetType()
	}
	for _, c := range rec.collectors {
		for _, n := range describedNames(c) {
			if _, ok := kinds[n]; !ok {
				t.Errorf("%s: cannot tell what kind of metric it is", n)
			}
		}
	}
	if len(kinds) < 30 {
		t.Fatalf("found only %d metrics", len(kinds))
	}
	for n, k := range kinds {
		if err := metrics.CheckName(n, k == dto.MetricType_COUNTER); err != nil {
			t.Error(err)
		}
	}
	for _, r := range metrics.Renamed {
		if _, ok := kinds[r.Old]; ok {
			t.Errorf("%s is still served; it is %s now", r.Old, r.New)
		}
		if _, ok := kinds[r.New]; !ok {
			t.Errorf("%s (was %s) is not served", r.New, r.Old)
		}
	}
}

// describedNames are the names c describes.
func describedNames(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	var out []string
	for d := range ch {
		if m := descRE.FindStringSubmatch(d.String()); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}
