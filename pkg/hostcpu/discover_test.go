package hostcpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeConn answers from the captured testdata, like the libvirt of the host
// that produced it.
type fakeConn struct {
	t       *testing.T
	mu      sync.Mutex
	calls   []string
	version uint64            // LibVersion's answer; 0 is an error
	domcaps map[string]string // by virttype; absent means an error
	// flagged answers the host's domain capabilities asked with flags, by
	// their virsh options joined with spaces; absent means an error.
	flagged map[string]string
	// cross answers other architectures' domain capabilities, by arch;
	// absent means no emulator.
	cross   map[string]string
	capsErr error
	closed  bool
}

func newFakeConn(t *testing.T) *fakeConn {
	return &fakeConn{t: t, version: 9_000_000, domcaps: map[string]string{
		"qemu": string(readTestdata(t, "domcapabilities-qemu.xml")),
		"kvm":  string(readTestdata(t, "domcapabilities-kvm.xml")),
	}}
}

func (f *fakeConn) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeConn) LibVersion(context.Context) (uint64, error) {
	f.record("version")
	if f.version == 0 {
		return 0, errors.New("this function is not supported by the connection driver: virConnectGetLibVersion")
	}
	return f.version, nil
}

// DomainCapabilities answers for the host (x86_64, q35, as KubeVirt asks)
// from domcaps or flagged, and for another arch from cross.
func (f *fakeConn) DomainCapabilities(_ context.Context, tg Target, fl DomCapsFlags) (string, error) {
	if tg.Machine != KubeVirtMachine(tg.Arch) {
		f.t.Errorf("domain capabilities asked for arch %q with machine %q; want KubeVirt's %q", tg.Arch, tg.Machine, KubeVirtMachine(tg.Arch))
	}
	if tg.Arch != "x86_64" {
		f.record("domcaps " + tg.Arch + " " + tg.VirtType)
		if s, ok := f.cross[tg.Arch]; ok {
			return s, nil
		}
		return "", fmt.Errorf("invalid argument: unable to find any emulator to serve '%s' architecture", tg.Arch)
	}
	opts := strings.Join(fl.Options(), " ")
	f.record(strings.TrimSpace("domcaps " + tg.VirtType + " " + opts))
	if opts != "" {
		if s, ok := f.flagged[opts]; ok {
			return s, nil
		}
		return "", fmt.Errorf("invalid argument: unsupported flags (0x%x) in function qemuConnectGetDomainCapabilities", len(opts))
	}
	if s, ok := f.domcaps[tg.VirtType]; ok {
		return s, nil
	}
	return "", fmt.Errorf("invalid argument: KVM is not supported by '/usr/bin/qemu-system-x86_64' on this host")
}

func (f *fakeConn) Capabilities(context.Context) (string, error) {
	f.record("caps")
	if f.capsErr != nil {
		return "", f.capsErr
	}
	return string(readTestdata(f.t, "capabilities.xml")), nil
}

func (f *fakeConn) ExpandCPU(_ context.Context, tg Target, cpuXML string) (string, error) {
	c, err := ParseCPU([]byte(cpuXML))
	if err != nil {
		f.t.Errorf("ExpandCPU got unparsable XML %q: %v", cpuXML, err)
		return "", err
	}
	if tg.Arch != "x86_64" || tg.Machine != "q35" {
		f.t.Errorf("ExpandCPU asked for arch %q, machine %q; want x86_64, q35", tg.Arch, tg.Machine)
	}
	virtType := tg.VirtType
	f.record("expand " + c.Model + " " + virtType)
	switch {
	case c.Model == "Penryn" || c.Model == "Haswell":
		return string(readTestdata(f.t, "baseline-"+c.Model+"-qemu.xml")), nil
	case c.Model == "EPYC" && len(c.Features) > 0:
		return string(readTestdata(f.t, "baseline-host-model-qemu.xml")), nil
	case c.Model == "EPYC-Milan" && len(c.Features) > 0:
		return string(readTestdata(f.t, "baseline-host-model-kvm.xml")), nil
	}
	return "", fmt.Errorf("internal error: Unknown CPU model %s", c.Model)
}

func (f *fakeConn) Close() error {
	f.record("close")
	f.closed = true
	return nil
}

// fakeHyperV is what the fake /dev/kvm offers.
var fakeHyperV = []string{"base", "time", "vpindex"}

var fakeCPUID = CPUID{
	VendorString: "GenuineIntel", Vendor: "Intel", Brand: "Test CPU", Family: 6, Model: 85,
	Features: []string{"avx", "avx2", "cx8", "fpu", "pni", "sse2", "sse4.1", "sse4.2"},
}

type discoverCase struct {
	opts    Options
	dialed  []string
	dialErr error
	conn    *fakeConn
}

// discover runs Discover with fakes for every world-touching part that opts
// leaves nil.
func (c *discoverCase) discover(t *testing.T) (*HostCPU, error) {
	t.Helper()
	o := c.opts
	if o.Arch == "" {
		o.Arch = "x86_64"
	}
	if o.Dial == nil {
		o.Dial = func(ctx context.Context, uri string) (Conn, error) {
			c.dialed = append(c.dialed, uri)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if c.dialErr != nil || c.conn == nil {
				return nil, cmpErr(c.dialErr, "Failed to connect socket to '/var/run/libvirt/libvirt-sock': No such file or directory")
			}
			return c.conn, nil
		}
	}
	if o.ReadCPUID == nil {
		o.ReadCPUID = func() CPUID { return fakeCPUID }
	}
	if o.KVMAvailable == nil {
		o.KVMAvailable = func() bool { return false }
	}
	// The kernel's probes are faked too: a unit test never reads the
	// host's /dev/kvm or sysctls, whose answers differ between machines.
	if o.HyperV == nil {
		o.HyperV = func() ([]string, error) { return slices.Clone(fakeHyperV), nil }
	}
	if o.Realtime == nil {
		o.Realtime = func() (bool, error) { return false, nil }
	}
	if o.FallbackCPUMapDir == "" {
		o.FallbackCPUMapDir = filepath.Join(t.TempDir(), "no-cpu-map")
	}
	d, err := NewDiscoverer(o)
	if err != nil {
		t.Fatal(err)
	}
	return d.Discover(context.Background())
}

func cmpErr(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

func TestDiscoverLive(t *testing.T) {
	c := &discoverCase{conn: newFakeConn(t), opts: Options{LibvirtURI: "qemu:///test", ExpandModels: []string{"Penryn"}}}
	h, err := c.discover(t)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := []string{"version", "domcaps qemu", "caps", "domcaps aarch64 qemu", "expand EPYC qemu", "expand Penryn qemu", "close"}
	if !reflect.DeepEqual(c.conn.calls, wantCalls) {
		t.Errorf("libvirt calls = %v; want %v", c.conn.calls, wantCalls)
	}
	if !reflect.DeepEqual(c.dialed, []string{"qemu:///test"}) {
		t.Errorf("dialed %v", c.dialed)
	}
	if len(h.Unavailable) != 0 || h.LibvirtURI != "qemu:///test" || h.LibvirtUnreachable != "" {
		t.Errorf("unavailable = %v, libvirt %q %q; want none, the test URI", h.Unavailable, h.LibvirtURI, h.LibvirtUnreachable)
	}
	if h.Arch != "x86_64" || h.VirtType != "qemu" || h.Vendor != "AMD" {
		t.Errorf("arch, virttype, vendor = %s, %s, %s", h.Arch, h.VirtType, h.Vendor)
	}
	if len(h.Models) != 53 || h.HostModel.Name != "EPYC" {
		t.Errorf("%d models, host model %+v", len(h.Models), h.HostModel)
	}
	want := mustParseCPU(t, "baseline-host-model-qemu.xml").FeaturesWithPolicy("require")
	if !reflect.DeepEqual(h.SupportedFeatures, want) || h.FeatureSource != FeatureSourceLibvirt {
		t.Errorf("supported features (%s) = %v; want %v", h.FeatureSource, h.SupportedFeatures, want)
	}
	if f, ok := h.FeaturesOf("Penryn"); !ok || len(f) != 29 {
		t.Errorf("Penryn features = %v", f)
	}
	if h.TSC == nil || h.TSC.Frequency != 2445426000 || len(h.MachineTypes) != 60 {
		t.Errorf("tsc %+v, %d machine types", h.TSC, len(h.MachineTypes))
	}
	lv := h.Sources[1]
	if lv.Kind != "libvirt" || lv.Detail != "qemu:///test" || len(lv.Provided) != 5 {
		t.Errorf("libvirt source = %+v", lv)
	}
	if !reflect.DeepEqual(h.HyperV, fakeHyperV) {
		t.Errorf("hyper-v %v; want the fake /dev/kvm's %v", h.HyperV, fakeHyperV)
	}
	if h.LibvirtVersion != "9.0.0" || h.DomCapsFlags != nil || h.EmulatedArches == nil || len(h.EmulatedArches) != 0 {
		t.Errorf("libvirt %q, flags %v, emulated %#v; want 9.0.0, none, an empty list", h.LibvirtVersion, h.DomCapsFlags, h.EmulatedArches)
	}
}

// TestDiscoverExpandFlags follows KubeVirt's node-labeller.sh since
// kubevirt/kubevirt ffa4593: the labelled domain capabilities are asked with
// --expand-cpu-features where libvirt has it (12.2), and the host model
// expanded into cpu-feature comes from domain capabilities asked with
// --expand-cpu-features --supported-cpu-features (12.5). No libvirt this
// project's machines run has them, so the fake plays a newer one: with
// --expand-cpu-features the host model gains the features its model implies
// (fpu here); with both flags it is another host model (EPYC-Milan), whose
// expansion the fake knows.
func TestDiscoverExpandFlags(t *testing.T) {
	qemuDoc := string(readTestdata(t, "domcapabilities-qemu.xml"))
	expanded := strings.Replace(qemuDoc, "<vendor>AMD</vendor>", "<vendor>AMD</vendor>\n      <feature policy='require' name='fpu'/>", 1)
	supported := string(readTestdata(t, "domcapabilities-kvm.xml"))
	const expand, both = "--expand-cpu-features", "--expand-cpu-features --supported-cpu-features"
	tests := []struct {
		name      string
		version   uint64
		refuse    bool // the daemon refuses the flags its version promises
		wantCalls []string
		wantFlags []string
		wantFPU   bool   // the host model's required features hold fpu
		wantHost  string // the baseline the supported features come from
	}{
		{name: "libvirt 11.3", version: 11_003_000,
			wantCalls: []string{"version", "domcaps qemu", "caps", "domcaps aarch64 qemu", "expand EPYC qemu", "close"}, wantHost: "qemu"},
		{name: "version unknown", version: 0,
			wantCalls: []string{"version", "domcaps qemu", "caps", "domcaps aarch64 qemu", "expand EPYC qemu", "close"}, wantHost: "qemu"},
		{name: "libvirt 12.2", version: 12_002_000,
			wantCalls: []string{"version", "domcaps qemu " + expand, "caps", "domcaps aarch64 qemu", "expand EPYC qemu", "close"},
			wantFlags: []string{expand}, wantFPU: true, wantHost: "qemu"},
		{name: "libvirt 12.5", version: 12_005_000,
			wantCalls: []string{"version", "domcaps qemu " + expand, "caps", "domcaps aarch64 qemu", "domcaps qemu " + both, "expand EPYC-Milan qemu", "close"},
			wantFlags: []string{expand}, wantFPU: true, wantHost: "kvm"},
		{name: "flags refused", version: 12_005_000, refuse: true,
			wantCalls: []string{"version", "domcaps qemu " + expand, "domcaps qemu", "caps", "domcaps aarch64 qemu", "expand EPYC qemu", "close"}, wantHost: "qemu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := newFakeConn(t)
			conn.version = tt.version
			if !tt.refuse {
				conn.flagged = map[string]string{expand: expanded, both: supported}
			}
			c := &discoverCase{conn: conn, opts: Options{LibvirtURI: "qemu:///test", VirtType: VirtTypeQEMU}}
			h, err := c.discover(t)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(conn.calls, tt.wantCalls) {
				t.Errorf("libvirt calls = %v; want %v", conn.calls, tt.wantCalls)
			}
			if !reflect.DeepEqual(h.DomCapsFlags, tt.wantFlags) {
				t.Errorf("flags %v; want %v", h.DomCapsFlags, tt.wantFlags)
			}
			if got := slices.Contains(h.HostModel.Required, "fpu"); got != tt.wantFPU {
				t.Errorf("host model requires fpu: %v; want %v", got, tt.wantFPU)
			}
			want := mustParseCPU(t, "baseline-host-model-"+tt.wantHost+".xml").FeaturesWithPolicy("require")
			if !reflect.DeepEqual(h.SupportedFeatures, want) || h.FeatureSource != FeatureSourceLibvirt {
				t.Errorf("supported features (%s) = %v; want those of baseline-host-model-%s.xml", h.FeatureSource, h.SupportedFeatures, tt.wantHost)
			}
			if len(h.Unavailable) != 0 {
				t.Errorf("unavailable %v", h.Unavailable)
			}
		})
	}
	if l, s := FlagsFor(12_004_009); !l.ExpandCPUFeatures || s.SupportedCPUFeatures || !s.ExpandCPUFeatures {
		t.Errorf("12.4.9: %+v, %+v; want expand for both, supported for neither", l, s)
	}
}

// TestDiscoverEmulatedArches: an architecture counts as emulated when libvirt
// gives domain capabilities for it that parse, as KubeVirt's
// loadCrossArchCapabilities has it; an error (no emulator) means not.
func TestDiscoverEmulatedArches(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cross map[string]string
		want  []string
	}{
		{name: "no emulator", want: []string{}},
		{name: "qemu-system-aarch64 installed", cross: map[string]string{"aarch64": "<domainCapabilities><arch>aarch64</arch><machine>virt-10.0</machine></domainCapabilities>"}, want: []string{"aarch64"}},
		{name: "an answer that does not parse", cross: map[string]string{"aarch64": "<capabilities/>"}, want: []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn := newFakeConn(t)
			conn.cross = tt.cross
			c := &discoverCase{conn: conn, opts: Options{LibvirtURI: "qemu:///test"}}
			h, err := c.discover(t)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h.EmulatedArches, tt.want) {
				t.Errorf("emulated %#v; want %#v", h.EmulatedArches, tt.want)
			}
		})
	}
	c := &discoverCase{}
	h, err := c.discover(t)
	if err != nil {
		t.Fatal(err)
	}
	if reason, missing := h.Missing(FactEmulatedArches); !missing || h.EmulatedArches != nil || !strings.Contains(reason, "libvirt unreachable") {
		t.Errorf("without libvirt: emulated %v, missing %v (%q); want unknown, because libvirt is unreachable", h.EmulatedArches, missing, reason)
	}
	for arch, want := range map[string][]Target{
		"x86_64":  {{Arch: "aarch64", Machine: "virt", VirtType: "qemu"}},
		"aarch64": {{Arch: "x86_64", Machine: "q35", VirtType: "qemu"}},
		"s390x":   nil,
	} {
		if got := crossArchTargets(arch); !reflect.DeepEqual(got, want) {
			t.Errorf("%s probes %v; want %v", arch, got, want)
		}
	}
}

// TestDiscoverKVMProbes covers both kinds of host: with /dev/kvm the
// enlightenments are known (an empty list is an answer too); without it the
// fact is missing and the reason names the device.
func TestDiscoverKVMProbes(t *testing.T) {
	noKVM := &os.PathError{Op: "open", Path: KVMDevicePath, Err: os.ErrNotExist}
	tests := []struct {
		name    string
		hyperV  func() ([]string, error)
		want    []string
		wantGap string
	}{
		{name: "with /dev/kvm", hyperV: func() ([]string, error) { return []string{"base", "synic"}, nil }, want: []string{"base", "synic"}},
		{name: "with /dev/kvm, no enlightenment", hyperV: func() ([]string, error) { return []string{}, nil }, want: []string{}},
		{name: "without /dev/kvm", hyperV: func() ([]string, error) { return nil, fmt.Errorf("opening %s: %w", KVMDevicePath, noKVM) }, wantGap: KVMDevicePath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &discoverCase{conn: newFakeConn(t), opts: Options{LibvirtURI: "qemu:///test", HyperV: tt.hyperV}}
			h, err := c.discover(t)
			if err != nil {
				t.Fatal(err)
			}
			reason, missing := h.Missing(FactHyperV)
			if tt.wantGap != "" {
				if !missing || !strings.Contains(reason, tt.wantGap) || h.HyperV != nil {
					t.Errorf("hyper-v %v, missing %v (%q); want it missing, naming %s", h.HyperV, missing, reason, tt.wantGap)
				}
				if len(h.Unavailable) != 1 {
					t.Errorf("unavailable %v; want only the hyper-v enlightenments", h.Unavailable)
				}
				return
			}
			if missing || !reflect.DeepEqual(h.HyperV, tt.want) || h.HyperV == nil {
				t.Errorf("hyper-v %#v, missing %v (%q); want %#v", h.HyperV, missing, reason, tt.want)
			}
		})
	}
}

func TestDiscoverVirtType(t *testing.T) {
	tests := []struct {
		name     string
		virtType string
		kvm      bool
		kvmFails bool
		wantAsk  []string
		wantType string
		wantGap  bool
	}{
		{name: "auto without /dev/kvm", virtType: "", kvm: false, wantAsk: []string{"qemu"}, wantType: "qemu"},
		{name: "auto with /dev/kvm", virtType: "auto", kvm: true, wantAsk: []string{"kvm"}, wantType: "kvm"},
		{name: "auto falls back to qemu", virtType: "auto", kvm: true, kvmFails: true, wantAsk: []string{"kvm", "qemu"}, wantType: "qemu"},
		{name: "explicit kvm does not fall back", virtType: "kvm", kvm: true, kvmFails: true, wantAsk: []string{"kvm"}, wantType: "kvm", wantGap: true},
		{name: "explicit qemu", virtType: "qemu", kvm: true, wantAsk: []string{"qemu"}, wantType: "qemu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := newFakeConn(t)
			if tt.kvmFails {
				delete(conn.domcaps, "kvm")
			}
			c := &discoverCase{conn: conn, opts: Options{LibvirtURI: "qemu:///test", VirtType: tt.virtType, KVMAvailable: func() bool { return tt.kvm }}}
			h, err := c.discover(t)
			if err != nil {
				t.Fatal(err)
			}
			var asked []string
			for _, call := range conn.calls {
				if vt, ok := strings.CutPrefix(call, "domcaps "); ok && !strings.HasPrefix(vt, "aarch64 ") {
					asked = append(asked, vt)
				}
			}
			if !reflect.DeepEqual(asked, tt.wantAsk) || h.VirtType != tt.wantType {
				t.Errorf("asked %v, virttype %s; want %v, %s", asked, h.VirtType, tt.wantAsk, tt.wantType)
			}
			reason, missing := h.Missing(FactModels)
			if missing != tt.wantGap {
				t.Errorf("models missing = %v (%s); want %v", missing, reason, tt.wantGap)
			}
			if tt.wantGap && !strings.Contains(reason, "KVM is not supported") {
				t.Errorf("reason %q does not carry libvirt's error", reason)
			}
		})
	}
}

func TestDiscoverAutoURI(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	c := &discoverCase{opts: Options{StateDir: state}}
	h, err := c.discover(t)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(state, "libvirt")
	want := []string{"qemu:///system", "qemu:///embed?root=" + root}
	if !reflect.DeepEqual(c.dialed, want) {
		t.Errorf("dialed %v; want %v", c.dialed, want)
	}
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("embedded root: %v, %v; want a 0700 directory", fi, err)
	}
	reason, _ := h.Missing(FactModels)
	for _, u := range want {
		if !strings.Contains(reason, u) {
			t.Errorf("reason %q does not name %s", reason, u)
		}
	}

	c = &discoverCase{}
	if _, err := c.discover(t); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.dialed, []string{"qemu:///system"}) {
		t.Errorf("without a state dir, dialed %v; want only the system URI", c.dialed)
	}
}

func TestDiscoverWithoutLibvirt(t *testing.T) {
	tests := []struct {
		name       string
		fallback   string
		expand     []string
		wantSource string
		wantGap    bool
	}{
		{name: "cpu_map fallback", fallback: "testdata/cpu_map", expand: []string{"Penryn", "Haswell"}, wantSource: "cpu_map"},
		{name: "built-in Penryn", expand: []string{"Penryn"}, wantSource: "builtin"},
		{name: "no source for Haswell", expand: []string{"Haswell"}, wantGap: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &discoverCase{opts: Options{LibvirtURI: "qemu:///system", FallbackCPUMapDir: tt.fallback, ExpandModels: tt.expand}}
			h, err := c.discover(t)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []Fact{FactModels, FactHostModel, FactSupportedFeatures, FactTSC, FactMachineTypes} {
				reason, missing := h.Missing(f)
				if !missing || !strings.Contains(reason, "libvirt unreachable: qemu:///system: Failed to connect socket") {
					t.Errorf("%s: missing %v, reason %q", f, missing, reason)
				}
			}
			if h.LibvirtURI != "" || !strings.Contains(h.LibvirtUnreachable, "Failed to connect socket") {
				t.Errorf("libvirt %q, unreachable %q", h.LibvirtURI, h.LibvirtUnreachable)
			}
			if h.Models != nil || h.HostModel != nil || h.TSC != nil || h.MachineTypes != nil {
				t.Errorf("libvirt facts set without libvirt: %+v", h)
			}
			if !reflect.DeepEqual(h.SupportedFeatures, fakeCPUID.Features) || h.FeatureSource != FeatureSourceCPUID {
				t.Errorf("features (%s) = %v; want cpuid's", h.FeatureSource, h.SupportedFeatures)
			}
			if h.Vendor != "Intel" || h.Arch == "" {
				t.Errorf("vendor %q, arch %q", h.Vendor, h.Arch)
			}
			_, gap := h.Missing(FactModelFeatures)
			if gap != tt.wantGap {
				t.Errorf("model features gap = %v; want %v (%v)", gap, tt.wantGap, h.Unavailable)
			}
			if !tt.wantGap {
				for _, m := range tt.expand {
					if _, ok := h.FeaturesOf(m); !ok {
						t.Errorf("%s not expanded", m)
					}
				}
				if !slices.ContainsFunc(h.Sources, func(s Source) bool { return s.Kind == tt.wantSource }) {
					t.Errorf("sources %+v lack %s", h.Sources, tt.wantSource)
				}
			}
		})
	}
}

func TestDiscoverOffline(t *testing.T) {
	for _, vt := range []string{"qemu", "kvm"} {
		t.Run(vt, func(t *testing.T) {
			c := &discoverCase{opts: Options{
				DomainCapabilitiesFile: "testdata/domcapabilities-" + vt + ".xml",
				CapabilitiesFile:       "testdata/capabilities.xml",
				CPUMapDir:              "testdata/cpu_map",
				ExpandModels:           []string{"Penryn"},
				KVMAvailable:           func() bool { return vt == "qemu" }, // the file wins
				Dial: func(context.Context, string) (Conn, error) {
					t.Error("libvirt dialled although every input is a file")
					return nil, errors.New("no")
				},
			}}
			h, err := c.discover(t)
			if err != nil {
				t.Fatal(err)
			}
			if h.LibvirtURI != "" || h.LibvirtUnreachable != "" {
				t.Errorf("libvirt %q, unreachable %q; want neither", h.LibvirtURI, h.LibvirtUnreachable)
			}
			// Offline, only this machine's own facts are missing, and
			// the other architectures no file describes.
			var gaps []Fact
			for _, g := range h.Unavailable {
				gaps = append(gaps, g.Fact)
			}
			if want := []Fact{FactCPUID, FactEmulatedArches, FactHyperV, FactRealtime}; !reflect.DeepEqual(gaps, want) || h.VirtType != vt || h.FeatureSource != FeatureSourceCPUMap {
				t.Errorf("unavailable %v (want %v), virttype %s, feature source %s", h.Unavailable, want, h.VirtType, h.FeatureSource)
			}
			if !h.Offline || len(h.CPUID.Features) != 0 || h.HyperV != nil || h.Realtime != nil {
				t.Errorf("offline %v, cpuid %v, hyper-v %v, realtime %v: local facts read although files describe the host", h.Offline, h.CPUID, h.HyperV, h.Realtime)
			}
			want := mustParseCPU(t, "baseline-host-model-"+vt+".xml").FeaturesWithPolicy("require")
			if !reflect.DeepEqual(h.SupportedFeatures, want) {
				t.Errorf("offline supported features differ from the live capture:\n got %v\nwant %v", h.SupportedFeatures, want)
			}
		})
	}
}

// A file for one input makes discovery offline: libvirt is not asked for the
// rest, since its answers would describe this machine, not the file's host.
func TestDiscoverPartlyOffline(t *testing.T) {
	conn := newFakeConn(t)
	c := &discoverCase{conn: conn, opts: Options{LibvirtURI: "qemu:///test", DomainCapabilitiesFile: "testdata/domcapabilities-qemu.xml", ExpandModels: []string{"Penryn"}}}
	h, err := c.discover(t)
	if err != nil {
		t.Fatal(err)
	}
	if len(conn.calls) != 0 {
		t.Errorf("libvirt calls = %v; want none", conn.calls)
	}
	for _, f := range []Fact{FactTSC, FactMachineTypes, FactCPUID} {
		if r, ok := h.Missing(f); !ok || !strings.Contains(r, "offline") {
			t.Errorf("%s: %q, %v; want missing because offline", f, r, ok)
		}
	}
	if h.Sources[0].Kind != "file" || h.Vendor != "AMD" {
		t.Errorf("sources = %+v, vendor %q", h.Sources, h.Vendor)
	}

	// libvirt's capabilities failing leaves only their facts out.
	conn = newFakeConn(t)
	conn.capsErr = errors.New("boom")
	c = &discoverCase{conn: conn, opts: Options{LibvirtURI: "qemu:///test"}}
	if h, err = c.discover(t); err != nil {
		t.Fatal(err)
	}
	for _, f := range []Fact{FactTSC, FactMachineTypes} {
		if r, ok := h.Missing(f); !ok || !strings.Contains(r, "boom") {
			t.Errorf("%s: %q, %v", f, r, ok)
		}
	}
	if _, ok := h.Missing(FactModels); ok || h.FeatureSource != FeatureSourceLibvirt {
		t.Errorf("models missing or features from %s", h.FeatureSource)
	}
}

func TestDiscoverExpandFailures(t *testing.T) {
	c := &discoverCase{conn: newFakeConn(t), opts: Options{LibvirtURI: "qemu:///test", ExpandModels: []string{"Nope", "Penryn"}}}
	h, err := c.discover(t)
	if err != nil {
		t.Fatal(err)
	}
	reason, ok := h.Missing(FactModelFeatures)
	if !ok || !strings.Contains(reason, "model Nope") || !strings.Contains(reason, "Unknown CPU model Nope") {
		t.Errorf("gap = %q, %v", reason, ok)
	}
	if _, ok := h.FeaturesOf("Penryn"); !ok {
		t.Error("Penryn not expanded")
	}
}

func TestDiscoverErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.xml")
	if err := os.WriteFile(bad, []byte("<capabilities/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "missing domcapabilities file", opts: Options{DomainCapabilitiesFile: "testdata/absent.xml"}, wantErr: "domain capabilities file: open testdata/absent.xml"},
		{name: "wrong domcapabilities file", opts: Options{DomainCapabilitiesFile: bad}, wantErr: "virsh domcapabilities"},
		{name: "wrong capabilities file", opts: Options{CapabilitiesFile: "testdata/domcapabilities-qemu.xml"}, wantErr: "virsh capabilities"},
		{name: "missing cpu_map", opts: Options{CPUMapDir: "testdata/absent"}, wantErr: "cpu_map testdata/absent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &discoverCase{opts: tt.opts}
			if _, err := c.discover(t); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v; want %q", err, tt.wantErr)
			}
		})
	}
	if _, err := NewDiscoverer(Options{VirtType: "xen", ExpandModels: []string{" "}}); err == nil ||
		!strings.Contains(err.Error(), `virt type "xen"`) || !strings.Contains(err.Error(), "empty name") {
		t.Errorf("validation err = %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := NewDiscoverer(Options{LibvirtURI: "qemu:///test", ReadCPUID: func() CPUID { return fakeCPUID },
		Dial: func(ctx context.Context, _ string) (Conn, error) { return nil, ctx.Err() }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Discover(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled discovery: err = %v", err)
	}
}

func TestWriteEmbedConfig(t *testing.T) {
	root := t.TempDir()
	if err := writeEmbedConfig(root); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "etc", "qemu.conf")
	got, err := os.ReadFile(path)
	if err != nil || string(got) != embedConfig {
		t.Fatalf("qemu.conf = %q, %v", got, err)
	}
	// An admin's own file is kept.
	if err := os.WriteFile(path, []byte("user = \"qemu\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeEmbedConfig(root); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "user = \"qemu\"\n" {
		t.Errorf("an existing qemu.conf was replaced: %q", got)
	}
}

// Offline, the installed cpu_map (the fallback) belongs to this machine's
// libvirt, not to the host the files describe: a newer host model may be
// missing from it or defined with other features. Only --cpu-map is used.
func TestDiscoverOfflineIgnoresFallbackCPUMap(t *testing.T) {
	c := &discoverCase{opts: Options{
		DomainCapabilitiesFile: "testdata/domcapabilities-qemu.xml",
		// It defines the file's host model (EPYC) and Penryn.
		FallbackCPUMapDir: "testdata/cpu_map",
		ExpandModels:      []string{"Penryn"},
	}}
	h, err := c.discover(t)
	if err != nil {
		t.Fatal(err)
	}
	if h.SupportedFeatures != nil || h.FeatureSource != "" {
		t.Errorf("supported features from %q: %v; want none offline without a cpu_map directory", h.FeatureSource, h.SupportedFeatures)
	}
	if r, ok := h.Missing(FactSupportedFeatures); !ok || !strings.Contains(r, "no supported-features file or cpu_map directory was given") {
		t.Errorf("supported features: missing %v, reason %q", ok, r)
	}
	if slices.ContainsFunc(h.Sources, func(s Source) bool { return s.Kind == FeatureSourceCPUMap }) {
		t.Errorf("sources %+v: the fallback cpu_map was read offline", h.Sources)
	}
	// The minimum model still comes from the definitions built into the
	// binary, which do not depend on this machine.
	if _, ok := h.FeaturesOf("Penryn"); !ok || !slices.ContainsFunc(h.Sources, func(s Source) bool { return s.Kind == "builtin" }) {
		t.Errorf("Penryn not from the built-in definitions: sources %+v", h.Sources)
	}
}
