package targetpod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// vmi mirrors the fields of a VirtualMachineInstance the target pod is
// rendered from, with the JSON names of KubeVirt's API
// (kubevirt.io/api/core/v1). Fields the rules test only for presence are
// kept as *struct{} or any.
type vmi struct {
	Metadata struct {
		Namespace   string            `json:"namespace"`
		Name        string            `json:"name"`
		UID         string            `json:"uid"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec   vmiSpec   `json:"spec"`
	Status vmiStatus `json:"status"`
}

type vmiSpec struct {
	NodeSelector              map[string]string                 `json:"nodeSelector"`
	Affinity                  *corev1.Affinity                  `json:"affinity"`
	Tolerations               []corev1.Toleration               `json:"tolerations"`
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints"`
	SchedulerName             string                            `json:"schedulerName"`
	ResourceClaims            []any                             `json:"resourceClaims"`
	PriorityClassName         string                            `json:"priorityClassName"`
	Architecture              string                            `json:"architecture"`
	Hostname                  string                            `json:"hostname"`
	LivenessProbe             *probe                            `json:"livenessProbe"`
	ReadinessProbe            *probe                            `json:"readinessProbe"`
	Volumes                   []volume                          `json:"volumes"`
	Networks                  []struct {
		Name   string    `json:"name"`
		Multus *struct{} `json:"multus"`
	} `json:"networks"`
	Domain domain `json:"domain"`
}

type probe struct {
	Exec *struct{} `json:"exec"`
}

type volume struct {
	Name          string `json:"name"`
	ContainerDisk *struct {
		Image string `json:"image"`
	} `json:"containerDisk"`
	DownwardMetrics       *struct{} `json:"downwardMetrics"`
	PersistentVolumeClaim *struct{} `json:"persistentVolumeClaim"`
	DataVolume            *struct{} `json:"dataVolume"`
}

type domain struct {
	CPU      *cpu      `json:"cpu"`
	Features *features `json:"features"`
	Machine  *struct {
		Type string `json:"type"`
	} `json:"machine"`
	Memory          *memory         `json:"memory"`
	Resources       vmiResources    `json:"resources"`
	Devices         devices         `json:"devices"`
	LaunchSecurity  *launchSecurity `json:"launchSecurity"`
	IOThreadsPolicy string          `json:"ioThreadsPolicy"`
	Firmware        *struct {
		KernelBoot *struct {
			Container *struct {
				Image string `json:"image"`
			} `json:"container"`
		} `json:"kernelBoot"`
	} `json:"firmware"`
	IOThreads *struct {
		SupplementalPoolThreadCount *uint32 `json:"supplementalPoolThreadCount"`
	} `json:"ioThreads"`
}

type cpu struct {
	Model                 string    `json:"model"`
	Features              []feature `json:"features"`
	Sockets               uint32    `json:"sockets"`
	Cores                 uint32    `json:"cores"`
	Threads               uint32    `json:"threads"`
	DedicatedCPUPlacement bool      `json:"dedicatedCpuPlacement"`
	IsolateEmulatorThread bool      `json:"isolateEmulatorThread"`
	Realtime              *struct{} `json:"realtime"`
}

type feature struct {
	Name   string `json:"name"`
	Policy string `json:"policy"`
}

// featureState is KubeVirt's FeatureState (and the part of SyNICTimer and
// TLBFlush the rules read): only "enabled".
type featureState struct {
	Enabled *bool `json:"enabled"`
}

type features struct {
	Hyperv *struct {
		VPIndex         *featureState `json:"vpindex"`
		Runtime         *featureState `json:"runtime"`
		Reset           *featureState `json:"reset"`
		SyNIC           *featureState `json:"synic"`
		SyNICTimer      *featureState `json:"synictimer"`
		Frequencies     *featureState `json:"frequencies"`
		Reenlightenment *featureState `json:"reenlightenment"`
		TLBFlush        *featureState `json:"tlbflush"`
		IPI             *featureState `json:"ipi"`
		EVMCS           *featureState `json:"evmcs"`
	} `json:"hyperv"`
}

type memory struct {
	Guest     *resource.Quantity `json:"guest"`
	Hugepages *struct {
		PageSize string `json:"pageSize"`
	} `json:"hugepages"`
	ReservedOverhead *struct {
		AddedOverhead *resource.Quantity `json:"addedOverhead"`
	} `json:"reservedOverhead"`
}

type vmiResources struct {
	Requests                corev1.ResourceList `json:"requests"`
	Limits                  corev1.ResourceList `json:"limits"`
	OvercommitGuestOverhead bool                `json:"overcommitGuestOverhead"`
}

type devices struct {
	Interfaces               []iface       `json:"interfaces"`
	AutoattachPodInterface   *bool         `json:"autoattachPodInterface"`
	AutoattachGraphicsDevice *bool         `json:"autoattachGraphicsDevice"`
	AutoattachSerialConsole  *bool         `json:"autoattachSerialConsole"`
	LogSerialConsole         *bool         `json:"logSerialConsole"`
	AutoattachVSOCK          *bool         `json:"autoattachVSOCK"`
	GPUs                     []device      `json:"gpus"`
	HostDevices              []device      `json:"hostDevices"`
	TPM                      *featureState `json:"tpm"`
	Filesystems              []struct {
		Name     string    `json:"name"`
		Virtiofs *struct{} `json:"virtiofs"`
	} `json:"filesystems"`
	Disks []struct {
		LUN *struct {
			Reservation bool `json:"reservation"`
		} `json:"lun"`
	} `json:"disks"`
}

type iface struct {
	Name    string `json:"name"`
	Model   string `json:"model"`
	Binding *struct {
		Name string `json:"name"`
	} `json:"binding"`
	PasstBinding *struct{} `json:"passtBinding"`
	SRIOV        *struct{} `json:"sriov"`
}

// device is a GPU or host device; ClaimName is the inline ClaimRequest.
type device struct {
	Name       string `json:"name"`
	DeviceName string `json:"deviceName"`
	ClaimName  string `json:"claimName"`
}

type launchSecurity struct {
	SEV *struct {
		Policy *struct {
			EncryptedState *bool `json:"encryptedState"`
		} `json:"policy"`
	} `json:"sev"`
	SNP *struct{} `json:"snp"`
	TDX *struct{} `json:"tdx"`
}

type vmiStatus struct {
	NodeName string `json:"nodeName"`
	Machine  *struct {
		Type string `json:"type"`
	} `json:"machine"`
	TopologyHints *struct {
		TSCFrequency *int64 `json:"tscFrequency"`
	} `json:"topologyHints"`
}

// The predicates below are KubeVirt's of the same meaning, on this mirror.

func (v *vmi) dedicatedCPU() bool {
	return v.Spec.Domain.CPU != nil && v.Spec.Domain.CPU.DedicatedCPUPlacement
}

func (v *vmi) model() string {
	if v.Spec.Domain.CPU == nil {
		return ""
	}
	return v.Spec.Domain.CPU.Model
}

func (v *vmi) cpuFeatures() []feature {
	if v.Spec.Domain.CPU == nil {
		return nil
	}
	return v.Spec.Domain.CPU.Features
}

// sev is util.IsSEVVMI: SEV or SNP asked for.
func (v *vmi) sev() bool {
	ls := v.Spec.Domain.LaunchSecurity
	return ls != nil && (ls.SEV != nil || ls.SNP != nil)
}

// sevES is util.IsSEVESVMI.
func (v *vmi) sevES() bool {
	ls := v.Spec.Domain.LaunchSecurity
	return ls != nil && ls.SEV != nil && ls.SEV.Policy != nil && ls.SEV.Policy.EncryptedState != nil && *ls.SEV.Policy.EncryptedState
}

func (v *vmi) sevSNP() bool {
	ls := v.Spec.Domain.LaunchSecurity
	return ls != nil && ls.SNP != nil
}

func (v *vmi) tdx() bool {
	ls := v.Spec.Domain.LaunchSecurity
	return ls != nil && ls.TDX != nil
}

// wantsGuaranteed is KubeVirt's WantsToHaveQOSGuaranteed: CPU request set
// and equal to its limit, and memory request equal to its limit (or only a
// memory limit).
func (v *vmi) wantsGuaranteed() bool {
	r := v.Spec.Domain.Resources
	memReq, memLim := r.Requests[corev1.ResourceMemory], r.Limits[corev1.ResourceMemory]
	cpuReq, cpuLim := r.Requests[corev1.ResourceCPU], r.Limits[corev1.ResourceCPU]
	mem := (memReq.IsZero() && !memLim.IsZero()) || (!memReq.IsZero() && memReq.Cmp(memLim) == 0)
	return mem && !cpuReq.IsZero() && cpuReq.Cmp(cpuLim) == 0
}

// vcpus is hardware.GetNumberOfVCPUs: the product of the non-zero of
// sockets, cores and threads (0 when all three are 0).
func vcpus(c *cpu) int64 {
	n := int64(0)
	for _, x := range []uint32{c.Cores, c.Sockets, c.Threads} {
		if x == 0 {
			continue
		}
		if n == 0 {
			n = int64(x)
		} else {
			n *= int64(x)
		}
	}
	return n
}

// ioThreadCPUs is the supplemental I/O thread pool's size (rows 35, 36).
func (v *vmi) ioThreadCPUs() int64 {
	if t := v.Spec.Domain.IOThreads; t != nil && t.SupplementalPoolThreadCount != nil {
		return int64(*t.SupplementalPoolThreadCount)
	}
	return 0
}

// hasReservation is reservation.HasVMIPersistentReservation: a LUN disk
// with reservation on.
func (r *renderer) hasReservation() bool {
	for _, d := range r.v.Spec.Domain.Devices.Disks {
		if d.LUN != nil && d.LUN.Reservation {
			return true
		}
	}
	return false
}

// kernelBootImage is the kernel-boot container's image; "" when none
// (util.HasKernelBootContainerImage).
func (v *vmi) kernelBootImage() string {
	f := v.Spec.Domain.Firmware
	if f == nil || f.KernelBoot == nil || f.KernelBoot.Container == nil {
		return ""
	}
	return f.KernelBoot.Container.Image
}
