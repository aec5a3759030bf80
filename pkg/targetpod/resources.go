package targetpod

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Device-plugin resources KubeVirt asks for (rows 39, 40).
const (
	DevicePrefix  = "devices.kubevirt.io/"
	KVMDevice     = DevicePrefix + "kvm"
	TunDevice     = DevicePrefix + "tun"
	VhostNetDev   = DevicePrefix + "vhost-net"
	VhostVsockDev = DevicePrefix + "vhost-vsock"
	SEVDevice     = DevicePrefix + "sev"
	TDXDevice     = DevicePrefix + "tdx"
	PRDevice      = DevicePrefix + "pr-helper"

	// ephemeralOverhead is what KubeVirt adds to the compute container's
	// ephemeral storage, and asks of each container-disk container (row
	// 38, section 4b).
	ephemeralOverhead = "50M"
)

// resources is KubeVirt's ResourceRenderer: vm* start as the VMI's own
// requests and limits, calc* are computed; the result takes calc first and
// lets vm win on the same name (so a CPU request in the VMI's spec beats
// the computed one, row 35).
type resources struct {
	vmReq, vmLim, calcReq, calcLim corev1.ResourceList
}

func (rs *resources) requirements() corev1.ResourceRequirements {
	lim, req := corev1.ResourceList{}, corev1.ResourceList{}
	maps.Copy(lim, rs.calcLim)
	maps.Copy(lim, rs.vmLim)
	maps.Copy(req, rs.calcReq)
	maps.Copy(req, rs.vmReq)
	return corev1.ResourceRequirements{Limits: lim, Requests: req}
}

// request is requestResource: one more of a device-plugin resource, in
// both limits and requests (row 40).
func (rs *resources) request(name string) {
	all := rs.requirements()
	one := *resource.NewQuantity(1, resource.DecimalSI)
	for _, l := range []corev1.ResourceList{all.Limits, all.Requests} {
		q, ok := l[corev1.ResourceName(name)]
		if ok {
			q.Add(one)
		} else {
			q = one
		}
		l[corev1.ResourceName(name)] = q
	}
	maps.Copy(rs.calcLim, all.Limits)
	maps.Copy(rs.calcReq, all.Requests)
}

// computeResources is section 4a, in the order KubeVirt applies it.
func (r *renderer) computeResources() corev1.ResourceRequirements {
	v := r.v
	rs := &resources{
		vmReq: maps.Clone(v.Spec.Domain.Resources.Requests), vmLim: maps.Clone(v.Spec.Domain.Resources.Limits),
		calcReq: corev1.ResourceList{}, calcLim: corev1.ResourceList{},
	}
	if rs.vmReq == nil {
		rs.vmReq = corev1.ResourceList{}
	}
	if rs.vmLim == nil {
		rs.vmLim = corev1.ResourceList{}
	}
	// Row 38: ephemeral storage for KubeVirt's own files.
	eph := resource.MustParse(ephemeralOverhead)
	q := rs.vmReq[corev1.ResourceEphemeralStorage]
	q.Add(eph)
	rs.vmReq[corev1.ResourceEphemeralStorage] = q
	if l, ok := rs.vmLim[corev1.ResourceEphemeralStorage]; ok {
		l.Add(eph)
		rs.vmLim[corev1.ResourceEphemeralStorage] = l
	}
	// Row 39: in limits only, over the VMI's own limit of the same name.
	maps.Copy(rs.vmLim, r.virtualizationDevices())
	overhead := r.memoryOverhead()
	if memReq := v.Spec.Domain.Resources.Requests[corev1.ResourceMemory]; memReq.IsZero() {
		r.memoryRequest(rs) // row 32
	}
	if v.dedicatedCPU() {
		r.dedicatedCPU(rs) // row 36
	} else {
		r.sharedCPU(rs) // row 35
	}
	if m := v.Spec.Domain.Memory; m != nil && m.Hugepages != nil {
		r.hugepages(rs, overhead) // row 34
	} else {
		// Row 33: the overhead on top of the request (unless the VMI
		// overcommits it) and on any limit.
		req := rs.vmReq[corev1.ResourceMemory]
		if !v.Spec.Domain.Resources.OvercommitGuestOverhead {
			req.Add(overhead)
		}
		rs.vmReq[corev1.ResourceMemory] = req
		if l, ok := rs.vmLim[corev1.ResourceMemory]; ok {
			l.Add(overhead)
			rs.vmLim[corev1.ResourceMemory] = l
		}
	}
	r.devicePlugins(rs)
	return rs.requirements()
}

// virtualizationDevices is getRequiredResources (row 39): tun for any
// interface or the default pod interface, vhost-net for a virtio (or
// unset) model unless emulating, the hypervisor's device unless emulating,
// vhost-vsock with autoattachVSOCK.
func (r *renderer) virtualizationDevices() corev1.ResourceList {
	d := r.v.Spec.Domain.Devices
	out := corev1.ResourceList{}
	one := resource.MustParse("1")
	if len(d.Interfaces) > 0 || d.AutoattachPodInterface == nil || *d.AutoattachPodInterface {
		out[TunDevice] = one
	}
	virtio := false
	for _, i := range d.Interfaces {
		if i.Model == "" || i.Model == "virtio" {
			virtio = true
		}
	}
	if virtio && !r.c.UseEmulation {
		out[VhostNetDev] = one
	}
	// From v1.8 the device is the hypervisor backend's; only KVM's is
	// rendered (an mshv backend asks for devices.kubevirt.io/mshv).
	if !r.c.UseEmulation {
		out[KVMDevice] = one
	}
	if d.AutoattachVSOCK != nil && *d.AutoattachVSOCK {
		out[VhostVsockDev] = one
	}
	return out
}

// memoryRequest is row 32 (WithMemoryRequests), for a VMI whose spec has
// no (or a zero) memory request: the limit, else the guest memory (or the
// hugepage size) scaled by the overcommit percentage.
func (r *renderer) memoryRequest(rs *resources) {
	lim, hasLim := rs.vmLim[corev1.ResourceMemory]
	req, hasReq := rs.vmReq[corev1.ResourceMemory]
	if hasLim && !lim.IsZero() && (!hasReq || req.IsZero()) {
		rs.vmReq[corev1.ResourceMemory] = lim
	}
	// A request present, even zero, is kept as it is.
	if _, ok := rs.vmReq[corev1.ResourceMemory]; ok {
		return
	}
	var mem *resource.Quantity
	if m := r.v.Spec.Domain.Memory; m != nil && m.Guest != nil {
		mem = m.Guest
	} else if m != nil && m.Hugepages != nil {
		if size, err := resource.ParseQuantity(m.Hugepages.PageSize); err == nil {
			mem = &size
		}
	}
	if mem == nil || mem.Value() <= 0 {
		return
	}
	over := r.c.MemoryOvercommit
	if over <= 0 {
		over = 100
	}
	if over == 100 {
		rs.vmReq[corev1.ResourceMemory] = *mem
		return
	}
	rs.vmReq[corev1.ResourceMemory] = *resource.NewQuantity(mem.Value()*100/int64(over), mem.Format)
}

// sharedCPU is row 35 (WithoutDedicatedCPU): (vCPUs + supplemental I/O
// threads) / cpuAllocationRatio, in millicores below one CPU, computed in
// floating point and printed with %g exactly as KubeVirt does, so that the
// same quantity comes out. No CPU block counts as 1 vCPU. The CPU limit of
// automatic CPU limits (a namespace selector in the CR) is not rendered.
func (r *renderer) sharedCPU(rs *resources) {
	n := int64(1)
	if c := r.v.Spec.Domain.CPU; c != nil {
		n = vcpus(c)
	}
	total := n + r.v.ioThreadCPUs()
	ratio := r.c.CPUAllocationRatio
	if ratio == 0 {
		ratio = 10
	}
	if total == 0 || ratio < 0 {
		return
	}
	val := float64(total) / float64(ratio)
	text := fmt.Sprintf("%g", val)
	if val < 1 {
		text = fmt.Sprintf("%gm", val*1000)
	}
	q, err := resource.ParseQuantity(text)
	if err != nil {
		r.note("CPU request %q does not parse: left out", text)
		return
	}
	rs.calcReq[corev1.ResourceCPU] = q
}

// dedicatedCPU is row 36 (WithCPUPinning): request = limit = vCPUs +
// supplemental I/O threads (or the VMI's own CPU, plus those threads, with
// no topology), plus 1 or 2 for an isolated emulator thread; the memory
// limit becomes the memory request.
func (r *renderer) dedicatedCPU(rs *resources) {
	v := r.v
	c := v.Spec.Domain.CPU
	io := v.ioThreadCPUs()
	if n := vcpus(c); n != 0 {
		rs.vmLim[corev1.ResourceCPU] = *resource.NewQuantity(n+io, resource.BinarySI)
		rs.vmReq[corev1.ResourceCPU] = *resource.NewQuantity(n+io, resource.BinarySI)
	} else {
		add := resource.NewQuantity(io, resource.BinarySI)
		for _, l := range []corev1.ResourceList{rs.vmLim, rs.vmReq} {
			if q, ok := l[corev1.ResourceCPU]; ok {
				q.Add(*add)
				l[corev1.ResourceCPU] = q
			}
		}
	}
	if c.IsolateEmulatorThread {
		// The parity annotation asks for a second emulator CPU when the
		// limit plus the supplemental pool (counted only under the
		// supplementalPool policy) is even.
		extra := int64(1)
		lim := rs.vmLim[corev1.ResourceCPU]
		pool := int64(0)
		if v.Spec.Domain.IOThreadsPolicy == "supplementalPool" {
			pool = io
		}
		if _, ok := v.Metadata.Annotations["alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"]; ok && (lim.Value()+pool)%2 == 0 {
			extra = 2
		}
		lim.Add(*resource.NewQuantity(extra, resource.BinarySI))
		rs.vmLim[corev1.ResourceCPU] = lim
		if q, ok := rs.vmReq[corev1.ResourceCPU]; ok {
			q.Add(*resource.NewQuantity(extra, resource.BinarySI))
			rs.vmReq[corev1.ResourceCPU] = q
		}
	}
	if q, ok := rs.vmReq[corev1.ResourceMemory]; ok {
		rs.vmLim[corev1.ResourceMemory] = q
	}
}

// hugepages is row 34 (WithHugePages): the hugepage resource is the memory
// request, or the guest memory when that is smaller; the memory request
// becomes the overhead plus what the request has beyond the guest memory
// (likewise a memory limit).
func (r *renderer) hugepages(rs *resources, overhead resource.Quantity) {
	m := r.v.Spec.Domain.Memory
	name := corev1.ResourceName(corev1.ResourceHugePagesPrefix + m.Hugepages.PageSize)
	req := rs.vmReq[corev1.ResourceMemory]
	lim, hasLim := rs.vmLim[corev1.ResourceMemory]
	pages := req.DeepCopy()
	reqDiff, limDiff := resource.NewScaledQuantity(0, resource.Kilo), resource.NewScaledQuantity(0, resource.Kilo)
	if m.Guest != nil {
		if req.Value() > m.Guest.Value() {
			pages = m.Guest.DeepCopy()
			reqDiff.Add(req)
			reqDiff.Sub(*m.Guest)
		}
		if lim.Value() > m.Guest.Value() {
			limDiff.Add(lim)
			limDiff.Sub(*m.Guest)
		}
	}
	rs.calcReq[name] = pages
	rs.calcLim[name] = pages
	reqDiff.Add(overhead)
	rs.vmReq[corev1.ResourceMemory] = *reqDiff
	if hasLim {
		limDiff.Add(overhead)
		rs.vmLim[corev1.ResourceMemory] = *limDiff
	}
}

// devicePlugins is row 40, for what Render can know: GPUs and host devices
// with a device name (and no DRA claim), SEV, TDX (v1.9.0) and the
// persistent-reservation helper. Networks' resource names need their
// NetworkAttachmentDefinitions, which Render does not read.
func (r *renderer) devicePlugins(rs *resources) {
	v := r.v
	for _, group := range [][]device{v.Spec.Domain.Devices.GPUs, v.Spec.Domain.Devices.HostDevices} {
		for _, d := range group {
			if d.DeviceName != "" && d.ClaimName == "" {
				rs.request(d.DeviceName)
			}
			if d.ClaimName != "" {
				r.note("device %s is a DRA claim: its resource claim (row 41) is not rendered", d.Name)
			}
		}
	}
	if v.sev() {
		rs.request(SEVDevice)
	}
	if v.tdx() && r.rel.atLeast(9, 0) {
		rs.request(TDXDevice)
	}
	if r.hasReservation() {
		rs.request(PRDevice)
	}
	for _, n := range v.Spec.Networks {
		if n.Multus != nil {
			r.note("network %s: a resource named by its NetworkAttachmentDefinition (row 40) is not rendered", n.Name)
		}
	}
}
