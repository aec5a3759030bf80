// Package kubevirtlabels owns the keys of KubeVirt's node labels, exactly
// as KubeVirt spells them (kubevirt.io/api/core/v1): pkg/labeller writes
// them, pkg/baseline reads the CPU ones across the cluster, and pkg/vmdrain
// matches VMs to the nodes that can take them by them.
package kubevirtlabels

// Label keys and prefixes, exactly KubeVirt's, so that KubeVirt's
// scheduling of virt-launcher pods works unchanged.
const (
	// CPUModelLabelPrefix + model: the model is usable on this host.
	CPUModelLabelPrefix = "cpu-model.node.kubevirt.io/"
	// CPUModelMigrationLabelPrefix + model: libvirt knows the model (any
	// usable attribute, 'no' included); a host-model guest whose CPU is that
	// model may migrate here.
	CPUModelMigrationLabelPrefix = "cpu-model-migration.node.kubevirt.io/"
	// CPUFeatureLabelPrefix + feature: the hypervisor supports the feature
	// and the minimum CPU model lacks it.
	CPUFeatureLabelPrefix = "cpu-feature.node.kubevirt.io/"
	// HostModelCPULabelPrefix + model: the host-model CPU's model.
	HostModelCPULabelPrefix = "host-model-cpu.node.kubevirt.io/"
	// HostModelRequiredFeaturesLabelPrefix + feature: a feature the
	// host-model CPU requires beyond its model and the minimum CPU model.
	HostModelRequiredFeaturesLabelPrefix = "host-model-required-features.node.kubevirt.io/"
	// CPUVendorLabelPrefix + vendor (Intel, AMD, Hygon).
	CPUVendorLabelPrefix = "cpu-vendor.node.kubevirt.io/"
	// CPUTimerLabelPrefix holds the TSC labels below.
	CPUTimerLabelPrefix = "cpu-timer.node.kubevirt.io/"
	// TSCFrequencyLabel's value is the TSC frequency in Hz.
	TSCFrequencyLabel = CPUTimerLabelPrefix + "tsc-frequency"
	// TSCScalableLabel's value is "true" or "false".
	TSCScalableLabel = CPUTimerLabelPrefix + "tsc-scalable"
	// MachineTypeLabelPrefix + machine type (pc-q35-7.2, q35, ...).
	MachineTypeLabelPrefix = "machine-type.node.kubevirt.io/"
	// ObsoleteHostModelLabel is "true" when the host-model CPU's model is
	// obsolete; KubeVirt keeps host-model guests off such nodes.
	ObsoleteHostModelLabel = "node-labeller.kubevirt.io/obsolete-host-model"
	// HyperVLabelPrefix + enlightenment (base, time, vpindex, ...): KVM
	// supports that Hyper-V enlightenment.
	HyperVLabelPrefix = "hyperv.node.kubevirt.io/"
	// SEVLabel, SEVESLabel, SEVSNPLabel and TDXLabel are "true" when libvirt
	// offers guests AMD SEV, SEV-ES, SEV-SNP or Intel TDX.
	SEVLabel    = "kubevirt.io/sev"
	SEVESLabel  = "kubevirt.io/sev-es"
	SEVSNPLabel = "kubevirt.io/sev-snp"
	TDXLabel    = "kubevirt.io/tdx"
	// S390PVLabel is "true" when libvirt offers s390 protected
	// virtualization (IBM Secure Execution).
	S390PVLabel = "kubevirt.io/s390-pv"
	// RealtimeLabel is "true" when kernel.sched_rt_runtime_us is -1.
	RealtimeLabel = "kubevirt.io/realtime"
	// VMArchLabelPrefix + Go architecture (amd64, arm64, s390x): VMs of that
	// architecture can run here, natively or emulated (KubeVirt v1.9.0,
	// written only while the KubeVirt CR turns on the
	// CrossArchitectureVirtualization feature gate).
	VMArchLabelPrefix = "kubevirt.io/vm-arch-"
)

// KubeVirt's own node labels, which node-agent does not write but a VM's
// migration target pod asks for (pkg/targetpod; rows of
// docs/kubevirt-target-pod.md).
const (
	// SchedulableLabel is "true" while virt-handler runs on the node (row 1).
	SchedulableLabel = "kubevirt.io/schedulable"
	// CPUManagerLabel is the dedicated-CPU key from v1.8; v1.7 used
	// CPUManagerLabelV17 (row 5).
	CPUManagerLabel    = "kubevirt.io/cpumanager"
	CPUManagerLabelV17 = "cpumanager"
	// TSCSchedulingLabelPrefix + frequency in Hz: virt-controller writes it
	// from the cpu-timer labels (row 11).
	TSCSchedulingLabelPrefix = "scheduling.node.kubevirt.io/tsc-frequency-"
)

// The labels KubeVirt puts on a VMI's virt-launcher pods (podLabels in its
// template.go), and the one its migration controller adds to a target pod
// (row 47).
const (
	AppLabel      = "kubevirt.io"
	AppLabelValue = "virt-launcher"
	// CreatedByLabel carries the VMI's UID: node-agent finds a VM's launcher
	// pod by it (pkg/vmdrain).
	CreatedByLabel    = "kubevirt.io/created-by"
	VMNameLabel       = "vm.kubevirt.io/name"
	VMIIDLabel        = "vmi.kubevirt.io/id"
	MigrationJobLabel = "kubevirt.io/migrationJobUID"
)
