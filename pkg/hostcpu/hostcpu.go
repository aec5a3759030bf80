package hostcpu

import (
	"slices"
	"strings"
)

// Fact names one kind of information discovery may fail to learn. The labeller
// maps each Fact to the labels that depend on it.
type Fact string

// The facts that need libvirt (or an offline file standing in for it).
const (
	// FactModels is the list of CPU models libvirt knows, with usability.
	FactModels Fact = "cpu models"
	// FactHostModel is the host-model CPU: name, vendor, required features.
	FactHostModel Fact = "host model"
	// FactSupportedFeatures is the set of features the hypervisor supports
	// (the host-model CPU expanded by hypervisor-cpu-baseline).
	FactSupportedFeatures Fact = "hypervisor-supported features"
	// FactModelFeatures is the expanded feature set of a requested model.
	FactModelFeatures Fact = "model features"
	// FactTSC is the TSC counter of the host capabilities.
	FactTSC Fact = "tsc counter"
	// FactMachineTypes is the list of machine types of every guest arch.
	FactMachineTypes Fact = "machine types"
	// FactEmulatedArches is the list of the other guest architectures
	// libvirt can run here by emulation (KubeVirt's cross-architecture
	// guests).
	FactEmulatedArches Fact = "emulated architectures"
	// FactLaunchSecurity is the confidential-guest support of the domain
	// capabilities' <features>: SEV, SEV-ES, SEV-SNP, TDX, s390-pv.
	FactLaunchSecurity Fact = "launch security"
	// FactHyperV is the set of Hyper-V enlightenments KVM supports.
	FactHyperV Fact = "hyper-v enlightenments"
	// FactRealtime is whether the scheduler lets realtime tasks run
	// unthrottled (kernel.sched_rt_runtime_us = -1).
	FactRealtime Fact = "realtime scheduling"
	// FactCPUID is the local CPU's own identity and flags; it is not read
	// when offline files describe another host.
	FactCPUID Fact = "cpuid"
)

// Where a feature list came from, in HostCPU.FeatureSource.
const (
	// FeatureSourceLibvirt means hypervisor-cpu-baseline --features on a live
	// libvirt, exactly as KubeVirt computes it.
	FeatureSourceLibvirt = "libvirt"
	// FeatureSourceCPUMap means the host-model CPU expanded offline with the
	// model definitions of a cpu_map directory.
	FeatureSourceCPUMap = "cpu_map"
	// FeatureSourceCPUID means the host CPU's own cpuid flags: what the CPU
	// has, not what the hypervisor can give a guest.
	FeatureSourceCPUID = "cpuid"
	// FeatureSourceFile means a saved hypervisor-cpu-baseline --features
	// output (Options.SupportedFeaturesFile).
	FeatureSourceFile = "file"
)

// HostCPU is one snapshot of what this host's CPU offers to virtual machines.
// A nil slice or pointer means "not known"; Unavailable says why.
type HostCPU struct {
	// Arch is libvirt's name of the host architecture, such as x86_64.
	Arch string
	// VirtType is the libvirt domain type the facts are for: kvm or qemu.
	VirtType string
	// Vendor is libvirt's vendor name (Intel, AMD, Hygon): the host-model
	// vendor when libvirt is known, else the cpuid vendor.
	Vendor string
	// CPUID is what the CPU reports about itself.
	CPUID CPUID
	// Models are the custom-mode CPU models of the domain capabilities.
	Models []Model
	// HostModel is the host-model CPU of the domain capabilities.
	HostModel *HostModel
	// SupportedFeatures are the features with policy "require" in the
	// expansion of the host-model CPU, sorted; FeatureSource says how they
	// were computed.
	SupportedFeatures []string
	// FeatureSource is one of the FeatureSource constants.
	FeatureSource string
	// ModelFeatures maps each model named in Options.ExpandModels to every
	// feature of its definition (ancestry resolved), sorted.
	ModelFeatures map[string][]string
	// TSC is the host's TSC counter, nil when unknown or absent.
	TSC *TSC
	// MachineTypes are the machine types libvirt offers, for every guest
	// architecture, sorted.
	MachineTypes []string
	// EmulatedArches are the guest architectures other than Arch (libvirt's
	// names) whose domain capabilities libvirt gives for virttype qemu, as
	// KubeVirt probes them for cross-architecture guests: aarch64 on an
	// x86_64 host, x86_64 on an aarch64 host, none elsewhere. Sorted; nil
	// when unknown, empty when none.
	EmulatedArches []string
	// LibvirtVersion is the version of the live libvirt discovery talked
	// to (12.5.0); empty when it used none or could not tell.
	LibvirtVersion string `json:",omitempty"`
	// DomCapsFlags are the virsh options of the domain capabilities the
	// families come from (--expand-cpu-features), chosen by LibvirtVersion.
	DomCapsFlags []string `json:",omitempty"`
	// LibvirtURI is the URI of the live libvirt discovery talked to; empty
	// when it used none.
	LibvirtURI string
	// LibvirtUnreachable says why no live libvirt could be reached; empty
	// when one was, or when offline files made it unnecessary.
	LibvirtUnreachable string
	// Security is the confidential-guest support; nil when unknown.
	Security *LaunchSecurity
	// HyperV are the Hyper-V enlightenments KVM offers (KubeVirt's names:
	// base, time, vpindex, ...), sorted; nil when unknown, empty when none.
	HyperV []string
	// Realtime is whether kernel.sched_rt_runtime_us is -1; nil when unknown.
	Realtime *bool
	// Offline is true when files describe the host: then nothing of the
	// local machine (cpuid, libvirt, /dev/kvm, sysctls) is read, so that
	// another host's files are never mixed with this one's facts.
	Offline bool
	// Sources says which inputs were used, in order.
	Sources []Source
	// Unavailable lists the facts that could not be learned, with the cause.
	Unavailable []Gap
}

// Model is one CPU model of the domain capabilities' custom mode.
type Model struct {
	Name string
	// Usable is true when libvirt reports usable='yes': a guest with this
	// model can start on this host.
	Usable bool
	// Usability is libvirt's usable attribute as written: yes, no, unknown,
	// or empty when the model has none.
	Usability string
	// Vendor is the model's vendor as libvirt reports it ("unknown" for
	// generic models).
	Vendor string
	// Deprecated is true when libvirt flags the model deprecated='yes'.
	Deprecated bool
}

// HostModel is the CPU libvirt would give a guest in host-model mode.
type HostModel struct {
	Name   string
	Vendor string
	// Required are the features with policy "require", sorted.
	Required []string
	// Disabled are the features with policy "disable", sorted.
	Disabled []string
	// Other are the features with any other policy, in libvirt's order.
	// The host-model modes this project has seen list require and disable
	// only; a feature with another policy (one --supported-cpu-features
	// might add) is kept, policy and all, in the CPU that is expanded
	// into cpu-feature, rather than dropped.
	Other []CPUFeature `json:",omitempty"`
}

// TSC describes the host's time stamp counter.
type TSC struct {
	// Frequency is in Hz; 0 when libvirt does not report it.
	Frequency uint64
	// Scalable is true when the TSC frequency can be scaled for guests
	// (libvirt's scaling='yes').
	Scalable bool
}

// LaunchSecurity is the confidential-guest support libvirt reports.
type LaunchSecurity struct {
	SEV, SEVES, SEVSNP, TDX bool
	// S390PV is IBM Secure Execution (s390 protected virtualization).
	S390PV bool
}

// Source is one input discovery used.
type Source struct {
	// Kind is cpuid, libvirt, file, cpu_map or builtin.
	Kind string
	// Detail names the input: a URI, a path, the CPU brand.
	Detail string
	// Provided lists what this source contributed.
	Provided []string
}

// Gap is a fact discovery could not learn.
type Gap struct {
	Fact   Fact
	Reason string
}

// Missing reports whether fact f is unavailable, and why.
func (h *HostCPU) Missing(f Fact) (reason string, missing bool) {
	for _, g := range h.Unavailable {
		if g.Fact == f {
			return g.Reason, true
		}
	}
	return "", false
}

// UsableModels returns the names of the usable models, sorted.
func (h *HostCPU) UsableModels() []string {
	var out []string
	for _, m := range h.Models {
		if m.Usable {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// AllModels returns the names of every model libvirt knows, sorted.
func (h *HostCPU) AllModels() []string {
	out := make([]string, 0, len(h.Models))
	for _, m := range h.Models {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// FeaturesOf returns the expanded feature set of model, if it was requested in
// Options.ExpandModels and could be computed.
func (h *HostCPU) FeaturesOf(model string) ([]string, bool) {
	f, ok := h.ModelFeatures[model]
	return f, ok
}

func (h *HostCPU) addGap(f Fact, reason string) {
	if _, ok := h.Missing(f); ok {
		return
	}
	h.Unavailable = append(h.Unavailable, Gap{Fact: f, Reason: reason})
}

func (h *HostCPU) addSource(kind, detail string, provided ...string) {
	for i := range h.Sources {
		s := &h.Sources[i]
		if s.Kind == kind && s.Detail == detail {
			for _, p := range provided {
				if !slices.Contains(s.Provided, p) {
					s.Provided = append(s.Provided, p)
				}
			}
			return
		}
	}
	h.Sources = append(h.Sources, Source{Kind: kind, Detail: detail, Provided: provided})
}

// sortedSet returns the distinct non-empty, trimmed names of in, sorted.
func sortedSet(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
