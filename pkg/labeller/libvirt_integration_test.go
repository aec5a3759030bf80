//go:build cgo

package labeller_test

import (
	"context"
	"encoding/xml"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	hostcpulibvirt "github.com/node-agent/node-agent/pkg/hostcpu/libvirt"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/labeller"
)

// These tests run discovery and labelling against the real libvirt of this
// host, through the embedded QEMU driver (qemu:///embed?root=DIR), and
// compare them with what virsh prints for the same URI. They skip where
// libvirt is missing, unless NODE_AGENT_INTEGRATION=1 (as `make test` sets),
// where they fail instead. They also read this host's /dev/kvm and sysctls,
// and assert what the host offers: `make test` runs them once as the host is
// and once with /dev/kvm hidden (hack/without-kvm.sh).

const integrationEnv = "NODE_AGENT_INTEGRATION"

// requireLibvirt skips or fails the test when libvirt, its QEMU driver, QEMU
// or virsh is missing.
func requireLibvirt(t *testing.T) {
	t.Helper()
	var missing []string
	if _, err := exec.LookPath("virsh"); err != nil {
		missing = append(missing, "virsh (Debian package libvirt-clients)")
	}
	if m, _ := filepath.Glob("/usr/bin/qemu-system-*"); len(m) == 0 {
		missing = append(missing, "QEMU (qemu-system-x86)")
	}
	if m, _ := filepath.Glob("/usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so"); len(m) == 0 {
		if m, _ := filepath.Glob("/usr/lib*/libvirt/connection-driver/libvirt_driver_qemu.so"); len(m) == 0 {
			missing = append(missing, "libvirt's QEMU driver (libvirt-daemon-driver-qemu)")
		}
	}
	// The test driver is built into libvirt.so.0: connecting to it proves
	// the library loads.
	if c, err := hostcpulibvirt.Dial(nil)(context.Background(), "test:///default"); err != nil {
		missing = append(missing, fmt.Sprintf("libvirt.so.0 (libvirt0): %v", err))
	} else {
		_ = c.Close()
	}
	if len(missing) == 0 {
		return
	}
	msg := "missing " + strings.Join(missing, ", ") + "; run hack/install-deps.sh libvirt"
	if os.Getenv(integrationEnv) == "1" {
		t.Fatalf("%s=1 but %s", integrationEnv, msg)
	}
	t.Skip(msg)
}

// One process can open only one embedded root, and keeps it open until it
// exits; no other process can open it meanwhile. So the root is made once,
// virsh runs before discovery opens it, and both results are kept for every
// repetition of the test (-count).
var embedded struct {
	once  sync.Once
	root  string
	virsh virshOutput
	h     *hostcpu.HostCPU
	took  time.Duration
	log   syncBuffer
	err   error
}

type virshOutput struct {
	domcaps, baseline, penryn, caps []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if embedded.root != "" {
		_ = os.RemoveAll(embedded.root)
	}
	os.Exit(code)
}

// syncBuffer collects log records; libvirt's event loop may log from its own
// goroutine, after the test that started it has ended, so the log never goes
// to a *testing.T directly.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func discoverEmbedded(t *testing.T) (virshOutput, *hostcpu.HostCPU) {
	embedded.once.Do(func() {
		root, err := os.MkdirTemp("", "node-agent-embed-")
		if err != nil {
			embedded.err = err
			return
		}
		embedded.root = root
		uri := hostcpu.EmbeddedURI(root)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		virsh := func(args ...string) ([]byte, error) {
			cmd := exec.CommandContext(ctx, "virsh", append([]string{"-q", "-c", uri}, args...)...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("virsh %s: %v: %s", strings.Join(args, " "), err, stderr.String())
			}
			return out, nil
		}
		write := func(name string, data []byte) string {
			p := filepath.Join(root, name)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				embedded.err = err
			}
			return p
		}
		var v virshOutput
		// As KubeVirt's node-labeller.sh asks: the host's arch, q35.
		if v.domcaps, err = virsh("domcapabilities", "--arch", "x86_64", "--machine", "q35", "--virttype", "qemu"); err != nil {
			embedded.err = err
			return
		}
		// The pipeline KubeVirt runs: virsh domcapabilities | virsh hypervisor-cpu-baseline --features.
		dcFile := write("domcaps.xml", v.domcaps)
		if v.baseline, err = virsh("hypervisor-cpu-baseline", "--features", "--arch", "x86_64", "--machine", "q35", "--virttype", "qemu", dcFile); err != nil {
			embedded.err = err
			return
		}
		penrynFile := write("penryn.xml", []byte(`<cpu mode='custom' match='exact'><model fallback='forbid'>Penryn</model></cpu>`))
		if v.penryn, err = virsh("hypervisor-cpu-baseline", "--features", "--arch", "x86_64", "--machine", "q35", "--virttype", "qemu", penrynFile); err != nil {
			embedded.err = err
			return
		}
		if v.caps, err = virsh("capabilities"); err != nil {
			embedded.err = err
			return
		}
		embedded.virsh = v

		d, err := hostcpu.NewDiscoverer(hostcpu.Options{
			LibvirtURI:   uri,
			VirtType:     hostcpu.VirtTypeQEMU,
			ExpandModels: []string{"Penryn"},
			Dial:         hostcpulibvirt.Dial(nil),
			Logger:       slog.New(slog.NewTextHandler(&embedded.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		if err != nil {
			embedded.err = err
			return
		}
		start := time.Now()
		embedded.h, embedded.err = d.Discover(ctx)
		embedded.took = time.Since(start)
	})
	t.Logf("discovery log:\n%s", embedded.log.String())
	if embedded.err != nil {
		t.Fatal(embedded.err)
	}
	t.Logf("discovery through %s took %s", hostcpu.EmbeddedURI(embedded.root), embedded.took)
	return embedded.virsh, embedded.h
}

// What the test reads from virsh's output, with its own minimal structs so
// that a bug in the package's parsers cannot hide itself.
type vDomcaps struct {
	Modes []struct {
		Name   string `xml:"name,attr"`
		Vendor string `xml:"vendor"`
		Models []struct {
			Name   string `xml:",chardata"`
			Usable string `xml:"usable,attr"`
		} `xml:"model"`
		Features []vFeature `xml:"feature"`
	} `xml:"cpu>mode"`
	SEV *struct {
		Supported   string `xml:"supported,attr"`
		MaxESGuests int    `xml:"maxESGuests"`
	} `xml:"features>sev"`
	TDX *struct {
		Supported string `xml:"supported,attr"`
	} `xml:"features>tdx"`
}

type vFeature struct {
	Name   string `xml:"name,attr"`
	Policy string `xml:"policy,attr"`
}

type vCPU struct {
	Features []vFeature `xml:"feature"`
}

type vCounter struct {
	Name      string `xml:"name,attr"`
	Frequency string `xml:"frequency,attr"`
	Scaling   string `xml:"scaling,attr"`
}

type vCaps struct {
	Host struct {
		Arch     string     `xml:"cpu>arch"`
		Counters []vCounter `xml:"cpu>counter"`
	} `xml:"host"`
	Guests []struct {
		Arch struct {
			Name     string   `xml:"name,attr"`
			Machines []string `xml:"machine"`
		} `xml:"arch"`
	} `xml:"guest"`
}

func mustUnmarshal(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := xml.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

func featureNames(fs []vFeature, policy string) []string {
	var out []string
	for _, f := range fs {
		if policy == "" || f.Policy == policy {
			out = append(out, f.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// TestDiscoverAgreesWithVirsh is the first acceptance test, in Go:
// discovery through the embedded driver agrees exactly with virsh on the
// models, the host model and its required features, and the features minus
// Penryn, and so do the labels.
func TestDiscoverAgreesWithVirsh(t *testing.T) {
	requireLibvirt(t)
	if testing.Short() && os.Getenv(integrationEnv) != "1" {
		t.Skip("probes QEMU through libvirt (tens of seconds); skipped with -short")
	}
	v, h := discoverEmbedded(t)
	if h.FeatureSource != hostcpu.FeatureSourceLibvirt || h.VirtType != "qemu" {
		t.Errorf("feature source %s, virttype %s", h.FeatureSource, h.VirtType)
	}

	var dc vDomcaps
	mustUnmarshal(t, v.domcaps, &dc)
	var usable, known, all, hmReq, hmDis []string
	var hmName, hmVendor string
	for _, m := range dc.Modes {
		switch m.Name {
		case "custom":
			for _, md := range m.Models {
				all = append(all, md.Name)
				// KubeVirt v1.7+: known is any usable attribute,
				// usable is known but not usable='no'.
				if md.Usable != "" {
					known = append(known, md.Name)
				}
				if md.Usable != "" && md.Usable != "no" {
					usable = append(usable, md.Name)
				}
			}
		case "host-model":
			hmName, hmVendor = m.Models[0].Name, m.Vendor
			hmReq, hmDis = featureNames(m.Features, "require"), featureNames(m.Features, "disable")
		}
	}
	var bl, pen vCPU
	mustUnmarshal(t, v.baseline, &bl)
	mustUnmarshal(t, v.penryn, &pen)
	supported := featureNames(bl.Features, "require")
	penryn := featureNames(pen.Features, "")
	var caps vCaps
	mustUnmarshal(t, v.caps, &caps)
	// libvirt reports the TSC counter only where KVM runs (TCG has none);
	// whatever virsh says is the fact to agree with.
	virshTSC := slices.ContainsFunc(caps.Host.Counters, func(c vCounter) bool { return c.Name == "tsc" })
	var wantGaps []hostcpu.Fact
	if !virshTSC {
		wantGaps = append(wantGaps, hostcpu.FactTSC)
	}
	checkKVMFacts(t, h, wantGaps...)
	t.Logf("virsh capabilities: tsc counter %v", virshTSC)
	// Every guest's machines, as KubeVirt's getMachines (cmd/virt-handler).
	var machines []string
	for _, g := range caps.Guests {
		machines = append(machines, g.Arch.Machines...)
	}

	eq := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n discovery %v\n     virsh %v", what, got, want)
		}
	}
	var usableByAttr []string
	for _, m := range h.Models {
		if m.Usability == "yes" || m.Usability == "unknown" {
			usableByAttr = append(usableByAttr, m.Name)
		}
	}
	eq("usable models", sorted(usableByAttr), sorted(usable))
	eq("all models", h.AllModels(), sorted(all))
	eq("host model", []string{h.HostModel.Name, h.HostModel.Vendor}, []string{hmName, hmVendor})
	eq("host-model required features", h.HostModel.Required, hmReq)
	eq("host-model disabled features", h.HostModel.Disabled, hmDis)
	eq("hypervisor-supported features", h.SupportedFeatures, supported)
	eq("Penryn features", h.ModelFeatures["Penryn"], penryn)
	eq("machine types", h.MachineTypes, sorted(machines))
	for _, c := range caps.Host.Counters {
		if c.Name == "tsc" {
			eq("tsc", []string{fmt.Sprint(h.TSC.Frequency), fmt.Sprint(h.TSC.Scalable)}, []string{c.Frequency, fmt.Sprint(c.Scaling == "yes")})
		}
	}

	// KubeVirt's own configuration: no minimum model, its obsolete list.
	res, err := labeller.Policy{}.Labels(h)
	if err != nil {
		t.Fatal(err)
	}
	// Everything is labelled, but the tsc labels where libvirt has no
	// counter and the hyperv family on a host without KVM.
	var wantOmitted []string
	if !virshTSC {
		wantOmitted = append(wantOmitted, kubevirtlabels.CPUTimerLabelPrefix)
	}
	if !hostKVM() {
		wantOmitted = append(wantOmitted, kubevirtlabels.HyperVLabelPrefix)
	}
	if len(res.Warnings) != 0 || !slices.Equal(res.OmittedPrefixes(), wantOmitted) {
		t.Errorf("warnings %v, omitted %v; want none, and omitted %v", res.Warnings, res.Omitted, wantOmitted)
	}
	obsolete := labeller.Policy{}
	notObsolete := func(models []string) []string {
		var out []string
		for _, m := range sorted(models) {
			if !obsolete.IsObsolete(m) {
				out = append(out, m)
			}
		}
		return out
	}
	family := func(labels map[string]string, prefix string) []string {
		var out []string
		for k := range labels {
			if n, ok := strings.CutPrefix(k, prefix); ok {
				out = append(out, n)
			}
		}
		return sorted(out)
	}
	eq("cpu-model labels", family(res.Labels, kubevirtlabels.CPUModelLabelPrefix), notObsolete(usable))
	eq("cpu-model-migration labels", family(res.Labels, kubevirtlabels.CPUModelMigrationLabelPrefix), notObsolete(known))
	if len(notObsolete(known)) == len(notObsolete(usable)) {
		t.Logf("every known model is usable on this host, so the two model families are the same here")
	}
	eq("host-model-cpu labels", family(res.Labels, kubevirtlabels.HostModelCPULabelPrefix), []string{hmName})
	eq("host-model-required-features labels", family(res.Labels, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix), hmReq)
	eq("cpu-feature labels", family(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix), supported)
	eq("cpu-vendor labels", family(res.Labels, kubevirtlabels.CPUVendorLabelPrefix), []string{hmVendor})
	eq("machine-type labels", family(res.Labels, kubevirtlabels.MachineTypeLabelPrefix), sorted(machines))
	var security []string
	if dc.SEV != nil && dc.SEV.Supported == "yes" {
		security = append(security, kubevirtlabels.SEVLabel)
		if dc.SEV.MaxESGuests > 0 {
			security = append(security, kubevirtlabels.SEVESLabel)
		}
	}
	if dc.TDX != nil && dc.TDX.Supported == "yes" {
		security = append(security, kubevirtlabels.TDXLabel)
	}
	var gotSecurity []string
	for _, k := range []string{kubevirtlabels.SEVLabel, kubevirtlabels.SEVESLabel, kubevirtlabels.SEVSNPLabel, kubevirtlabels.TDXLabel, kubevirtlabels.S390PVLabel} {
		if _, ok := res.Labels[k]; ok {
			gotSecurity = append(gotSecurity, k)
		}
	}
	eq("launch-security labels", gotSecurity, security)
	// KubeVirt runs sysctl and compares with -1.
	out, err := exec.Command("sysctl", "-n", "kernel.sched_rt_runtime_us").Output()
	if err != nil {
		t.Fatalf("sysctl: %v", err)
	}
	_, realtime := res.Labels[kubevirtlabels.RealtimeLabel]
	eq("realtime label", realtime, strings.TrimSpace(string(out)) == "-1")

	// The default configuration subtracts Penryn from both feature families.
	withPenryn, err := labeller.Policy{MinCPUModel: labeller.DefaultMinCPUModel}.Labels(h)
	if err != nil {
		t.Fatal(err)
	}
	eq("cpu-feature labels minus Penryn", family(withPenryn.Labels, kubevirtlabels.CPUFeatureLabelPrefix), minus(supported, penryn))
	eq("host-model-required-features labels minus Penryn", family(withPenryn.Labels, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix), minus(hmReq, penryn))
	hv := family(res.Labels, kubevirtlabels.HyperVLabelPrefix)
	if hostKVM() {
		if !slices.Equal(hv, sorted(h.HyperV)) {
			t.Errorf("hyperv labels %v; the KVM device offers %v", hv, h.HyperV)
		}
	} else if o := omittedFor(res, kubevirtlabels.HyperVLabelPrefix); !strings.Contains(o, hostcpu.KVMDevicePath) {
		t.Errorf("no KVM here, and the hyperv omission says %q, not naming %s", o, hostcpu.KVMDevicePath)
	}
	t.Logf("hyperv.node.kubevirt.io labels from %s (KVM device: %v): %v", hostcpu.KVMDevicePath, hostKVM(), hv)

	// KubeVirt's own pipeline saves virsh's output to files and labels from
	// them; node-agent given the same files (--domcapabilities,
	// --supported-features) must label as it does live, apart from the
	// families those two files do not give.
	dir := t.TempDir()
	dcFile, sfFile := filepath.Join(dir, "virsh_domcapabilities.xml"), filepath.Join(dir, "supported_features.xml")
	for p, b := range map[string][]byte{dcFile: v.domcaps, sfFile: v.baseline} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d, err := hostcpu.NewDiscoverer(hostcpu.Options{DomainCapabilitiesFile: dcFile, SupportedFeaturesFile: sfFile, FallbackCPUMapDir: filepath.Join(dir, "absent")})
	if err != nil {
		t.Fatal(err)
	}
	ho, err := d.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	offline, err := labeller.Policy{}.Labels(ho)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]string{}
	for k, val := range res.Labels {
		if !strings.HasPrefix(k, kubevirtlabels.CPUTimerLabelPrefix) && !strings.HasPrefix(k, kubevirtlabels.MachineTypeLabelPrefix) &&
			!strings.HasPrefix(k, kubevirtlabels.HyperVLabelPrefix) && k != kubevirtlabels.RealtimeLabel {
			live[k] = val
		}
	}
	eq("labels from virsh's saved files (KubeVirt's pipeline) vs live", offline.Labels, live)
	t.Logf("%d labels: %d cpu-model, %d cpu-model-migration, %d cpu-feature (%d minus Penryn), %d host-model-required-features, %d machine-type, %d hyperv",
		len(res.Labels), len(family(res.Labels, kubevirtlabels.CPUModelLabelPrefix)), len(family(res.Labels, kubevirtlabels.CPUModelMigrationLabelPrefix)), len(family(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix)),
		len(family(withPenryn.Labels, kubevirtlabels.CPUFeatureLabelPrefix)),
		len(family(res.Labels, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix)), len(family(res.Labels, kubevirtlabels.MachineTypeLabelPrefix)), len(hv))
}

// TestDiscoverWithoutReachableLibvirt is the second acceptance test at
// the package level: with libvirt unreachable, discovery still succeeds, and
// the labels carry cpuid's features and vendor and say what was left out.
// It needs no libvirt daemon, only libvirt.so.0, and it reads this host's
// /dev/kvm, so -short skips it.
func TestDiscoverWithoutReachableLibvirt(t *testing.T) {
	if testing.Short() && os.Getenv(integrationEnv) != "1" {
		t.Skip("loads libvirt and reads this host's /dev/kvm; skipped with -short")
	}
	uri := "qemu+unix:///system?socket=" + filepath.Join(t.TempDir(), "absent.sock")
	d, err := hostcpu.NewDiscoverer(hostcpu.Options{LibvirtURI: uri, ExpandModels: []string{"Penryn"}, Dial: hostcpulibvirt.Dial(nil)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []hostcpu.Fact{hostcpu.FactModels, hostcpu.FactHostModel, hostcpu.FactSupportedFeatures, hostcpu.FactTSC, hostcpu.FactMachineTypes} {
		if reason, ok := h.Missing(f); !ok || !strings.Contains(reason, "libvirt unreachable") {
			t.Errorf("%s: missing %v, reason %q", f, ok, reason)
		}
	}
	if h.FeatureSource != hostcpu.FeatureSourceCPUID {
		t.Errorf("feature source %s", h.FeatureSource)
	}
	res, err := labeller.Policy{}.Labels(h)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOARCH == "amd64" {
		var vendor, features, local int
		for k := range res.Labels {
			switch {
			case strings.HasPrefix(k, kubevirtlabels.CPUVendorLabelPrefix):
				vendor++
			case strings.HasPrefix(k, kubevirtlabels.CPUFeatureLabelPrefix):
				features++
			case strings.HasPrefix(k, kubevirtlabels.HyperVLabelPrefix), k == kubevirtlabels.RealtimeLabel:
				local++ // from /dev/kvm and the sysctl, not libvirt
			}
		}
		if vendor != 1 || features == 0 || vendor+features+local != len(res.Labels) {
			t.Errorf("labels %v; want one cpu-vendor label, cpu-feature labels and the kernel's hyperv and realtime labels only", res.Labels)
		}
		t.Logf("without libvirt: %d labels (%d cpu-feature)", len(res.Labels), features)
	}
	// The 7 libvirt-only families and the 5 launch-security keys, and
	// without KVM the hyperv family too, for its own reason.
	checkKVMFacts(t, h)
	wantOmitted := 12
	if !hostKVM() {
		wantOmitted++
	}
	if got := len(res.OmittedPrefixes()); got != wantOmitted {
		t.Errorf("omitted %v; want the 7 libvirt-only families and the 5 launch-security keys (and hyperv without KVM: KVM device %v)", res.Omitted, hostKVM())
	}
	for _, o := range res.Omitted {
		if slices.Contains(o.Keys, kubevirtlabels.HyperVLabelPrefix+"*") {
			if !strings.Contains(o.Reason, hostcpu.KVMDevicePath) {
				t.Errorf("omission %q does not name %s", o, hostcpu.KVMDevicePath)
			}
			continue
		}
		if !strings.Contains(o.Reason, uri) {
			t.Errorf("omission %q does not name the URI tried", o)
		}
	}
}

// hostKVM reports whether this host has a KVM device: the fact the tests that
// run the real discovery hold it to.
func hostKVM() bool {
	return hostcpu.KVMDevice(hostcpu.KVMDevicePath)
}

// checkKVMFacts asserts what real discovery says of this host's KVM: with a
// KVM device the Hyper-V enlightenments are known (perhaps none); without
// one, that fact is missing and its reason names the device. Other facts may
// be missing only when libvirt was unreachable, or when they are in
// libvirtGaps (what this host's libvirt itself does not report).
func checkKVMFacts(t *testing.T, h *hostcpu.HostCPU, libvirtGaps ...hostcpu.Fact) {
	t.Helper()
	reason, missing := h.Missing(hostcpu.FactHyperV)
	if hostKVM() {
		if missing || h.HyperV == nil {
			t.Errorf("%s is a KVM device, yet the enlightenments are unknown: %q", hostcpu.KVMDevicePath, reason)
		}
		t.Logf("KVM device at %s: %d Hyper-V enlightenments %v", hostcpu.KVMDevicePath, len(h.HyperV), h.HyperV)
	} else {
		if !missing || !strings.Contains(reason, hostcpu.KVMDevicePath) || h.HyperV != nil {
			t.Errorf("no KVM device at %s, yet hyper-v is %v (missing %v: %q); want it missing, naming the device", hostcpu.KVMDevicePath, h.HyperV, missing, reason)
		}
		t.Logf("no KVM device at %s: %s", hostcpu.KVMDevicePath, reason)
	}
	for _, g := range h.Unavailable {
		switch g.Fact {
		case hostcpu.FactHyperV:
		case hostcpu.FactModels, hostcpu.FactHostModel, hostcpu.FactSupportedFeatures, hostcpu.FactModelFeatures,
			hostcpu.FactTSC, hostcpu.FactMachineTypes, hostcpu.FactLaunchSecurity, hostcpu.FactEmulatedArches:
			if h.LibvirtUnreachable == "" && !slices.Contains(libvirtGaps, g.Fact) {
				t.Errorf("libvirt answered, yet %s is missing: %s", g.Fact, g.Reason)
			}
		default:
			t.Errorf("%s missing: %s", g.Fact, g.Reason)
		}
	}
}

// omittedFor returns the reason the labels under key were left out, or "".
func omittedFor(res *labeller.Result, key string) string {
	for _, o := range res.Omitted {
		if slices.Contains(o.Keys, key+"*") || slices.Contains(o.Keys, key) {
			return o.Reason
		}
	}
	return ""
}
