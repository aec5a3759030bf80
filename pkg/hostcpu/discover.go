package hostcpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
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

// Discoverer examines the host CPU. It holds no connection between calls: each
// Discover connects, asks, and closes, so a restarted libvirt daemon or an
// upgraded QEMU is seen by the next call. It is safe for concurrent use.
//
// A Discover costs five to seven libvirt calls: the version, domain
// capabilities (twice where libvirt offers --supported-cpu-features), host
// capabilities, the domain capabilities of the architecture KubeVirt would
// emulate (aarch64 on x86_64), the host-model expansion and one expansion per
// ExpandModels entry. Each is milliseconds while libvirt's QEMU capabilities cache is
// valid; where libvirt re-probes QEMU every time (seen on a host whose
// /dev/kvm the QEMU user cannot open), each takes seconds.
type Discoverer struct {
	opts Options
	log  *slog.Logger
}

// NewDiscoverer checks opts and fills in the real implementations of what it
// leaves nil.
func NewDiscoverer(opts Options) (*Discoverer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	d := &Discoverer{opts: opts, log: opts.Logger}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.opts.LibvirtURI == "" {
		d.opts.LibvirtURI = AutoURI
	}
	if d.opts.VirtType == "" {
		d.opts.VirtType = VirtTypeAuto
	}
	if d.opts.Arch == "" {
		d.opts.Arch = libvirtArch(runtime.GOARCH)
	}
	if d.opts.FallbackCPUMapDir == "" {
		d.opts.FallbackCPUMapDir = DefaultCPUMapDir
	}
	if d.opts.Dial == nil {
		d.opts.Dial = func(context.Context, string) (Conn, error) {
			return nil, errors.New("no libvirt binding was given to discovery (hostcpu.Options.Dial)")
		}
	}
	if d.opts.ReadCPUID == nil {
		d.opts.ReadCPUID = ReadCPUID
	}
	if d.opts.HyperV == nil {
		d.opts.HyperV = func() ([]string, error) { return KVMHyperV(KVMDevicePath) }
	}
	if d.opts.Realtime == nil {
		d.opts.Realtime = func() (bool, error) { return ReadRealtime(SchedRTRuntimePath) }
	}
	if d.opts.KVMAvailable == nil {
		d.opts.KVMAvailable = func() bool { return KVMDevice(KVMDevicePath) }
	}
	return d, nil
}

// expander expands a CPU definition into its complete feature list.
type expander struct {
	kind   string // FeatureSourceLibvirt or FeatureSourceCPUMap
	detail string
	expand func(ctx context.Context, cpu *CPU) (*CPU, error)
}

// Discover takes one snapshot of the host CPU. It fails only when an input the
// caller named explicitly (a file or a cpu_map directory) cannot be read, or
// when ctx ends; libvirt being unreachable is not an error but a fallback to
// cpuid, recorded in the snapshot's Unavailable list.
func (d *Discoverer) Discover(ctx context.Context) (*HostCPU, error) {
	start := time.Now()
	o := &d.opts
	h := &HostCPU{ModelFeatures: map[string][]string{}, Offline: o.Offline()}
	if h.Offline {
		h.addGap(FactCPUID, offlineReason)
	} else {
		h.CPUID = o.ReadCPUID()
		h.addSource("cpuid", h.CPUID.String(), "cpu identity")
	}

	dc, caps, cmap, sf, err := d.readOfflineInputs(h)
	if err != nil {
		return nil, err
	}

	var conn Conn
	var uri string
	libvirtReason := "" // why libvirt could not help, for the gaps
	if h.Offline {
		libvirtReason = offlineReason
	} else if dc == nil || caps == nil || cmap == nil {
		var cerr error
		conn, uri, cerr = d.connect(ctx)
		if cerr != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			libvirtReason = "libvirt unreachable: " + cerr.Error()
			h.LibvirtUnreachable = cerr.Error()
			d.log.Info("libvirt unreachable; using cpuid and offline inputs only", "uri", o.LibvirtURI, "err", cerr)
		} else {
			h.LibvirtURI = uri
			defer func() {
				if err := conn.Close(); err != nil {
					d.log.Info("closing the libvirt connection failed", "uri", uri, "err", err)
				}
			}()
		}
	}

	// The flags KubeVirt passes when its libvirt offers them: labelFlags
	// for the document the models and the host model come from, supFlags
	// for the one whose host model is expanded into cpu-feature.
	var labelFlags, supFlags DomCapsFlags
	if conn != nil {
		labelFlags, supFlags = d.libvirtFlags(ctx, conn, uri, h)
	}
	virtType := d.pickVirtType(dc)
	if dc == nil && conn != nil {
		var derr error
		var used DomCapsFlags
		dc, virtType, used, derr = d.liveDomainCapabilities(ctx, conn, uri, d.target(virtType), labelFlags)
		if derr != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			libvirtReason = fmt.Sprintf("libvirt %s: domain capabilities: %v", uri, derr)
		} else {
			h.addSource("libvirt", uri, strings.Join(append([]string{"domain capabilities"}, used.Options()...), " "))
			h.DomCapsFlags = used.Options()
			if used != labelFlags {
				// libvirt refused the flags: the expanded document
				// would be refused too.
				labelFlags, supFlags = used, used
			}
		}
	}
	if dc != nil {
		if dc.VirtType != "" {
			virtType = dc.VirtType
		}
		h.Arch = dc.Arch
		h.Models = dc.Models
		if h.Models == nil {
			h.Models = []Model{}
		}
		h.HostModel = dc.HostModel
		if h.HostModel == nil {
			h.addGap(FactHostModel, fmt.Sprintf("the domain capabilities for virttype %s have no supported host-model CPU", virtType))
		}
		h.Security = dc.Security
		if h.Security == nil {
			h.addGap(FactLaunchSecurity, "the domain capabilities have no <features> element")
		}
	} else {
		reason := d.noLibvirtReason(libvirtReason, "domain capabilities file")
		h.addGap(FactModels, reason)
		h.addGap(FactHostModel, reason)
		h.addGap(FactLaunchSecurity, reason)
	}
	h.VirtType = virtType

	if caps == nil && conn != nil {
		t := time.Now()
		s, cerr := conn.Capabilities(ctx)
		d.log.Debug("libvirt call", "call", "GetCapabilities", "uri", uri, "duration", time.Since(t), "err", cerr)
		if cerr == nil {
			caps, cerr = ParseCapabilities([]byte(s))
		}
		if cerr != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			r := fmt.Sprintf("libvirt %s: capabilities: %v", uri, cerr)
			h.addGap(FactTSC, r)
			h.addGap(FactMachineTypes, r)
		} else {
			h.addSource("libvirt", uri, "host capabilities")
		}
	}
	if h.Arch == "" && caps != nil {
		h.Arch = caps.Arch
	}
	if h.Arch == "" && !h.Offline {
		h.Arch = libvirtArch(runtime.GOARCH)
	}
	if caps != nil {
		h.TSC = caps.TSC
		if h.TSC == nil {
			h.addGap(FactTSC, "the host capabilities have no tsc counter")
		}
		h.MachineTypes = caps.MachineTypes()
		if len(h.MachineTypes) == 0 {
			h.addGap(FactMachineTypes, "the host capabilities list no machine types")
		}
	} else {
		reason := d.noLibvirtReason(libvirtReason, "capabilities file")
		h.addGap(FactTSC, reason)
		h.addGap(FactMachineTypes, reason)
	}

	d.emulatedArches(ctx, h, conn, uri, libvirtReason)

	exp := d.pickExpander(cmap, conn, uri, d.target(virtType), h.Offline)
	if sf != nil {
		h.SupportedFeatures = supportedFeaturesOf(sf, h.Arch)
		h.FeatureSource = FeatureSourceFile
	} else {
		hm := h.HostModel
		if conn != nil && hm != nil && supFlags != labelFlags {
			hm = d.supportedHostModel(ctx, h, conn, uri, d.target(virtType), supFlags)
		}
		d.supportedFeatures(ctx, h, hm, exp, libvirtReason)
	}
	d.expandModels(ctx, h, exp, libvirtReason)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	switch {
	case h.HostModel != nil && h.HostModel.Vendor != "":
		h.Vendor = h.HostModel.Vendor
	case h.HostModel != nil && h.Arch == "s390x":
		// s390x domain capabilities name no vendor; KubeVirt labels IBM,
		// the only maker of the architecture.
		h.Vendor = "IBM"
	case h.CPUID.Vendor != "" && !h.Offline:
		h.Vendor = h.CPUID.Vendor
		h.addSource("cpuid", h.CPUID.String(), "vendor")
	}
	d.localProbes(h)

	d.log.Debug("host CPU discovered", "duration", time.Since(start), "virtType", h.VirtType,
		"models", len(h.Models), "supportedFeatures", len(h.SupportedFeatures), "featureSource", h.FeatureSource,
		"unavailable", len(h.Unavailable))
	return h, nil
}

// readOfflineInputs reads the files the caller named. Any failure is an
// error: the caller asked for exactly these inputs.
func (d *Discoverer) readOfflineInputs(h *HostCPU) (*DomainCapabilities, *Capabilities, *CPUMap, *CPU, error) {
	o := &d.opts
	var dc *DomainCapabilities
	var caps *Capabilities
	var cmap *CPUMap
	var sf *CPU
	if p := o.DomainCapabilitiesFile; p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("domain capabilities file: %w", err)
		}
		if dc, err = ParseDomainCapabilities(data); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("domain capabilities file %s: %w; save it with `virsh domcapabilities`", p, err)
		}
		h.addSource("file", p, "domain capabilities")
	}
	if p := o.CapabilitiesFile; p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("capabilities file: %w", err)
		}
		if caps, err = ParseCapabilities(data); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("capabilities file %s: %w; save it with `virsh capabilities`", p, err)
		}
		h.addSource("file", p, "host capabilities")
	}
	if p := o.CPUMapDir; p != "" {
		var err error
		if cmap, err = LoadCPUMap(p); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	if p := o.SupportedFeaturesFile; p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("supported features file: %w", err)
		}
		if sf, err = ParseCPU(data); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("supported features file %s: %w; save it with `virsh hypervisor-cpu-baseline --features`", p, err)
		}
		h.addSource("file", p, "hypervisor-supported features")
	}
	return dc, caps, cmap, sf, nil
}

// offlineReason explains the facts that only this machine could give.
const offlineReason = "offline files describe the host, and this machine's own facts are not mixed with them"

// supportedFeaturesOf picks the hypervisor-supported features out of a
// hypervisor-cpu-baseline --features output as KubeVirt does: the features
// with policy='require', and on s390x also those without a policy, which
// libvirt prints there without one.
func supportedFeaturesOf(cpu *CPU, arch string) []string {
	var out []string
	for _, f := range cpu.Features {
		if f.Policy == "require" || (f.Policy == "" && arch == "s390x") {
			out = append(out, f.Name)
		}
	}
	return sortedSet(out)
}

// localProbes reads what only this machine's kernel knows: KVM's Hyper-V
// enlightenments and the realtime sysctl. Offline, both are unknown.
func (d *Discoverer) localProbes(h *HostCPU) {
	if h.Offline {
		h.addGap(FactHyperV, offlineReason)
		h.addGap(FactRealtime, offlineReason)
		return
	}
	switch {
	case h.Arch != "x86_64" && h.Arch != "i686":
		// Hyper-V enlightenments are an x86 interface; KubeVirt reports
		// none elsewhere.
		h.HyperV = []string{}
	default:
		hv, err := d.opts.HyperV()
		if err != nil {
			h.addGap(FactHyperV, err.Error())
		} else {
			h.HyperV = hv
			h.addSource("kvm", KVMDevicePath, "hyper-v enlightenments")
		}
	}
	rt, err := d.opts.Realtime()
	if err != nil {
		h.addGap(FactRealtime, err.Error())
	} else {
		h.Realtime = &rt
		h.addSource("sysctl", "kernel.sched_rt_runtime_us", "realtime")
	}
}

// noLibvirtReason explains a missing libvirt-derived fact.
func (d *Discoverer) noLibvirtReason(libvirtReason, input string) string {
	if libvirtReason == offlineReason {
		return fmt.Sprintf("no %s was given, and offline files are not mixed with this machine's libvirt", input)
	}
	if libvirtReason != "" {
		return libvirtReason
	}
	return fmt.Sprintf("libvirt was not asked and no %s was given", input)
}

// connect opens the first reachable URI.
func (d *Discoverer) connect(ctx context.Context) (Conn, string, error) {
	var errs []string
	for _, uri := range d.candidateURIs() {
		if root, ok := strings.CutPrefix(uri, "qemu:///embed?root="); ok && d.opts.LibvirtURI == AutoURI {
			// The state directory is ours; libvirt would create the
			// root with a laxer mode.
			if err := os.MkdirAll(root, 0o700); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", uri, err))
				continue
			}
		}
		if root := EmbedRoot(uri, ""); root != "" {
			if err := writeEmbedConfig(root); err != nil {
				// Discovery still works, only slower.
				d.log.Info("cannot write the embedded libvirt's qemu.conf; QEMU may be probed again at every discovery", "root", root, "err", err)
			}
		}
		t := time.Now()
		conn, err := d.opts.Dial(ctx, uri)
		d.log.Debug("libvirt connect", "uri", uri, "duration", time.Since(t), "err", err)
		if err == nil {
			return conn, uri, nil
		}
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		errs = append(errs, fmt.Sprintf("%s: %v", uri, err))
	}
	return nil, "", errors.New(strings.Join(errs, "; "))
}

// candidateURIs lists the URIs to try, in order.
func (d *Discoverer) candidateURIs() []string {
	if d.opts.LibvirtURI != AutoURI {
		return []string{d.opts.LibvirtURI}
	}
	uris := []string{SystemURI}
	if d.opts.StateDir != "" {
		root, err := filepath.Abs(filepath.Join(d.opts.StateDir, "libvirt"))
		if err == nil {
			uris = append(uris, EmbeddedURI(root))
		}
	}
	return uris
}

// pickVirtType resolves VirtTypeAuto.
func (d *Discoverer) pickVirtType(dc *DomainCapabilities) string {
	if d.opts.VirtType != VirtTypeAuto {
		return d.opts.VirtType
	}
	if dc != nil && dc.VirtType != "" {
		return dc.VirtType
	}
	if d.opts.KVMAvailable() {
		return VirtTypeKVM
	}
	return VirtTypeQEMU
}

// target is what libvirt is asked about for the host's own guests: its arch
// and KubeVirt's machine type for it.
func (d *Discoverer) target(virtType string) Target {
	return Target{Arch: d.opts.Arch, Machine: KubeVirtMachine(d.opts.Arch), VirtType: virtType}
}

// libvirtFlags reads the live libvirt's version and returns the domain
// capabilities flags it offers (FlagsFor). A libvirt that cannot tell gets
// none, as an older virsh without the options.
func (d *Discoverer) libvirtFlags(ctx context.Context, conn Conn, uri string, h *HostCPU) (labels, supported DomCapsFlags) {
	v, err := conn.LibVersion(ctx)
	d.log.Debug("libvirt call", "call", "GetLibVersion", "uri", uri, "version", v, "err", err)
	if err != nil {
		d.log.Info("cannot read libvirt's version; asking for domain capabilities without --expand-cpu-features", "uri", uri, "err", err)
		return DomCapsFlags{}, DomCapsFlags{}
	}
	h.LibvirtVersion = fmt.Sprintf("%d.%d.%d", v/1_000_000, v/1_000%1_000, v%1_000)
	return FlagsFor(v)
}

// liveDomainCapabilities asks libvirt for the domain capabilities of t with
// flags, and returns the virttype and flags it got them for. When auto chose
// kvm and libvirt refuses it (for example /dev/kvm exists but the QEMU binary
// lacks KVM support), it asks again for qemu. When libvirt refuses the flags
// (a daemon older than its version said), it asks again without them, as
// KubeVirt does with a virsh that lacks the options.
func (d *Discoverer) liveDomainCapabilities(ctx context.Context, conn Conn, uri string, t Target, flags DomCapsFlags) (*DomainCapabilities, string, DomCapsFlags, error) {
	get := func(t Target, f DomCapsFlags) (*DomainCapabilities, error) {
		start := time.Now()
		s, err := conn.DomainCapabilities(ctx, t, f)
		d.log.Debug("libvirt call", "call", "GetDomainCapabilities", "uri", uri, "arch", t.Arch, "machine", t.Machine, "virtType", t.VirtType, "flags", f.Options(), "duration", time.Since(start), "err", err)
		if err != nil {
			return nil, err
		}
		return ParseDomainCapabilities([]byte(s))
	}
	dc, err := get(t, flags)
	if err != nil && flags != (DomCapsFlags{}) && ctx.Err() == nil {
		d.log.Info("libvirt refused the domain capabilities flags; asking without them", "uri", uri, "flags", flags.Options(), "err", err)
		flags = DomCapsFlags{}
		dc, err = get(t, flags)
	}
	if err != nil && d.opts.VirtType == VirtTypeAuto && t.VirtType == VirtTypeKVM && ctx.Err() == nil {
		d.log.Info("libvirt refused domain capabilities for kvm; trying qemu", "uri", uri, "err", err)
		q := t
		q.VirtType = VirtTypeQEMU
		if dc2, err2 := get(q, flags); err2 == nil {
			return dc2, VirtTypeQEMU, flags, nil
		}
	}
	return dc, t.VirtType, flags, err
}

// supportedHostModel returns the host-model CPU of the domain capabilities
// with flags, the input KubeVirt expands into cpu-feature since ffa4593
// (`virsh domcapabilities --expand-cpu-features --supported-cpu-features |
// virsh hypervisor-cpu-baseline --features`). When libvirt cannot give it,
// the host model of the labelled document stands in, and the log says so.
func (d *Discoverer) supportedHostModel(ctx context.Context, h *HostCPU, conn Conn, uri string, t Target, flags DomCapsFlags) *HostModel {
	start := time.Now()
	s, err := conn.DomainCapabilities(ctx, t, flags)
	d.log.Debug("libvirt call", "call", "GetDomainCapabilities", "uri", uri, "arch", t.Arch, "machine", t.Machine, "virtType", t.VirtType, "flags", flags.Options(), "duration", time.Since(start), "err", err)
	var dc *DomainCapabilities
	if err == nil {
		dc, err = ParseDomainCapabilities([]byte(s))
	}
	if err == nil && dc.HostModel == nil {
		err = errors.New("no host-model CPU in them")
	}
	if err != nil {
		d.log.Info("domain capabilities with the supported CPU features unavailable; expanding the host model without them", "uri", uri, "flags", flags.Options(), "err", err)
		return h.HostModel
	}
	h.addSource("libvirt", uri, strings.Join(append([]string{"domain capabilities"}, flags.Options()...), " ")+" for the supported features")
	return dc.HostModel
}

// crossArchTargets are the guests KubeVirt's node-labeller.sh probes for
// cross-architecture emulation (kubevirt/kubevirt d923fdb): aarch64 with
// machine virt on an x86_64 host, x86_64 with q35 on an aarch64 host, both
// for virttype qemu; none on other hosts.
func crossArchTargets(hostArch string) []Target {
	switch hostArch {
	case "x86_64":
		return []Target{{Arch: "aarch64", Machine: "virt", VirtType: VirtTypeQEMU}}
	case "aarch64":
		return []Target{{Arch: "x86_64", Machine: "q35", VirtType: VirtTypeQEMU}}
	}
	return nil
}

// emulatedArches fills EmulatedArches: each cross-architecture target whose
// domain capabilities libvirt gives and that parse, as KubeVirt counts an
// architecture emulated (loadCrossArchCapabilities). An error means the
// emulator is not installed: the arch is not emulated, which is an answer.
func (d *Discoverer) emulatedArches(ctx context.Context, h *HostCPU, conn Conn, uri, libvirtReason string) {
	if conn == nil {
		// Offline files include no other architecture's domain
		// capabilities.
		h.addGap(FactEmulatedArches, d.noLibvirtReason(libvirtReason, "cross-architecture domain capabilities file"))
		return
	}
	out := []string{}
	for _, t := range crossArchTargets(h.Arch) {
		start := time.Now()
		s, err := conn.DomainCapabilities(ctx, t, DomCapsFlags{})
		if err == nil {
			_, err = ParseDomainCapabilities([]byte(s))
		}
		d.log.Debug("libvirt call", "call", "GetDomainCapabilities", "uri", uri, "arch", t.Arch, "machine", t.Machine, "virtType", t.VirtType, "duration", time.Since(start), "err", err)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			out = append(out, t.Arch)
		}
	}
	h.EmulatedArches = sortedSet(out)
	h.addSource("libvirt", uri, "emulated architectures")
}

// pickExpander chooses how to expand models: an explicit cpu_map directory,
// else the live libvirt, else the fallback cpu_map directory when it exists
// and discovery is not offline.
func (d *Discoverer) pickExpander(cmap *CPUMap, conn Conn, uri string, t Target, offline bool) *expander {
	fromMap := func(m *CPUMap) *expander {
		return &expander{kind: FeatureSourceCPUMap, detail: m.Dir(), expand: func(_ context.Context, cpu *CPU) (*CPU, error) {
			return m.Expand(cpu)
		}}
	}
	if cmap != nil {
		return fromMap(cmap)
	}
	if conn != nil {
		return &expander{kind: FeatureSourceLibvirt, detail: uri, expand: func(ctx context.Context, cpu *CPU) (*CPU, error) {
			in, err := cpu.XML()
			if err != nil {
				return nil, err
			}
			start := time.Now()
			s, err := conn.ExpandCPU(ctx, t, in)
			d.log.Debug("libvirt call", "call", "BaselineHypervisorCPU", "uri", uri, "model", cpu.Model, "arch", t.Arch, "machine", t.Machine, "virtType", t.VirtType, "duration", time.Since(start), "err", err)
			if err != nil {
				return nil, fmt.Errorf("libvirt %s: expanding model %s: %w", uri, cpu.Model, err)
			}
			return ParseCPU([]byte(s))
		}}
	}
	if offline {
		// The fallback is this machine's libvirt's model definitions; the
		// files may come from another host and another libvirt release,
		// whose host model this one may not define or defines otherwise.
		// Only a directory the caller names (CPUMapDir) is used offline.
		return nil
	}
	dir := d.opts.FallbackCPUMapDir
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	m, err := LoadCPUMap(dir)
	if err != nil {
		d.log.Info("fallback cpu_map directory unusable", "dir", dir, "err", err)
		return nil
	}
	return fromMap(m)
}

// supportedFeatures fills SupportedFeatures: the expansion of hm, the
// host-model CPU, when possible, else cpuid's flags.
func (d *Discoverer) supportedFeatures(ctx context.Context, h *HostCPU, hm *HostModel, exp *expander, libvirtReason string) {
	var reason string
	switch {
	case hm == nil:
		reason, _ = h.Missing(FactHostModel)
	case exp == nil:
		// A cpu_map only helps on x86: libvirt defines no s390x models
		// there, so a saved hypervisor-cpu-baseline output is named first.
		reason = d.noLibvirtReason(libvirtReason, "supported-features file or cpu_map directory")
	default:
		cpu, err := exp.expand(ctx, hostModelCPU(hm))
		if err == nil {
			h.SupportedFeatures = cpu.FeaturesWithPolicy("require")
			h.FeatureSource = exp.kind
			h.addSource(exp.kind, exp.detail, "hypervisor-supported features")
			return
		}
		reason = fmt.Sprintf("expanding the host-model CPU %s: %v", hm.Name, err)
	}
	h.addGap(FactSupportedFeatures, reason)
	if h.Offline {
		return
	}
	h.SupportedFeatures = slices.Clone(h.CPUID.Features)
	h.FeatureSource = FeatureSourceCPUID
	h.addSource("cpuid", h.CPUID.String(), "features")
}

// expandModels fills ModelFeatures for ExpandModels, with every feature the
// model defines, whatever the hypervisor's policy for it: subtracting the
// minimum model means removing what that model has, not what this host can
// give it.
func (d *Discoverer) expandModels(ctx context.Context, h *HostCPU, exp *expander, libvirtReason string) {
	var problems []string
	for _, model := range sortedSet(d.opts.ExpandModels) {
		var why string
		if exp != nil {
			cpu, err := exp.expand(ctx, namedModelCPU(model))
			if err == nil {
				h.ModelFeatures[model] = cpu.FeatureNames()
				h.addSource(exp.kind, exp.detail, model+" features")
				continue
			}
			if ctx.Err() != nil {
				return
			}
			why = err.Error()
		} else {
			why = d.noLibvirtReason(libvirtReason, "cpu_map directory")
		}
		if f, ok := builtinModelFeatures(model); ok {
			h.ModelFeatures[model] = f
			h.addSource("builtin", "libvirt 9.0 model definitions", model+" features")
			d.log.Info("using the built-in feature list of a model", "model", model, "reason", why)
			continue
		}
		problems = append(problems, fmt.Sprintf("model %s: %s", model, why))
	}
	if len(problems) > 0 {
		h.addGap(FactModelFeatures, strings.Join(problems, "; "))
	}
}

// libvirtArch maps a GOARCH to libvirt's architecture name.
func libvirtArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "386":
		return "i686"
	case "arm64":
		return "aarch64"
	default:
		return goarch
	}
}

// embedConfig is the qemu.conf node-agent gives the embedded QEMU driver. It
// runs QEMU as root, the user the agent already is.
//
// libvirt keeps each QEMU binary's probed capabilities in
// <root>/cache/qemu/capabilities and re-probes (about 4 s per binary) when
// virQEMUCapsIsValid says the entry is stale. It keys the entry on the QEMU
// binary's ctime, the mtime of QEMU's module directory, libvirt's own version
// and the ctime of its driver module, and, for a native guest arch, on the
// host's microcode version, CPU signature, kernel version, KVM nesting and
// secure-guest support, and on whether KVM is usable. That last check asks
// whether the configured QEMU user (Debian's default: libvirt-qemu) may open
// /dev/kvm. Where it may not, as on a host whose /dev/kvm is root's alone
// (mode 0600), while the probe itself saw KVM, every lookup finds the entry
// stale ("KVM was enabled when probing ..., but it is not available now" in
// libvirt's debug log), so each discovery probed QEMU five times over, for
// about 20 s. With root as the QEMU user the check agrees with the probe, and
// the cache holds across discoveries and, the state directory being a
// hostPath, across restarts. The embedded driver only probes; it never starts
// a guest, so no QEMU runs as root for longer than a probe.
const embedConfig = `# Written by node-agent (pkg/hostcpu/discover.go, embedConfig): probe QEMU as
# root, so that libvirt's capabilities cache stays valid across discoveries.
user = "root"
group = "root"
`

// writeEmbedConfig writes embedConfig to <root>/etc/qemu.conf, where the
// embedded driver reads its configuration, unless a qemu.conf is there
// already: an admin's own file wins.
func writeEmbedConfig(root string) error {
	dir := filepath.Join(root, "etc")
	path := filepath.Join(dir, "qemu.conf")
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(embedConfig); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
