package labeller

import (
	"testing"

	"github.com/node-agent/node-agent/pkg/kubevirtcr"
)

// The CR's settings reach the labels as they are, and the cross-architecture
// feature gate turns the setting on only when the CR lists it.
func TestKubeVirtStateOf(t *testing.T) {
	if got := KubeVirtStateOf(kubevirtcr.State{Note: "no KubeVirt CR"}); got.Settings != nil || got.Note != "no KubeVirt CR" {
		t.Errorf("no CR: %+v", got)
	}
	for _, tt := range []struct {
		gates []string
		want  bool
	}{
		{nil, false},
		{[]string{"LiveMigration", "Snapshot"}, false},
		{[]string{"Snapshot", CrossArchitectureGate}, true},
		{[]string{"crossarchitecturevirtualization"}, false}, // KubeVirt's gates are case-sensitive
	} {
		got := KubeVirtStateOf(kubevirtcr.State{Settings: &kubevirtcr.Settings{
			CR: "kubevirt/kubevirt", ObsoleteCPUModels: []string{"486"}, MinCPUModel: "Penryn", FeatureGates: tt.gates}})
		s := got.Settings
		if s == nil || s.CR != "kubevirt/kubevirt" || len(s.ObsoleteCPUModels) != 1 || s.MinCPUModel != "Penryn" {
			t.Fatalf("settings %+v, want the CR's", s)
		}
		if s.CrossArchitectureVirtualization != tt.want {
			t.Errorf("gates %v: cross-architecture %v, want %v", tt.gates, s.CrossArchitectureVirtualization, tt.want)
		}
	}
}
