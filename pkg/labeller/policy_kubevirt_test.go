package labeller

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// kubeVirtHost is a host whose models exercise the obsolete rules: qemu64 is
// on KubeVirt's default list, kvm64-v2 is an alias of a default that KubeVirt
// does not list, Haswell is current.
func kubeVirtHost(hostModel string) *hostcpu.HostCPU {
	var models []hostcpu.Model
	for _, m := range []string{"qemu64", "kvm64-v2", "Haswell", "Haswell-v2", "Penryn"} {
		models = append(models, hostcpu.Model{Name: m, Usable: true, Usability: "yes"})
	}
	return &hostcpu.HostCPU{
		Arch: "x86_64", Vendor: "Intel", Models: models,
		HostModel:         &hostcpu.HostModel{Name: hostModel, Vendor: "Intel", Required: []string{"avx2", "sse2"}},
		SupportedFeatures: []string{"avx2", "sse2"},
		ModelFeatures:     map[string][]string{"Penryn": {"sse2"}},
		EmulatedArches:    []string{"aarch64"},
	}
}

// TestObsoleteSettings holds the obsolete list to KubeVirt's rule
// (kubevirt/kubevirt d923fdb, node_labeller.go prepareLabels and
// cpu_plugin.go filterCpuModels): the CR's list replaces the defaults, the
// configuration's adds to them (as the HyperConverged CR's obsoleteCPUs
// does); the defaults only keep models out of the model families;
// obsolete-host-model is written only when the host model is on a list
// someone set. Under a KubeVirt CR names are exact; node-agent's own
// list also covers -vN aliases.
func TestObsoleteSettings(t *testing.T) {
	tests := []struct {
		name      string
		policy    Policy
		hostModel string
		// models that get a cpu-model label
		wantModels []string
		wantMark   bool
	}{
		{name: "defaults: qemu64 filtered, host model kvm64 not marked", hostModel: "kvm64",
			wantModels: []string{"Haswell", "Haswell-v2", "Penryn"}},
		{name: "configuration list adds to the defaults and marks the host model", hostModel: "Haswell",
			policy:     Policy{ObsoleteCPUModels: []string{"Haswell"}},
			wantModels: []string{"Penryn"}, wantMark: true},
		{name: "KubeVirt CR without a list: the defaults, exact names", hostModel: "kvm64",
			policy:     Policy{KubeVirt: &KubeVirtSettings{CR: "kubevirt/kubevirt"}, ObsoleteCPUModels: []string{"Haswell"}},
			wantModels: []string{"Haswell", "Haswell-v2", "Penryn", "kvm64-v2"}},
		{name: "KubeVirt CR list replaces the defaults and the configuration", hostModel: "Haswell",
			policy:     Policy{KubeVirt: &KubeVirtSettings{CR: "kubevirt/kubevirt", ObsoleteCPUModels: []string{"Haswell", "Penryn"}}, ObsoleteCPUModels: []string{"qemu64"}},
			wantModels: []string{"Haswell-v2", "kvm64-v2", "qemu64"}, wantMark: true},
		{name: "KubeVirt CR list without the host model", hostModel: "Haswell",
			policy:     Policy{KubeVirt: &KubeVirtSettings{CR: "kubevirt/kubevirt", ObsoleteCPUModels: []string{"Penryn"}}},
			wantModels: []string{"Haswell", "Haswell-v2", "kvm64-v2", "qemu64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustLabels(t, tt.policy, kubeVirtHost(tt.hostModel))
			if got := keysWithPrefix(res.Labels, kubevirtlabels.CPUModelLabelPrefix); !reflect.DeepEqual(got, tt.wantModels) {
				t.Errorf("cpu-model %v; want %v", got, tt.wantModels)
			}
			if got := keysWithPrefix(res.Labels, kubevirtlabels.CPUModelMigrationLabelPrefix); !reflect.DeepEqual(got, tt.wantModels) {
				t.Errorf("cpu-model-migration %v; want %v", got, tt.wantModels)
			}
			_, marked := res.Labels[kubevirtlabels.ObsoleteHostModelLabel]
			if marked != tt.wantMark || res.HostModelObsolete != tt.wantMark {
				t.Errorf("obsolete-host-model %v (flag %v); want %v", marked, res.HostModelObsolete, tt.wantMark)
			}
			// The host model's own label is written either way.
			if res.Labels[kubevirtlabels.HostModelCPULabelPrefix+tt.hostModel] != "true" {
				t.Errorf("no host-model-cpu label for %s", tt.hostModel)
			}
		})
	}
}

// TestKubeVirtMinCPUModel: KubeVirt subtracts no minimum model whatever its
// CR says (minCPUModel is deprecated and unused), so under a CR node-agent's
// minCPUModel does not apply either.
func TestKubeVirtMinCPUModel(t *testing.T) {
	h := kubeVirtHost("Haswell")
	own := mustLabels(t, Policy{MinCPUModel: "Penryn"}, h)
	if got := keysWithPrefix(own.Labels, kubevirtlabels.CPUFeatureLabelPrefix); !reflect.DeepEqual(got, []string{"avx2"}) {
		t.Errorf("configuration's Penryn: cpu-feature %v; want Penryn's sse2 subtracted", got)
	}
	p := Policy{MinCPUModel: "Penryn", KubeVirt: &KubeVirtSettings{CR: "kubevirt/kubevirt", MinCPUModel: "Penryn"}}
	if p.MinModel() != "" || p.ExpandModels() != nil {
		t.Errorf("under a CR: minimum model %q, expand %v; want none", p.MinModel(), p.ExpandModels())
	}
	kv := mustLabels(t, p, h)
	for _, prefix := range []string{kubevirtlabels.CPUFeatureLabelPrefix, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix} {
		if got := keysWithPrefix(kv.Labels, prefix); !reflect.DeepEqual(got, []string{"avx2", "sse2"}) {
			t.Errorf("under a CR: %s %v; want every feature", prefix, got)
		}
	}
	if p.Source() != "KubeVirt CR kubevirt/kubevirt" || (Policy{}).Source() != "node-agent's configuration" {
		t.Errorf("sources %q, %q", p.Source(), Policy{}.Source())
	}
}

// TestVMArch: kubevirt.io/vm-arch-<arch> for the node's own architecture and
// each one libvirt emulates here, by Go's names, only while the CR turns the
// CrossArchitectureVirtualization gate on (node_labeller.go prepareLabels,
// kubevirt d923fdb); unknown emulation leaves the family alone.
func TestVMArch(t *testing.T) {
	gate := &KubeVirtSettings{CR: "kubevirt/kubevirt", CrossArchitectureVirtualization: true}
	noGate := &KubeVirtSettings{CR: "kubevirt/kubevirt"}
	tests := []struct {
		name     string
		kv       *KubeVirtSettings
		arch     string
		emulated []string
		want     []string
		omitted  string // part of the omission's reason; "" for none
	}{
		{name: "gate on, aarch64 emulated", kv: gate, arch: "x86_64", emulated: []string{"aarch64"}, want: []string{"amd64", "arm64"}},
		{name: "gate on, nothing emulated", kv: gate, arch: "x86_64", emulated: []string{}, want: []string{"amd64"}},
		{name: "gate on, arm64 host emulating x86_64", kv: gate, arch: "aarch64", emulated: []string{"x86_64"}, want: []string{"amd64", "arm64"}},
		{name: "gate on, s390x", kv: gate, arch: "s390x", emulated: []string{}, want: []string{"s390x"}},
		{name: "gate on, emulation unknown", kv: gate, arch: "x86_64", omitted: "libvirt unreachable"},
		{name: "gate off", kv: noGate, arch: "x86_64", emulated: []string{"aarch64"}},
		{name: "no CR", arch: "x86_64", emulated: []string{"aarch64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &hostcpu.HostCPU{Arch: tt.arch, EmulatedArches: tt.emulated}
			if tt.emulated == nil {
				h.Unavailable = []hostcpu.Gap{{Fact: hostcpu.FactEmulatedArches, Reason: "libvirt unreachable: no socket"}}
			}
			res := mustLabels(t, Policy{KubeVirt: tt.kv}, h)
			if got := keysWithPrefix(res.Labels, kubevirtlabels.VMArchLabelPrefix); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("vm-arch %v; want %v", got, tt.want)
			}
			reason := ""
			for _, o := range res.Omitted {
				if slices.Contains(o.Keys, kubevirtlabels.VMArchLabelPrefix+"*") {
					reason = o.Reason
				}
			}
			if (tt.omitted == "") != (reason == "") || !strings.Contains(reason, tt.omitted) {
				t.Errorf("omission %q; want one naming %q", reason, tt.omitted)
			}
		})
	}
	if !IsOwnedKey(kubevirtlabels.VMArchLabelPrefix + "arm64") {
		t.Error("vm-arch labels are not owned: stale ones would never be removed")
	}
}
