package targetpod

import (
	"errors"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestNodeSelector checks rows 1-21 one by one, each against its opposite.
// want lists the keys that must be there (with value) and absent the keys
// that must not.
func TestNodeSelector(t *testing.T) {
	hostModelNode := node("host-model-cpu.node.kubevirt.io/Skylake", "true",
		"host-model-required-features.node.kubevirt.io/hle", "true", "cpu-vendor.node.kubevirt.io/Intel", "true")
	tests := []struct {
		name   string
		vmi    *unstructured.Unstructured
		src    Source
		c      Cluster
		want   map[string]string
		absent []string
	}{
		{name: "rows 1, 2: schedulable and the architecture, lower-cased", vmi: vmiObj(t, "spec.architecture", "AMD64"),
			want: map[string]string{"kubevirt.io/schedulable": "true", "kubernetes.io/arch": "amd64"}},
		{name: "row 2 opposite: no architecture, no arch key", vmi: vmiObj(t, "spec.architecture", nil),
			want: map[string]string{"kubevirt.io/schedulable": "true"}, absent: []string{"kubernetes.io/arch"}},
		{name: "rows 3, 4: the CR's selectors, then the VMI's over them",
			vmi:  vmiObj(t, "spec.nodeSelector", obj{"zone": "b", "kubevirt.io/schedulable": "false"}),
			c:    Cluster{NodeSelectors: map[string]string{"zone": "a", "pool": "vm"}},
			want: map[string]string{"zone": "b", "pool": "vm", "kubevirt.io/schedulable": "false"}},
		{name: "row 5, v1.8+: kubevirt.io/cpumanager", vmi: vmiObj(t, "spec.domain.cpu.dedicatedCpuPlacement", true),
			c: Cluster{Version: "v1.8.4"}, want: map[string]string{"kubevirt.io/cpumanager": "true"}, absent: []string{"cpumanager"}},
		{name: "row 5, v1.7: cpumanager", vmi: vmiObj(t, "spec.domain.cpu.dedicatedCpuPlacement", true),
			c: Cluster{Version: "v1.7.4"}, want: map[string]string{"cpumanager": "true"}, absent: []string{"kubevirt.io/cpumanager"}},
		{name: "row 5 opposite: shared CPUs", vmi: vmiObj(t), absent: []string{"cpumanager", "kubevirt.io/cpumanager"}},
		{name: "rows 6, 7: Hyper-V labels under HypervStrictCheck",
			vmi: vmiObj(t, "spec.domain.features", obj{"hyperv": obj{"vpindex": obj{"enabled": true}, "relaxed": obj{"enabled": true},
				"synic": obj{"enabled": false}, "evmcs": obj{}}}),
			c:      Cluster{FeatureGates: []string{"HypervStrictCheck"}},
			want:   map[string]string{"hyperv.node.kubevirt.io/vpindex": "true", "cpu-vendor.node.kubevirt.io/Intel": "true"},
			absent: []string{"hyperv.node.kubevirt.io/synic", "hyperv.node.kubevirt.io/relaxed"}},
		{name: "rows 6, 7 opposite: gate off",
			vmi:    vmiObj(t, "spec.domain.features", obj{"hyperv": obj{"vpindex": obj{"enabled": true}, "evmcs": obj{}}}),
			absent: []string{"hyperv.node.kubevirt.io/vpindex", "cpu-vendor.node.kubevirt.io/Intel"}},
		{name: "rows 8, 9: a named model and its required features",
			vmi: vmiObj(t, "spec.domain.cpu.model", "Haswell", "spec.domain.cpu.features", arr(obj{"name": "pcid"},
				obj{"name": "ssse3", "policy": "require"}, obj{"name": "vmx", "policy": "optional"}, obj{"name": "x2apic", "policy": "force"})),
			want: map[string]string{"cpu-model.node.kubevirt.io/Haswell": "true", "cpu-feature.node.kubevirt.io/pcid": "true",
				"cpu-feature.node.kubevirt.io/ssse3": "true"},
			absent: []string{"cpu-feature.node.kubevirt.io/vmx", "cpu-feature.node.kubevirt.io/x2apic"}},
		{name: "row 8 opposite, row 9 with host-passthrough: features but no model label",
			vmi:  vmiObj(t, "spec.domain.cpu.model", "host-passthrough", "spec.domain.cpu.features", arr(obj{"name": "pcid"})),
			want: map[string]string{"cpu-feature.node.kubevirt.io/pcid": "true"}, absent: []string{"cpu-model.node.kubevirt.io/host-passthrough"}},
		{name: "row 9 opposite: no model, no feature labels",
			vmi: vmiObj(t, "spec.domain.cpu.features", arr(obj{"name": "pcid"})), absent: []string{"cpu-feature.node.kubevirt.io/pcid"}},
		{name: "row 10: status.machine.type over the spec's",
			vmi:  vmiObj(t, "spec.domain.machine", obj{"type": "q35"}, "status.machine", obj{"type": "pc-q35-rhel9.6.0"}),
			want: map[string]string{"machine-type.node.kubevirt.io/pc-q35-rhel9.6.0": "true"}, absent: []string{"machine-type.node.kubevirt.io/q35"}},
		{name: "row 10: the spec's when the status has none",
			vmi: vmiObj(t, "spec.domain.machine", obj{"type": "q35"}), want: map[string]string{"machine-type.node.kubevirt.io/q35": "true"}},
		{name: "row 11: invtsc required and a hint",
			vmi:  vmiObj(t, "spec.domain.cpu.features", arr(obj{"name": "invtsc", "policy": "require"}), "status.topologyHints", obj{"tscFrequency": int64(2400000000)}),
			want: map[string]string{"scheduling.node.kubevirt.io/tsc-frequency-2400000000": "true"}},
		{name: "row 11: Hyper-V reenlightenment and a hint",
			vmi:  vmiObj(t, "spec.domain.features", obj{"hyperv": obj{"reenlightenment": obj{"enabled": true}}}, "status.topologyHints", obj{"tscFrequency": int64(2400000000)}),
			want: map[string]string{"scheduling.node.kubevirt.io/tsc-frequency-2400000000": "true"}},
		{name: "row 11 opposite: invtsc optional",
			vmi:    vmiObj(t, "spec.domain.cpu.features", arr(obj{"name": "invtsc", "policy": "optional"}), "status.topologyHints", obj{"tscFrequency": int64(2400000000)}),
			absent: []string{"scheduling.node.kubevirt.io/tsc-frequency-2400000000"}},
		{name: "rows 12-15: realtime, SEV, SEV-ES, SNP",
			vmi:  vmiObj(t, "spec.domain.cpu.realtime", obj{}, "spec.domain.launchSecurity", obj{"sev": obj{"policy": obj{"encryptedState": true}}, "snp": obj{}}),
			want: map[string]string{"kubevirt.io/realtime": "true", "kubevirt.io/sev": "true", "kubevirt.io/sev-es": "true", "kubevirt.io/sev-snp": "true"}},
		{name: "rows 12-17 opposite: none asked", vmi: vmiObj(t),
			absent: []string{"kubevirt.io/realtime", "kubevirt.io/sev", "kubevirt.io/sev-es", "kubevirt.io/sev-snp", "kubevirt.io/s390-pv", "kubevirt.io/tdx"}},
		{name: "rows 16, 17: s390 secure execution; TDX",
			vmi:  vmiObj(t, "spec.architecture", "s390x", "spec.domain.launchSecurity", obj{"tdx": obj{}}),
			want: map[string]string{"kubevirt.io/s390-pv": "true", "kubevirt.io/tdx": "true", "kubernetes.io/arch": "s390x"}},
		{name: "row 18, v1.9 with the gate: vm-arch, no native arch",
			vmi: vmiObj(t), c: Cluster{FeatureGates: []string{"CrossArchitectureVirtualization"}},
			want: map[string]string{"kubevirt.io/vm-arch-amd64": "true"}, absent: []string{"kubernetes.io/arch"}},
		{name: "row 18 opposite: v1.8 with the gate",
			vmi: vmiObj(t), c: Cluster{Version: "v1.8.4", FeatureGates: []string{"CrossArchitectureVirtualization"}},
			want: map[string]string{"kubernetes.io/arch": "amd64"}, absent: []string{"kubevirt.io/vm-arch-amd64"}},
		{name: "row 20 step 2: the source node's host model and required features",
			vmi: vmiObj(t, "spec.domain.cpu.model", "host-model"), src: Source{Node: hostModelNode},
			want:   map[string]string{"cpu-model-migration.node.kubevirt.io/Skylake": "true", "cpu-feature.node.kubevirt.io/hle": "true"},
			absent: []string{"host-model-cpu.node.kubevirt.io/Skylake"}},
		{name: "row 20 step 1: the source pod's keys, the node not read",
			vmi: vmiObj(t, "spec.domain.cpu.model", "host-model"),
			src: Source{Node: hostModelNode, Pod: &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{
				"cpu-model-migration.node.kubevirt.io/Haswell": "true", "cpu-feature.node.kubevirt.io/aes": "true", "zone": "x"}}}},
			want:   map[string]string{"cpu-model-migration.node.kubevirt.io/Haswell": "true", "cpu-feature.node.kubevirt.io/aes": "true"},
			absent: []string{"cpu-model-migration.node.kubevirt.io/Skylake", "cpu-feature.node.kubevirt.io/hle", "zone"}},
		{name: "row 20 opposite: a named model reads no host model",
			vmi: vmiObj(t, "spec.domain.cpu.model", "Haswell"), src: Source{Node: hostModelNode},
			absent: []string{"cpu-model-migration.node.kubevirt.io/Skylake", "cpu-feature.node.kubevirt.io/hle"}},
		{name: "row 21, v1.7.1: the source node's vendor, host-passthrough too",
			vmi: vmiObj(t, "spec.domain.cpu.model", "host-passthrough"), src: Source{Node: node("cpu-vendor.node.kubevirt.io/AMD", "true")},
			c: Cluster{Version: "v1.7.1"}, want: map[string]string{"cpu-vendor.node.kubevirt.io/AMD": "true"}},
		{name: "row 21 opposite: v1.7.0 has no vendor rule",
			vmi: vmiObj(t), src: Source{Node: node("cpu-vendor.node.kubevirt.io/AMD", "true")},
			c: Cluster{Version: "v1.7.0"}, absent: []string{"cpu-vendor.node.kubevirt.io/AMD"}},
		{name: "row 21 opposite: a vendor already asked (row 7) is kept",
			vmi: vmiObj(t, "spec.domain.features", obj{"hyperv": obj{"evmcs": obj{}}}), src: Source{Node: node("cpu-vendor.node.kubevirt.io/AMD", "true")},
			c:    Cluster{FeatureGates: []string{"HypervStrictCheck"}},
			want: map[string]string{"cpu-vendor.node.kubevirt.io/Intel": "true"}, absent: []string{"cpu-vendor.node.kubevirt.io/AMD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, _ := render(t, tt.vmi, tt.src, tt.c)
			sel := pod.Spec.NodeSelector
			for k, v := range tt.want {
				if got, ok := sel[k]; !ok || got != v {
					t.Errorf("%s = %q (present %v), want %q; selector %v", k, got, ok, v, sel)
				}
			}
			for _, k := range tt.absent {
				if _, ok := sel[k]; ok {
					t.Errorf("%s present; selector %v", k, sel)
				}
			}
		})
	}
}

// TestHostModelWithoutLabel: row 20, KubeVirt creates no pod when the
// source node has no host-model-cpu label (and the source pod names none).
func TestHostModelWithoutLabel(t *testing.T) {
	_, _, err := Render(vmiObj(t, "spec.domain.cpu.model", "host-model"), Source{Node: node()}, Cluster{})
	if !errors.Is(err, ErrNoHostModel) {
		t.Fatalf("err = %v, want ErrNoHostModel", err)
	}
	// A source pod that already carries the keys needs no node label.
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"cpu-model-migration.node.kubevirt.io/Haswell": "true"}}}
	if _, _, err := Render(vmiObj(t, "spec.domain.cpu.model", "host-model"), Source{Node: node(), Pod: pod}, Cluster{}); err != nil {
		t.Fatalf("with the source pod's selector: %v", err)
	}
}

func TestRenderErrors(t *testing.T) {
	if _, _, err := Render(vmiObj(t), Source{}, Cluster{}); err == nil {
		t.Error("no source node: no error")
	}
	bad := vmiObj(t, "spec.nodeSelector", "not a map")
	if _, _, err := Render(bad, Source{Node: node()}, Cluster{}); err == nil {
		t.Error("a VMI that does not decode: no error")
	}
}

// TestMetadataAndFields: the launch pod's labels, and rows 30, 42-45.
func TestMetadataAndFields(t *testing.T) {
	u := vmiObj(t, "spec.tolerations", arr(obj{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}),
		"spec.schedulerName", "other", "spec.priorityClassName", "high",
		"spec.topologySpreadConstraints", arr(obj{"maxSkew": int64(1), "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}))
	pod, notes := render(t, u, Source{}, Cluster{DefaultRuntimeClass: "kata"})
	wantLabels := map[string]string{"app": "db", "kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "uid-1",
		"vm.kubevirt.io/name": "vm1", "vmi.kubevirt.io/id": "vm1"}
	if !maps.Equal(pod.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", pod.Labels, wantLabels)
	}
	if pod.Namespace != "ns" || pod.GenerateName != "virt-launcher-vm1-" {
		t.Errorf("namespace %q generateName %q", pod.Namespace, pod.GenerateName)
	}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "dedicated" {
		t.Errorf("tolerations %v", pod.Spec.Tolerations)
	}
	if pod.Spec.SchedulerName != "other" || pod.Spec.PriorityClassName != "high" || len(pod.Spec.TopologySpreadConstraints) != 1 {
		t.Errorf("scheduler %q priority %q spread %v", pod.Spec.SchedulerName, pod.Spec.PriorityClassName, pod.Spec.TopologySpreadConstraints)
	}
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "kata" {
		t.Errorf("runtimeClassName %v", pod.Spec.RuntimeClassName)
	}
	if len(notes) < 2 {
		t.Errorf("notes %q: want the RuntimeClass's and the scheduler's", notes)
	}
	// Opposite: no runtime class, default scheduler, no tolerations.
	pod, _ = render(t, vmiObj(t), Source{}, Cluster{})
	if pod.Spec.RuntimeClassName != nil || pod.Spec.SchedulerName != "" || pod.Spec.Tolerations != nil {
		t.Errorf("defaults: %v %q %v", pod.Spec.RuntimeClassName, pod.Spec.SchedulerName, pod.Spec.Tolerations)
	}
}
