package targetpod

import (
	"maps"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestTypicalVMI renders a typical VMI in full: 2 vCPUs, 4Gi, a masquerade
// pod network, one containerDisk, host-model, on an Intel node, KubeVirt
// v1.9 with the CR's defaults.
//
// Memory: page tables ceil(4294967296 / 1000) = 4294968 kB, 4294968000 /
// 512 = 8388609; + 220Mi processes + 2 x 8Mi vCPUs + 8Mi I/O thread + 32Mi
// video = 8388609 + 289406976 = 297795585 overhead; request 4294967296 +
// 297795585 = 4592762881. CPU: 2 / 10 = 200m.
func TestTypicalVMI(t *testing.T) {
	u := vmiObj(t,
		"spec.domain.cpu", obj{"model": "host-model", "sockets": int64(1), "cores": int64(2), "threads": int64(1)},
		"spec.domain.memory.guest", "4Gi", "spec.domain.resources.requests.memory", "4Gi",
		"spec.domain.devices", obj{"interfaces": arr(obj{"name": "default", "masquerade": obj{}}),
			"disks": arr(obj{"name": "rootdisk", "disk": obj{"bus": "virtio"}})},
		"spec.networks", arr(obj{"name": "default", "pod": obj{}}),
		"spec.volumes", arr(obj{"name": "rootdisk", "containerDisk": obj{"image": "quay.io/containerdisks/fedora:41"}}),
		"status.machine", obj{"type": "pc-q35-rhel9.6.0"},
	)
	src := node("host-model-cpu.node.kubevirt.io/Skylake-Client-IBRS", "true",
		"host-model-required-features.node.kubevirt.io/hypervisor", "true",
		"cpu-model.node.kubevirt.io/Skylake-Client-IBRS", "true", "cpu-vendor.node.kubevirt.io/Intel", "true")
	pod, notes, err := Render(u, Source{Node: src}, Cluster{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("notes: %q", notes)
	wantSel := map[string]string{
		"kubevirt.io/schedulable": "true", "kubernetes.io/arch": "amd64",
		"machine-type.node.kubevirt.io/pc-q35-rhel9.6.0":           "true",
		"cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS": "true",
		"cpu-feature.node.kubevirt.io/hypervisor":                  "true",
		"cpu-vendor.node.kubevirt.io/Intel":                        "true",
	}
	if !maps.Equal(pod.Spec.NodeSelector, wantSel) {
		t.Errorf("node selector\n got %v\nwant %v", pod.Spec.NodeSelector, wantSel)
	}
	wantAff := &corev1.Affinity{
		NodeAffinity:    &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms(reqs(obsolete))},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{offTheSource}},
	}
	if !reflect.DeepEqual(pod.Spec.Affinity, wantAff) {
		t.Errorf("affinity\n got %+v\nwant %+v", pod.Spec.Affinity, wantAff)
	}
	res := compute(pod)
	wantReq := corev1.ResourceList{"memory": qty("4592762881"), "cpu": qty("200m"), "ephemeral-storage": qty("50M")}
	wantLim := corev1.ResourceList{"devices.kubevirt.io/kvm": qty("1"), "devices.kubevirt.io/tun": qty("1"), "devices.kubevirt.io/vhost-net": qty("1")}
	equalList(t, "requests", res.Requests, wantReq)
	equalList(t, "limits", res.Limits, wantLim)
	if got := names(pod.Spec.Containers); !reflect.DeepEqual(got, []string{"compute", "volumerootdisk"}) {
		t.Errorf("containers %v", got)
	}
	if got := names(pod.Spec.InitContainers); !reflect.DeepEqual(got, []string{"guest-console-log", "container-disk-binary", "volumerootdisk-init"}) {
		t.Errorf("init containers %v", got)
	}
}

func equalList(t *testing.T, what string, got, want corev1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g.Cmp(w) != 0 {
			t.Errorf("%s %s = %s, want %s", what, name, g.String(), w.String())
		}
	}
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// TestSupportContainers checks section 4b.
func TestSupportContainers(t *testing.T) {
	disk := []any{"spec.volumes", arr(obj{"name": "d", "containerDisk": obj{"image": "img"}})}
	tests := []struct {
		name     string
		edits    []any
		c        Cluster
		wantInit []string
		wantCont []string
		wantReqs map[string]corev1.ResourceList
	}{
		{name: "the console logger by default, a sidecar: 5m, 35M", wantInit: []string{"guest-console-log"}, wantCont: []string{"compute"},
			wantReqs: map[string]corev1.ResourceList{"guest-console-log": {"cpu": qty("5m"), "memory": qty("35M")}}},
		{name: "disabled in the CR", c: Cluster{SerialConsoleLogDisabled: true}, wantCont: []string{"compute"}},
		{name: "disabled in the CR, asked by the VMI", c: Cluster{SerialConsoleLogDisabled: true},
			edits: []any{"spec.domain.devices.logSerialConsole", true}, wantInit: []string{"guest-console-log"}, wantCont: []string{"compute"}},
		{name: "turned off by the VMI", edits: []any{"spec.domain.devices.logSerialConsole", false}, wantCont: []string{"compute"}},
		{name: "no serial console", edits: []any{"spec.domain.devices.autoattachSerialConsole", false, "spec.domain.devices.logSerialConsole", true},
			wantCont: []string{"compute"}},
		{name: "a containerDisk: its container, the binary copy and the pre-pull", edits: disk, c: Cluster{SerialConsoleLogDisabled: true},
			wantInit: []string{"container-disk-binary", "volumed-init"}, wantCont: []string{"compute", "volumed"},
			wantReqs: map[string]corev1.ResourceList{
				"volumed":               {"cpu": qty("1m"), "memory": qty("1M"), "ephemeral-storage": qty("50M")},
				"volumed-init":          {"cpu": qty("1m"), "memory": qty("1M"), "ephemeral-storage": qty("50M")},
				"container-disk-binary": {"cpu": qty("10m"), "memory": qty("1M")},
			}},
		{name: "dedicated CPUs: requests become the limits",
			edits: append([]any{"spec.domain.cpu.dedicatedCpuPlacement", true}, disk...), wantInit: []string{"guest-console-log", "container-disk-binary", "volumed-init"},
			wantCont: []string{"compute", "volumed"},
			wantReqs: map[string]corev1.ResourceList{
				"guest-console-log":     {"cpu": qty("15m"), "memory": qty("60M")},
				"volumed":               {"cpu": qty("10m"), "memory": qty("40M"), "ephemeral-storage": qty("50M")},
				"container-disk-binary": {"cpu": qty("10m"), "memory": qty("40M")},
			}},
		{name: "a kernel-boot image: its container and pre-pull, after the disks'", c: Cluster{SerialConsoleLogDisabled: true},
			edits:    append([]any{"spec.domain.firmware", obj{"kernelBoot": obj{"container": obj{"image": "k"}}}}, disk...),
			wantInit: []string{"container-disk-binary", "volumed-init", "volumekernel-boot-volume-init"},
			wantCont: []string{"compute", "volumed", "volumekernel-boot-volume"}},
		{name: "ImageVolume gate: no containerDisk containers", edits: disk, c: Cluster{FeatureGates: []string{"ImageVolume"}, SerialConsoleLogDisabled: true},
			wantCont: []string{"compute"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, _ := render(t, vmiObj(t, tt.edits...), Source{}, tt.c)
			if got := names(pod.Spec.InitContainers); !reflect.DeepEqual(got, tt.wantInit) {
				t.Errorf("init containers %v, want %v", got, tt.wantInit)
			}
			if got := names(pod.Spec.Containers); !reflect.DeepEqual(got, tt.wantCont) {
				t.Errorf("containers %v, want %v", got, tt.wantCont)
			}
			all := append(append([]corev1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...)
			for _, c := range all {
				if c.Name == GuestConsoleLogContainer && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
					t.Errorf("%s: restartPolicy %v, want Always", c.Name, c.RestartPolicy)
				}
				if want, ok := tt.wantReqs[c.Name]; ok {
					equalList(t, c.Name+" requests", c.Resources.Requests, want)
				}
			}
		})
	}
}
