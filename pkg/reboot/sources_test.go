package reboot

import (
	"context"
	"testing"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/gates"
)

type namedSource string

func (namedSource) Blockers(context.Context) []Blocker { return nil }

// The VMs come first, then the blocking pods, then the alert check and the
// gates in their order; a source is there only when its key is set.
func TestBlockerSources(t *testing.T) {
	vms := namedSource("vms")
	rc := config.Default().Reboot
	got, err := BlockerSources(rc, vms, nil)
	if err != nil || len(got) != 1 || got[0] != vms {
		t.Fatalf("defaults: %v, %v; want the VMs only", got, err)
	}
	rc.BlockingPodSelector = "app=db"
	rc.BlockingPodNamespaces = []string{"tenant"}
	rc.PrometheusURL = "http://prometheus:9090"
	rc.BlockingAlertRegexp = "^Watchdog$"
	rc.Gates = []config.GateConfig{{Name: "first", Query: "up == 0"}, {Name: "second", Query: "x > 1", BeforeReboot: true}}
	got, err = BlockerSources(rc, vms, nil)
	if err != nil || len(got) != 3 || got[0] != vms {
		t.Fatalf("all set: %v, %v; want the VMs, the pods and the gates", got, err)
	}
	pods, ok := got[1].(PodBlockers)
	if !ok || pods.Selector.String() != "app=db" || len(pods.Namespaces) != 1 {
		t.Errorf("second source %#v, want the pods of app=db in tenant", got[1])
	}
	gs, ok := got[2].(gates.Prometheus)
	if !ok || len(gs.Gates) != 3 || !gs.Gates[0].Alerts || gs.Gates[1].Name != "first" || gs.Gates[2].Name != "second" || !gs.Gates[2].BeforeReboot {
		t.Errorf("third source %#v, want the alert check, then first, then second (beforeReboot)", got[2])
	}
	if gs.Client == nil || gs.Client.Timeout != gates.Timeout {
		t.Errorf("gate client %v, want one bounded by gates.Timeout", gs.Client)
	}
	rc.BlockingPodSelector = "app in (("
	if _, err := BlockerSources(rc, vms, nil); err == nil {
		t.Error("a malformed selector was accepted")
	}
}
