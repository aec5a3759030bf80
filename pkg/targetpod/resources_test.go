package targetpod

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// b renders a byte count as a quantity string.
func b(n int64) string { return fmt.Sprint(n) }

// TestComputeResources checks rows 32-40 and the memory overhead table,
// with the quantities worked out by hand from KubeVirt v1.9.0's code.
//
// The base VMI: 1 vCPU, 1Gi requested and guest memory, no interfaces and
// no pod interface. Its overhead:
//
//	page tables: ceil(1073741824 / 1000) = 1073742 kB; 1073742000 / 512 = 2097152 (2Mi)
//	+ 220Mi processes + 8Mi vCPU + 8Mi I/O thread + 32Mi video = 270Mi
//
// so its memory request is 1Gi + 270Mi = 1294Mi. Its CPU request is
// 1 / 10 = 0.1 CPU = 100m.
func TestComputeResources(t *testing.T) {
	masq := obj{"name": "default", "masquerade": obj{}}
	tests := []struct {
		name      string
		edits     []any
		c         Cluster
		req, lim  map[corev1.ResourceName]string
		absentLim []corev1.ResourceName
	}{
		{name: "base: rows 33, 35, 38, 39",
			req: map[corev1.ResourceName]string{"memory": b(mi(1294)), "cpu": "100m", "ephemeral-storage": "50M"},
			lim: map[corev1.ResourceName]string{"devices.kubevirt.io/kvm": "1"}, absentLim: []corev1.ResourceName{"memory", "cpu", "devices.kubevirt.io/tun"}},
		{name: "row 33: overcommitGuestOverhead keeps the overhead out of the request",
			edits: []any{"spec.domain.resources.overcommitGuestOverhead", true}, req: map[corev1.ResourceName]string{"memory": "1Gi"}},
		{name: "row 32: only a limit; page tables 0 as the VMI has no request: 1Gi + 268Mi = 1292Mi",
			edits: []any{"spec.domain.resources", obj{"limits": obj{"memory": "1Gi"}}},
			req:   map[corev1.ResourceName]string{"memory": b(mi(1292))}, lim: map[corev1.ResourceName]string{"memory": b(mi(1292))}},
		{name: "row 32: guest memory at 150% overcommit: 1073741824*100/150 = 715827882, + 268Mi (281018368) = 996846250",
			edits: []any{"spec.domain.resources", obj{}}, c: Cluster{MemoryOvercommit: 150},
			req: map[corev1.ResourceName]string{"memory": "996846250"}},
		{name: "row 36: dedicated, 2 cores, 2Gi: page tables 4Mi + 220 + 16 + 8 + 32 + 100 (dedicated) = 380Mi; 2Gi + 380Mi = 2428Mi, limit too",
			edits: []any{"spec.domain.cpu", obj{"cores": int64(2), "dedicatedCpuPlacement": true}, "spec.domain.resources.requests.memory", "2Gi", "spec.domain.memory.guest", "2Gi"},
			req:   map[corev1.ResourceName]string{"memory": b(mi(2428)), "cpu": "2"}, lim: map[corev1.ResourceName]string{"memory": b(mi(2428)), "cpu": "2"}},
		{name: "row 36: an isolated emulator thread adds 1",
			edits: []any{"spec.domain.cpu", obj{"cores": int64(2), "dedicatedCpuPlacement": true, "isolateEmulatorThread": true}},
			req:   map[corev1.ResourceName]string{"cpu": "3"}, lim: map[corev1.ResourceName]string{"cpu": "3"}},
		{name: "row 36: with the parity annotation and an even count, 2",
			edits: []any{"spec.domain.cpu", obj{"cores": int64(2), "dedicatedCpuPlacement": true, "isolateEmulatorThread": true},
				"metadata.annotations", obj{"alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity": ""}},
			req: map[corev1.ResourceName]string{"cpu": "4"}, lim: map[corev1.ResourceName]string{"cpu": "4"}},
		{name: "row 34: hugepages: the pages are the guest memory; the memory request is the overhead, 270Mi",
			edits: []any{"spec.domain.memory.hugepages", obj{"pageSize": "2Mi"}},
			req:   map[corev1.ResourceName]string{"memory": b(mi(270)), "hugepages-2Mi": "1Gi"}, lim: map[corev1.ResourceName]string{"hugepages-2Mi": "1Gi"}},
		{name: "row 34: request 1.5Gi over 1Gi guest: page tables 3145728 (3Mi), overhead 271Mi; 512Mi + 271Mi = 783Mi",
			edits: []any{"spec.domain.memory.hugepages", obj{"pageSize": "1Gi"}, "spec.domain.resources.requests.memory", "1536Mi"},
			req:   map[corev1.ResourceName]string{"memory": b(mi(783)), "hugepages-1Gi": "1Gi"}},
		{name: "ratio 1.5: 270Mi = 283115520 is 283116 kB; half is 141558 kB; 1Gi + 283115520 + 141558000 = 1498415344",
			c: Cluster{AdditionalGuestMemoryOverheadRatio: "1.5"}, req: map[corev1.ResourceName]string{"memory": "1498415344"}},
		{name: "row 35: 4 vCPUs / 10 = 400m", edits: []any{"spec.domain.cpu", obj{"cores": int64(4)}},
			req: map[corev1.ResourceName]string{"cpu": "400m", "memory": b(mi(1024 + 2 + 220 + 32 + 8 + 32))}},
		{name: "row 35: 20 vCPUs / 10 = 2", edits: []any{"spec.domain.cpu", obj{"sockets": int64(2), "cores": int64(10)}},
			req: map[corev1.ResourceName]string{"cpu": "2"}},
		{name: "row 35: ratio 4", c: Cluster{CPUAllocationRatio: 4}, req: map[corev1.ResourceName]string{"cpu": "250m"}},
		{name: "row 35: supplemental I/O threads count: (1 + 2) / 10",
			edits: []any{"spec.domain.ioThreadsPolicy", "supplementalPool", "spec.domain.ioThreads", obj{"supplementalPoolThreadCount": int64(2)}},
			req:   map[corev1.ResourceName]string{"cpu": "300m"}},
		{name: "row 35: the VMI's CPU request wins", edits: []any{"spec.domain.resources.requests.cpu", "500m"},
			req: map[corev1.ResourceName]string{"cpu": "500m"}},
		{name: "Guaranteed QoS: +100Mi, 1Gi + 370Mi = 1394Mi; CPU the VMI's",
			edits: []any{"spec.domain.resources", obj{"requests": obj{"memory": "1Gi", "cpu": "1"}, "limits": obj{"memory": "1Gi", "cpu": "1"}}},
			req:   map[corev1.ResourceName]string{"memory": b(mi(1394)), "cpu": "1"}, lim: map[corev1.ResourceName]string{"memory": b(mi(1394)), "cpu": "1"}},
		{name: "row 38: an ephemeral-storage limit grows by 50M", edits: []any{"spec.domain.resources.limits", obj{"ephemeral-storage": "1G"}},
			lim: map[corev1.ResourceName]string{"ephemeral-storage": "1050M"}},
		{name: "row 39: a masquerade interface (virtio by default) needs tun and vhost-net",
			edits: []any{"spec.domain.devices.interfaces", arr(masq)},
			lim:   map[corev1.ResourceName]string{"devices.kubevirt.io/tun": "1", "devices.kubevirt.io/vhost-net": "1", "devices.kubevirt.io/kvm": "1"}},
		{name: "row 39: emulation: no kvm, no vhost-net", edits: []any{"spec.domain.devices.interfaces", arr(masq)}, c: Cluster{UseEmulation: true},
			lim: map[corev1.ResourceName]string{"devices.kubevirt.io/tun": "1"}, absentLim: []corev1.ResourceName{"devices.kubevirt.io/kvm", "devices.kubevirt.io/vhost-net"}},
		{name: "row 39: an e1000 interface needs no vhost-net; the pod interface by default needs tun",
			edits: []any{"spec.domain.devices", obj{"interfaces": arr(obj{"name": "default", "model": "e1000", "masquerade": obj{}})}},
			lim:   map[corev1.ResourceName]string{"devices.kubevirt.io/tun": "1"}, absentLim: []corev1.ResourceName{"devices.kubevirt.io/vhost-net"}},
		{name: "row 40 and VFIO: a GPU, 1 of it, and 1Gi more: 2318Mi",
			edits: []any{"spec.domain.devices.gpus", arr(obj{"name": "g", "deviceName": "nvidia.com/GA102"})},
			req:   map[corev1.ResourceName]string{"nvidia.com/GA102": "1", "memory": b(mi(2318))}, lim: map[corev1.ResourceName]string{"nvidia.com/GA102": "1"}},
		{name: "row 40: SEV device and 256Mi: 1550Mi", edits: []any{"spec.domain.launchSecurity", obj{"sev": obj{}}},
			req: map[corev1.ResourceName]string{"devices.kubevirt.io/sev": "1", "memory": b(mi(1550))}},
		{name: "arm64: +128Mi = 1422Mi", edits: []any{"spec.architecture", "arm64"}, req: map[corev1.ResourceName]string{"memory": b(mi(1422))}},
		{name: "arm64 by the cluster's default", edits: []any{"spec.architecture", nil}, c: Cluster{DefaultArchitecture: "arm64"},
			req: map[corev1.ResourceName]string{"memory": b(mi(1422))}},
		{name: "TPM: +53Mi = 1347Mi", edits: []any{"spec.domain.devices.tpm", obj{}}, req: map[corev1.ResourceName]string{"memory": b(mi(1347))}},
		{name: "TPM disabled: nothing", edits: []any{"spec.domain.devices.tpm", obj{"enabled": false}}, req: map[corev1.ResourceName]string{"memory": b(mi(1294))}},
		{name: "two exec probes: 10 + 10 + 100 = 1414Mi",
			edits: []any{"spec.livenessProbe", obj{"exec": obj{"command": arr("true")}}, "spec.readinessProbe", obj{"exec": obj{"command": arr("true")}}},
			req:   map[corev1.ResourceName]string{"memory": b(mi(1414))}},
		{name: "an HTTP probe: nothing", edits: []any{"spec.livenessProbe", obj{"httpGet": obj{"port": int64(80)}}}, req: map[corev1.ResourceName]string{"memory": b(mi(1294))}},
		{name: "downward metrics: +1Mi", edits: []any{"spec.volumes", arr(obj{"name": "m", "downwardMetrics": obj{}})}, req: map[corev1.ResourceName]string{"memory": b(mi(1295))}},
		{name: "no graphics: -32Mi = 1262Mi", edits: []any{"spec.domain.devices.autoattachGraphicsDevice", false}, req: map[corev1.ResourceName]string{"memory": b(mi(1262))}},
		{name: "reservedOverhead, v1.8: +100Mi", edits: []any{"spec.domain.memory.reservedOverhead", obj{"addedOverhead": "100Mi"}}, c: Cluster{Version: "v1.8.4"},
			req: map[corev1.ResourceName]string{"memory": b(mi(1394))}},
		{name: "reservedOverhead, v1.7: not counted", edits: []any{"spec.domain.memory.reservedOverhead", obj{"addedOverhead": "100Mi"}}, c: Cluster{Version: "v1.7.4"},
			req: map[corev1.ResourceName]string{"memory": b(mi(1294))}},
		{name: "passt, v1.8: +250Mi", edits: []any{"spec.domain.devices.interfaces", arr(obj{"name": "default", "passtBinding": obj{}})}, c: Cluster{Version: "v1.8.0"},
			req: map[corev1.ResourceName]string{"memory": b(mi(1544))}},
		{name: "passt, v1.7: not counted", edits: []any{"spec.domain.devices.interfaces", arr(obj{"name": "default", "passtBinding": obj{}})}, c: Cluster{Version: "v1.7.4"},
			req: map[corev1.ResourceName]string{"memory": b(mi(1294))}},
		{name: "a binding plugin, counted once for two interfaces, after the ratio: 1294Mi + 80Mi",
			edits: []any{"spec.domain.devices.interfaces", arr(obj{"name": "a", "binding": obj{"name": "slirp"}}, obj{"name": "b", "binding": obj{"name": "slirp"}},
				obj{"name": "c", "binding": obj{"name": "unknown"}})},
			c: Cluster{NetworkBindings: map[string]qtyT{"slirp": qty("80Mi")}}, req: map[corev1.ResourceName]string{"memory": b(mi(1374))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, _ := render(t, vmiObj(t, tt.edits...), Source{}, tt.c)
			res := compute(pod)
			check := func(what string, got corev1.ResourceList, want map[corev1.ResourceName]string) {
				for name, w := range want {
					g, ok := got[name]
					if q := qty(w); !ok || g.Cmp(q) != 0 {
						t.Errorf("%s %s = %s (%d), want %s (%d)", what, name, g.String(), g.Value(), w, q.Value())
					}
				}
			}
			check("request", res.Requests, tt.req)
			check("limit", res.Limits, tt.lim)
			for _, name := range tt.absentLim {
				if _, ok := res.Limits[name]; ok {
					t.Errorf("limit %s present: %v", name, res.Limits)
				}
			}
		})
	}
}
