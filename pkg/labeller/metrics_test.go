package labeller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestNewMetrics: the metrics keep their names (dashboards and the alerts in
// deploy/components/monitoring use them), and every result and source is
// there at 0 before the first sync.
func TestNewMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	want := `
# HELP node_agent_label_sync_total Label syncs by result: unchanged (no write), changed (one patch), skipped (skip-node), conflict (the Node changed meanwhile; retried), error.
# TYPE node_agent_label_sync_total counter
node_agent_label_sync_total{result="changed"} 0
node_agent_label_sync_total{result="conflict"} 0
node_agent_label_sync_total{result="error"} 0
node_agent_label_sync_total{result="skipped"} 0
node_agent_label_sync_total{result="unchanged"} 0
# HELP node_agent_label_managed Owned CPU labels currently desired on the node.
# TYPE node_agent_label_managed gauge
node_agent_label_managed 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "node_agent_label_sync_total", "node_agent_label_managed"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
	}
	for name, series := range map[string]int{
		"node_agent_label_managed":                    1,
		"node_agent_label_sync_total":                 len(syncResults),
		"node_agent_label_sync_duration_seconds":      1,
		"node_agent_label_discovery_duration_seconds": len(discoverySources),
	} {
		if got[name] != series {
			t.Errorf("%s: %d series, want %d", name, got[name], series)
		}
	}
	if len(got) != 4 {
		t.Errorf("registered %v, want the labeller's four metrics", got)
	}
}

// TestNewMetricsWithoutRegistry: a controller built without metrics gets
// unregistered ones, so two controllers in one test process do not clash.
func TestNewMetricsWithoutRegistry(t *testing.T) {
	a, b := NewMetrics(nil), NewMetrics(nil)
	a.Managed.Set(3)
	if v := testutil.ToFloat64(b.Managed); v != 0 {
		t.Errorf("metrics built without a registry share state: %v", v)
	}
}
