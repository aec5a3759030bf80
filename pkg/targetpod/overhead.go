package targetpod

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// memoryOverhead is the doc's "Memory overhead" table: KVM's hypervisor
// overhead (CalculateMemoryOverhead), the CR's ratio applied to it, then
// the network part. Quantities are added as KubeVirt adds them, so the
// byte count is the same.
func (r *renderer) memoryOverhead() resource.Quantity {
	v := r.v
	d := v.Spec.Domain
	o := *resource.NewScaledQuantity(0, resource.Kilo)
	add := func(s string) { o.Add(resource.MustParse(s)) }

	// Page tables: the VMI spec's memory request, rounded up to whole
	// kilobytes (10^3), divided by 512 in integer arithmetic.
	memReq := d.Resources.Requests[corev1.ResourceMemory]
	pt := resource.NewScaledQuantity(memReq.ScaledValue(resource.Kilo), resource.Kilo)
	pt.Set(pt.Value() / 512)
	o.Add(*pt)

	// KubeVirt's processes: monitor 25Mi, virt-launcher 100Mi, virtlogd
	// 25Mi, virtqemud 40Mi, QEMU 30Mi (220Mi in all).
	for _, s := range []string{"25Mi", "100Mi", "25Mi", "40Mi", "30Mi"} {
		add(s)
	}

	// 8Mi per vCPU: the topology's, else the CPU limit or request rounded
	// up, at least 1.
	var n int64
	if d.CPU != nil {
		n = vcpus(d.CPU)
	} else if q, ok := d.Resources.Limits[corev1.ResourceCPU]; ok {
		n = q.Value()
	} else if q, ok := d.Resources.Requests[corev1.ResourceCPU]; ok {
		n = q.Value()
	}
	n = max(n, 1)
	perCPU := resource.MustParse("8Mi")
	o.Add(*resource.NewQuantity(perCPU.Value()*n, perCPU.Format))

	add("8Mi") // the I/O thread
	if g := d.Devices.AutoattachGraphicsDevice; g == nil || *g {
		add("32Mi") // video RAM
	}
	if r.arch() == "arm64" {
		add("128Mi") // UEFI flash on arm64
	}
	if r.hasVFIO() {
		add("1Gi")
	}
	for _, vol := range v.Spec.Volumes {
		if vol.DownwardMetrics != nil {
			add("1Mi")
			break
		}
	}
	r.probeOverhead(add)
	if v.sev() || v.sevSNP() || v.sevES() {
		add("256Mi")
	}
	if t := d.Devices.TPM; t != nil && (t.Enabled == nil || *t.Enabled) {
		add("53Mi") // swtpm
	}
	if v.dedicatedCPU() || v.wantsGuaranteed() {
		add("100Mi")
	}
	// reservedOverhead.addedOverhead: v1.8 and later.
	if m := d.Memory; r.rel.atLeast(8, 0) && m != nil && m.ReservedOverhead != nil && m.ReservedOverhead.AddedOverhead != nil {
		o.Add(*m.ReservedOverhead.AddedOverhead)
	}
	o = r.applyRatio(o)
	o.Add(r.networkOverhead())
	return o
}

// arch is the architecture the overhead is computed for: the VMI's, else
// the cluster's default, else amd64.
func (r *renderer) arch() string {
	switch {
	case r.v.Spec.Architecture != "":
		return r.v.Spec.Architecture
	case r.c.DefaultArchitecture != "":
		return r.c.DefaultArchitecture
	}
	return "amd64"
}

// hasVFIO is vmitrait.HasVFIO: host devices, GPUs or an SR-IOV interface.
func (r *renderer) hasVFIO() bool {
	d := r.v.Spec.Domain.Devices
	if len(d.HostDevices) > 0 || len(d.GPUs) > 0 {
		return true
	}
	for _, i := range d.Interfaces {
		if i.SRIOV != nil {
			return true
		}
	}
	return false
}

// probeOverhead is addProbeOverheads: 10Mi per exec probe (liveness,
// readiness), and 100Mi once for the probe binary if either exists.
func (r *renderer) probeOverhead(add func(string)) {
	s := r.v.Spec
	live := s.LivenessProbe != nil && s.LivenessProbe.Exec != nil
	ready := s.ReadinessProbe != nil && s.ReadinessProbe.Exec != nil
	if live {
		add("10Mi")
	}
	if ready {
		add("10Mi")
	}
	if live || ready {
		add("100Mi")
	}
}

// applyRatio is MultiplyMemory with the CR's ratio: the overhead in whole
// kilobytes (rounded up) times (ratio - 1), truncated to whole kilobytes,
// is added. A ratio that does not parse is ignored, as KubeVirt does.
func (r *renderer) applyRatio(o resource.Quantity) resource.Quantity {
	text := r.c.AdditionalGuestMemoryOverheadRatio
	if text == "" {
		return o
	}
	ratio, err := strconv.ParseFloat(text, 64)
	if err != nil {
		r.note("additionalGuestMemoryOverheadRatio %q is not a number: ignored, as KubeVirt does", text)
		return o
	}
	extra := float64(o.ScaledValue(resource.Kilo)) * (ratio - 1.0)
	o.Add(*resource.NewScaledQuantity(int64(extra), resource.Kilo))
	return o
}

// networkOverhead is the network part, added after the ratio: 250Mi for a
// passt-binding interface (v1.8 and later), and the memory of each distinct
// binding plugin the interfaces name that the CR registers.
func (r *renderer) networkOverhead() resource.Quantity {
	var total resource.Quantity
	ifaces := r.v.Spec.Domain.Devices.Interfaces
	if r.rel.atLeast(8, 0) {
		for _, i := range ifaces {
			if i.PasstBinding != nil {
				total.Add(resource.MustParse("250Mi"))
				break
			}
		}
	}
	seen := map[string]bool{}
	for _, i := range ifaces {
		if i.Binding == nil || seen[i.Binding.Name] {
			continue
		}
		if q, ok := r.c.NetworkBindings[i.Binding.Name]; ok {
			seen[i.Binding.Name] = true
			total.Add(q)
		}
	}
	return total
}
