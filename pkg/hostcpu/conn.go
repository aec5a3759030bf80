package hostcpu

import "context"

// Conn is the part of a libvirt connection discovery uses.
// pkg/hostcpu/libvirt implements it over libvirt.org/go/libvirt; tests give
// their own.
type Conn interface {
	// LibVersion returns the version of the libvirt that serves the
	// connection (virConnectGetLibVersion: the daemon's for a remote URI,
	// the library's own for the embedded driver), as
	// major*1,000,000 + minor*1,000 + release.
	LibVersion(ctx context.Context) (uint64, error)
	// DomainCapabilities returns virConnectGetDomainCapabilities for the
	// default emulator of t, as `virsh domcapabilities --arch t.Arch
	// --machine t.Machine --virttype t.VirtType` prints it, with the
	// flags of f.
	DomainCapabilities(ctx context.Context, t Target, f DomCapsFlags) (string, error)
	// Capabilities returns virConnectGetCapabilities, as
	// `virsh capabilities` prints it.
	Capabilities(ctx context.Context) (string, error)
	// ExpandCPU returns virConnectBaselineHypervisorCPU of the one CPU
	// cpuXML for t with VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES, as
	// `virsh hypervisor-cpu-baseline --features --arch t.Arch --machine
	// t.Machine --virttype t.VirtType` prints it: the model's complete
	// feature list, ancestry resolved.
	ExpandCPU(ctx context.Context, t Target, cpuXML string) (string, error)
	// Close releases the connection.
	Close() error
}

// Target is what libvirt is asked about: a guest architecture, a machine type
// and a domain type. An empty field asks for libvirt's default.
type Target struct {
	Arch     string
	Machine  string
	VirtType string
}

// DomCapsFlags are the flags of virConnectGetDomainCapabilities discovery
// uses, each named after its virsh option.
type DomCapsFlags struct {
	// ExpandCPUFeatures (VIR_CONNECT_GET_DOMAIN_CAPABILITIES_EXPAND_CPU_FEATURES,
	// libvirt 12.2.0) lists every feature of the host-model CPU, those its
	// named model implies included, not only those beyond the model.
	ExpandCPUFeatures bool
	// SupportedCPUFeatures (VIR_CONNECT_GET_DOMAIN_CAPABILITIES_SUPPORTED_CPU_FEATURES,
	// libvirt 12.5.0) adds to the host-model CPU the features the host
	// supports but host-model mode does not turn on by default.
	SupportedCPUFeatures bool
}

// Options returns the virsh options f stands for, for reports.
func (f DomCapsFlags) Options() []string {
	var out []string
	if f.ExpandCPUFeatures {
		out = append(out, "--expand-cpu-features")
	}
	if f.SupportedCPUFeatures {
		out = append(out, "--supported-cpu-features")
	}
	return out
}

// The libvirt releases that brought the flags of DomCapsFlags, as
// LibVersion numbers them.
const (
	libvirtExpandCPUFeatures    = 12_002_000
	libvirtSupportedCPUFeatures = 12_005_000
)

// FlagsFor returns the flags a libvirt of version offers, the way KubeVirt's
// node-labeller.sh picks them (kubevirt/kubevirt ffa4593: it passes each
// option that `virsh domcapabilities --help` lists). Each of the two
// domain-capabilities documents KubeVirt reads gets different ones: the one
// it labels models and the host model from gets ExpandCPUFeatures only; the
// one it expands for the cpu-feature family gets both.
func FlagsFor(version uint64) (labels, supported DomCapsFlags) {
	expand := version >= libvirtExpandCPUFeatures
	return DomCapsFlags{ExpandCPUFeatures: expand},
		DomCapsFlags{ExpandCPUFeatures: expand, SupportedCPUFeatures: version >= libvirtSupportedCPUFeatures}
}

// KubeVirtMachine returns the machine type KubeVirt's node-labeller.sh asks
// libvirt about for a host of arch (libvirt's name): q35 on x86_64, virt on
// aarch64, s390-ccw-virtio on s390x. On other architectures KubeVirt labels
// nothing; node-agent asks for libvirt's default machine there ("").
func KubeVirtMachine(arch string) string {
	switch arch {
	case "x86_64":
		return "q35"
	case "aarch64":
		return "virt"
	case "s390x":
		return "s390-ccw-virtio"
	}
	return ""
}

// DialFunc opens a libvirt connection to uri.
type DialFunc func(ctx context.Context, uri string) (Conn, error)
