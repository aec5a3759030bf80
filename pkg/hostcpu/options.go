package hostcpu

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// AutoURI, as Options.LibvirtURI, tries qemu:///system, then the embedded QEMU
// driver under Options.StateDir. It is config.LibvirtURIAuto.
const AutoURI = "auto"

// SystemURI is the system libvirt daemon's QEMU driver, tried first by AutoURI.
const SystemURI = "qemu:///system"

// Virt types, for Options.VirtType.
const (
	// VirtTypeAuto picks kvm when /dev/kvm exists and qemu otherwise, as the
	// issue asks and as KubeVirt's virt-handler does.
	VirtTypeAuto = "auto"
	VirtTypeKVM  = "kvm"
	VirtTypeQEMU = "qemu"
)

// KVMDevicePath is where KVM's device is on a Linux host.
const KVMDevicePath = "/dev/kvm"

// KVMDevice reports whether path is a character device, as KVM's is. Nothing
// there, or a regular file bound over it (as the tests do to hide KVM), means
// no KVM: virttype auto then asks libvirt for qemu rather than kvm.
func KVMDevice(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// EmbeddedURI returns the URI of libvirt's embedded QEMU driver rooted at dir.
// One process can have only one embedded root open at a time (libvirt refuses
// a second: "already open with path"), and while it is open no other process,
// virsh included, can open the same root.
func EmbeddedURI(dir string) string {
	return "qemu:///embed?root=" + dir
}

// Options configure a Discoverer. The zero value discovers from cpuid and the
// kernel only: libvirt is used once Dial is set (LibvirtURI then defaults to
// AutoURI).
type Options struct {
	// LibvirtURI is a libvirt URI or AutoURI (also when empty).
	LibvirtURI string
	// StateDir is where AutoURI roots the embedded QEMU driver
	// (<StateDir>/libvirt). Empty leaves the embedded driver out of auto.
	StateDir string
	// VirtType is kvm, qemu or VirtTypeAuto (also when empty). With a
	// domain capabilities file, auto means the file's own type.
	VirtType string
	// Arch is the host's architecture, libvirt's name (x86_64); empty
	// means this machine's. libvirt is asked about this guest arch with
	// KubeVirtMachine's machine type, and about the architectures a host of
	// this arch may emulate.
	Arch string

	// DomainCapabilitiesFile replaces libvirt's domain capabilities.
	DomainCapabilitiesFile string
	// CapabilitiesFile replaces libvirt's host capabilities.
	CapabilitiesFile string
	// SupportedFeaturesFile replaces the hypervisor-supported features: the
	// output of `virsh hypervisor-cpu-baseline --features` on the host-model
	// CPU, which is the file KubeVirt's node labeller reads
	// (supported_features.xml).
	//
	// Any of DomainCapabilitiesFile, CapabilitiesFile and
	// SupportedFeaturesFile makes discovery offline: the files describe a
	// host, perhaps another one, so nothing of this machine is read.
	SupportedFeaturesFile string
	// CPUMapDir replaces libvirt for expanding models: the host-model CPU
	// and ExpandModels are resolved from this cpu_map directory.
	CPUMapDir string
	// FallbackCPUMapDir is read when libvirt cannot expand models and
	// CPUMapDir is empty; empty means DefaultCPUMapDir. A directory that does
	// not exist disables it. Offline discovery never reads it: it holds this
	// machine's libvirt's definitions, not those of the files' host.
	FallbackCPUMapDir string

	// ExpandModels are the models whose complete feature sets the snapshot
	// carries in ModelFeatures, such as the minimum CPU model. Each costs
	// one libvirt call.
	ExpandModels []string

	// Logger receives debug and info records; nil discards them. Problems
	// are not only logged: they are in HostCPU.Unavailable.
	Logger *slog.Logger
	// Dial opens a libvirt connection, usually pkg/hostcpu/libvirt.Dial.
	// nil leaves libvirt out: discovery then uses cpuid and the offline
	// inputs only, and says so in HostCPU.LibvirtUnreachable.
	Dial DialFunc
	// ReadCPUID reads the host CPU; nil means ReadCPUID.
	ReadCPUID func() CPUID
	// KVMAvailable reports whether /dev/kvm is there; nil means
	// KVMDevice(KVMDevicePath). Tests inject it: a unit test never reads
	// the host's devices.
	KVMAvailable func() bool
	// HyperV reads KVM's Hyper-V enlightenments; nil means
	// KVMHyperV(KVMDevicePath).
	HyperV func() ([]string, error)
	// Realtime reads whether realtime scheduling is unthrottled; nil means
	// ReadRealtime(SchedRTRuntimePath).
	Realtime func() (bool, error)
}

// Offline reports whether files stand for the host: discovery then reads
// nothing of this machine, libvirt included.
func (o *Options) Offline() bool {
	return o.DomainCapabilitiesFile != "" || o.CapabilitiesFile != "" || o.SupportedFeaturesFile != ""
}

// Validate checks the options and returns every problem at once.
func (o *Options) Validate() error {
	var errs []error
	switch o.VirtType {
	case "", VirtTypeAuto, VirtTypeKVM, VirtTypeQEMU:
	default:
		errs = append(errs, fmt.Errorf("virt type %q: must be auto, kvm or qemu", o.VirtType))
	}
	for _, m := range o.ExpandModels {
		if strings.TrimSpace(m) == "" {
			errs = append(errs, errors.New("models to expand: contains an empty name"))
		}
	}
	return errors.Join(errs...)
}
