package hostcpu

import "context"

// Conn is the part of a libvirt connection discovery uses.
// pkg/hostcpu/libvirt implements it over libvirt.org/go/libvirt; tests give
// their own.
type Conn interface {
	// DomainCapabilities returns virConnectGetDomainCapabilities for the
	// host's default emulator, arch and machine, and virtType, as
	// `virsh domcapabilities --virttype virtType` prints it.
	DomainCapabilities(ctx context.Context, virtType string) (string, error)
	// Capabilities returns virConnectGetCapabilities, as
	// `virsh capabilities` prints it.
	Capabilities(ctx context.Context) (string, error)
	// ExpandCPU returns virConnectBaselineHypervisorCPU of the one CPU
	// cpuXML with VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES, as
	// `virsh hypervisor-cpu-baseline --features --virttype virtType` prints
	// it: the model's complete feature list, ancestry resolved.
	ExpandCPU(ctx context.Context, virtType, cpuXML string) (string, error)
	// Close releases the connection.
	Close() error
}

// DialFunc opens a libvirt connection to uri.
type DialFunc func(ctx context.Context, uri string) (Conn, error)
