package hostcpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

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

// Discover takes one snapshot of the host CPU. It fails only when an input the
// caller named explicitly (a file or a cpu_map directory) cannot be read, or
// when ctx ends; libvirt being unreachable is not an error but a fallback to
// cpuid, recorded in the snapshot's Unavailable list.
func (d *Discoverer) Discover(ctx context.Context) (*HostCPU, error) {
	start := time.Now()
	h := &HostCPU{ModelFeatures: map[string][]string{}, Offline: d.opts.Offline()}
	if h.Offline {
		h.addGap(FactCPUID, offlineReason)
	} else {
		h.CPUID = d.opts.ReadCPUID()
		h.addSource("cpuid", h.CPUID.String(), "cpu identity")
	}

	dc, caps, cmap, sf, err := d.readOfflineInputs(h)
	if err != nil {
		return nil, err
	}

	conn, uri, libvirtReason, err := d.openLibvirt(ctx, h, dc == nil || caps == nil || cmap == nil)
	if err != nil {
		return nil, err
	}
	if conn != nil {
		defer d.closeLibvirt(conn, uri)
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
	h.VirtType = d.useDomainCapabilities(h, dc, virtType, libvirtReason)

	if caps == nil && conn != nil {
		var cerr error
		caps, cerr = d.liveCapabilities(ctx, conn, uri)
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
	d.useCapabilities(h, caps, libvirtReason)

	d.emulatedArches(ctx, h, conn, uri, libvirtReason)

	exp := d.pickExpander(cmap, conn, uri, d.target(h.VirtType), h.Offline)
	if sf != nil {
		h.SupportedFeatures = supportedFeaturesOf(sf, h.Arch)
		h.FeatureSource = FeatureSourceFile
	} else {
		hm := h.HostModel
		if conn != nil && hm != nil && supFlags != labelFlags {
			hm = d.supportedHostModel(ctx, h, conn, uri, d.target(h.VirtType), supFlags)
		}
		d.supportedFeatures(ctx, h, hm, exp, libvirtReason)
	}
	d.expandModels(ctx, h, exp, libvirtReason)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	pickVendor(h)
	d.localProbes(h)

	d.log.Debug("host CPU discovered", "duration", time.Since(start), "virtType", h.VirtType,
		"models", len(h.Models), "supportedFeatures", len(h.SupportedFeatures), "featureSource", h.FeatureSource,
		"unavailable", len(h.Unavailable))
	return h, nil
}

// openLibvirt connects to libvirt when discovery is not offline and needs
// it (want: an input is missing that libvirt could give). It returns the
// connection, nil when there is none, its URI, and why libvirt cannot help
// when it cannot, for the gaps. Only the end of ctx is an error.
func (d *Discoverer) openLibvirt(ctx context.Context, h *HostCPU, want bool) (conn Conn, uri, libvirtReason string, err error) {
	if h.Offline {
		return nil, "", offlineReason, nil
	}
	if !want {
		return nil, "", "", nil
	}
	conn, uri, err = d.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", "", ctx.Err()
		}
		h.LibvirtUnreachable = err.Error()
		d.log.Info("libvirt unreachable; using cpuid and offline inputs only", "uri", d.opts.LibvirtURI, "err", err)
		return nil, "", "libvirt unreachable: " + err.Error(), nil
	}
	h.LibvirtURI = uri
	return conn, uri, "", nil
}

// closeLibvirt closes the connection openLibvirt opened; a failure is only
// logged, the snapshot being complete by then.
func (d *Discoverer) closeLibvirt(conn Conn, uri string) {
	if err := conn.Close(); err != nil {
		d.log.Info("closing the libvirt connection failed", "uri", uri, "err", err)
	}
}

// useDomainCapabilities fills the facts that come from the domain
// capabilities dc, or records them as gaps when there are none, and returns
// the virttype: dc's own when it names one, else virtType.
func (d *Discoverer) useDomainCapabilities(h *HostCPU, dc *DomainCapabilities, virtType, libvirtReason string) string {
	if dc == nil {
		reason := d.noLibvirtReason(libvirtReason, "domain capabilities file")
		h.addGap(FactModels, reason)
		h.addGap(FactHostModel, reason)
		h.addGap(FactLaunchSecurity, reason)
		return virtType
	}
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
	return virtType
}

// liveCapabilities asks libvirt for the host capabilities.
func (d *Discoverer) liveCapabilities(ctx context.Context, conn Conn, uri string) (*Capabilities, error) {
	t := time.Now()
	s, err := conn.Capabilities(ctx)
	d.log.Debug("libvirt call", "call", "GetCapabilities", "uri", uri, "duration", time.Since(t), "err", err)
	if err != nil {
		return nil, err
	}
	return ParseCapabilities([]byte(s))
}

// useCapabilities fills the facts that come from the host capabilities caps,
// or records them as gaps when there are none. The arch, when the domain
// capabilities did not give it, is caps's, else this machine's unless
// discovery is offline.
func (d *Discoverer) useCapabilities(h *HostCPU, caps *Capabilities, libvirtReason string) {
	if h.Arch == "" && caps != nil {
		h.Arch = caps.Arch
	}
	if h.Arch == "" && !h.Offline {
		h.Arch = libvirtArch(runtime.GOARCH)
	}
	if caps == nil {
		reason := d.noLibvirtReason(libvirtReason, "capabilities file")
		h.addGap(FactTSC, reason)
		h.addGap(FactMachineTypes, reason)
		return
	}
	h.TSC = caps.TSC
	if h.TSC == nil {
		h.addGap(FactTSC, "the host capabilities have no tsc counter")
	}
	h.MachineTypes = caps.MachineTypes()
	if len(h.MachineTypes) == 0 {
		h.addGap(FactMachineTypes, "the host capabilities list no machine types")
	}
}

// pickVendor sets Vendor from the host model, else from cpuid.
func pickVendor(h *HostCPU) {
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
