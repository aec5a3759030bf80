package maintenance

import (
	"testing"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/gates"
)

// The VM gate is always asked, first; maintenance.gates follow it only when
// set, each query bounded.
func TestGatesFor(t *testing.T) {
	vms := &VMGate{}
	g := GatesFor(config.MaintenanceConfig{}, vms, nil, GateBound{})
	if len(g.Checks) != 1 || g.Checks[0].What != VMGateWhat || g.Checks[0].Checker != vms || g.Interval != GateInterval {
		t.Fatalf("no gates configured: %+v", g)
	}
	mc := config.MaintenanceConfig{PrometheusURL: "http://prometheus:9090", Gates: []config.GateConfig{{Name: "healthy", Query: "up == 0"}}}
	g = GatesFor(mc, vms, nil, GateBound{})
	if len(g.Checks) != 2 || g.Checks[0].Checker != vms {
		t.Fatalf("with gates: %+v, want the VM gate, then the gates", g.Checks)
	}
	gb, ok := g.Checks[1].Checker.(gates.Prometheus)
	if !ok || gb.URL != mc.PrometheusURL || len(gb.Gates) != 1 || gb.Gates[0].Name != "healthy" || gb.Client == nil || gb.Client.Timeout != gates.Timeout {
		t.Errorf("second check %#v", g.Checks[1].Checker)
	}
}
