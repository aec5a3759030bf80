package targetpod

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Names of the support containers of section 4b.
const (
	GuestConsoleLogContainer = "guest-console-log"
	ContainerDiskBinary      = "container-disk-binary"
	// kernelBootVolume is the volume name KubeVirt reserves for a
	// kernel-boot image; it gets no container of its own here.
	kernelBootVolume = "kernel-boot-volume"
	imageVolumeGate  = "ImageVolume"
)

func list(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

// guaranteed: dedicated CPUs or Guaranteed QoS wanted, which turns the
// support containers' requests into their limits (section 4b).
func (r *renderer) guaranteed() bool { return r.v.dedicatedCPU() || r.v.wantsGuaranteed() }

// diskResources is getMinimalInitContainerDiskResources: 1m CPU, 1M
// memory, 50M ephemeral storage; limits 10m and 40M, which become the
// requests with dedicated CPUs or Guaranteed QoS. The CR's
// supportContainerResources are not read.
func (r *renderer) diskResources() corev1.ResourceRequirements {
	req, lim := list("1m", "1M"), list("10m", "40M")
	req[corev1.ResourceEphemeralStorage] = resource.MustParse(ephemeralOverhead)
	if r.guaranteed() {
		req[corev1.ResourceCPU], req[corev1.ResourceMemory] = lim[corev1.ResourceCPU], lim[corev1.ResourceMemory]
	}
	return corev1.ResourceRequirements{Requests: req, Limits: lim}
}

// containerDisks are the VMI's containerDisk volumes, unless the
// ImageVolume gate mounts them as image volumes instead.
func (r *renderer) containerDisks() []volume {
	if r.gate(imageVolumeGate) {
		return nil
	}
	var out []volume
	for _, v := range r.v.Spec.Volumes {
		if v.ContainerDisk != nil && v.Name != kernelBootVolume {
			out = append(out, v)
		}
	}
	return out
}

// containerDiskContainers are one container per containerDisk volume,
// named volume<name>, after compute.
func (r *renderer) containerDiskContainers() []corev1.Container {
	var out []corev1.Container
	for _, v := range r.containerDisks() {
		out = append(out, corev1.Container{Name: "volume" + v.Name, Image: v.ContainerDisk.Image, Resources: r.diskResources()})
	}
	// The kernel-boot image is a container disk of its own, after the
	// others.
	if img := r.v.kernelBootImage(); img != "" && !r.gate(imageVolumeGate) {
		out = append(out, corev1.Container{Name: "volume" + kernelBootVolume, Image: img, Resources: r.diskResources()})
	}
	return out
}

// initContainers are, in KubeVirt's order: the serial console logger (a
// sidecar: restartPolicy Always), then, with containerDisks, the copy of
// the container-disk binary and one pre-pull container per disk.
func (r *renderer) initContainers() []corev1.Container {
	var out []corev1.Container
	if r.serialConsoleLog() {
		req, lim := list("5m", "35M"), list("15m", "60M")
		if r.guaranteed() {
			req = lim.DeepCopy()
		}
		always := corev1.ContainerRestartPolicyAlways
		out = append(out, corev1.Container{
			Name: GuestConsoleLogContainer, RestartPolicy: &always,
			Resources: corev1.ResourceRequirements{Requests: req, Limits: lim},
		})
	}
	if r.gate(imageVolumeGate) {
		if len(r.v.Spec.Volumes) > 0 {
			r.note("the ImageVolume gate is on: containerDisks are image volumes, and their init containers are not rendered")
		}
		return out
	}
	disks := r.containerDisks()
	kernel := r.v.kernelBootImage()
	if len(disks) == 0 && kernel == "" {
		return out
	}
	// initContainerResourceRequirementsForVMI: 10m CPU and 1M memory,
	// limits 100m and 40M; with dedicated CPUs or Guaranteed QoS 10m and
	// 40M for both.
	bin := corev1.ResourceRequirements{Requests: list("10m", "1M"), Limits: list("100m", "40M")}
	if r.guaranteed() {
		bin = corev1.ResourceRequirements{Requests: list("10m", "40M"), Limits: list("10m", "40M")}
	}
	out = append(out, corev1.Container{Name: ContainerDiskBinary, Resources: bin})
	for _, v := range disks {
		out = append(out, corev1.Container{Name: "volume" + v.Name + "-init", Image: v.ContainerDisk.Image, Resources: r.diskResources()})
	}
	if kernel != "" {
		out = append(out, corev1.Container{Name: "volume" + kernelBootVolume + "-init", Image: kernel, Resources: r.diskResources()})
	}
	return out
}

// unrendered notes the parts of the pod that bear on scheduling but that
// Render cannot build from its inputs.
func (r *renderer) unrendered() {
	v := r.v
	if _, ok := v.Metadata.Annotations["hooks.kubevirt.io/hookSidecars"]; ok {
		r.note("hook sidecars (hooks.kubevirt.io/hookSidecars): their containers are not rendered")
	}
	for _, f := range v.Spec.Domain.Devices.Filesystems {
		if f.Virtiofs != nil {
			r.note("virtiofs filesystem %s: its container is not rendered", f.Name)
		}
	}
	if len(v.Spec.ResourceClaims) > 0 {
		r.note("the VMI's resourceClaims (row 46) are not rendered")
	}
	var claims []string
	for _, vol := range v.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil || vol.DataVolume != nil {
			claims = append(claims, vol.Name)
		}
	}
	if len(claims) > 0 {
		r.note("volumes %s: their persistent volumes' node affinity and attach limits also decide where the pod goes (row 48); not rendered", strings.Join(claims, ", "))
	}
}

// serialConsoleLog is isSerialConsoleLogEnabled: off with no serial
// console; else the VMI's logSerialConsole when set; else on unless the CR
// disables it.
func (r *renderer) serialConsoleLog() bool {
	d := r.v.Spec.Domain.Devices
	if d.AutoattachSerialConsole != nil && !*d.AutoattachSerialConsole {
		return false
	}
	if d.LogSerialConsole != nil {
		return *d.LogSerialConsole
	}
	return !r.c.SerialConsoleLogDisabled
}
