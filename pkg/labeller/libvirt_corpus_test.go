package labeller

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// libvirtCorpus holds domain capabilities that libvirt's test suite keeps
// from real hosts, one per QEMU release, and the cpu_map definitions of their
// host models (see its README). cmd/node-agent's TestLabelsCorpus pins
// `node-agent labels` on each of them with golden files; the tests here check
// the labels against KubeVirt's rules and libvirt's own expansion.
const libvirtCorpus = "testdata/libvirt"

// corpusHost is what a capture says about its host, read by hand from the
// file, so that a wrong golden file cannot pass for the truth.
type corpusHost struct {
	arch, hostModel, vendor string
	// security are the launch-security labels the host gets.
	security []string
	// usable and known count the cpu-model and cpu-model-migration labels
	// under KubeVirt's default obsolete list.
	usable, known int
}

var libvirtCorpusHosts = map[string]corpusHost{
	// QEMU 9.1, the QEMU of KubeVirt v1.7: an AMD EPYC of the Rome
	// generation, without SEV.
	"qemu_9.1.0-q35.x86_64.xml": {arch: "x86_64", hostModel: "EPYC-Rome", vendor: "AMD", usable: 16, known: 112},
	// QEMU 10.0, Debian trixie's: an AMD EPYC of the Genoa generation
	// offering SEV, SEV-ES and SEV-SNP.
	"qemu_10.0.0-q35.x86_64+amdsev.xml": {arch: "x86_64", hostModel: "EPYC-Genoa", vendor: "AMD", security: []string{kubevirtlabels.SEVLabel, kubevirtlabels.SEVESLabel, kubevirtlabels.SEVSNPLabel}, usable: 58, known: 118},
	// QEMU 10.1, the QEMU of KubeVirt v1.8 and v1.9: an Intel Xeon of the
	// Granite Rapids generation offering TDX.
	"qemu_10.1.0-q35.x86_64+inteltdx.xml": {arch: "x86_64", hostModel: "GraniteRapids", vendor: "Intel", security: []string{kubevirtlabels.TDXLabel}, usable: 73, known: 113},
	// QEMU 10.1 on an IBM z17, with Secure Execution; s390x names no vendor.
	"qemu_10.1.0.s390x.xml": {arch: "s390x", hostModel: "gen17a-base", vendor: "IBM", security: []string{kubevirtlabels.S390PVLabel}, usable: 48, known: 82},
	// QEMU 10.0 on aarch64: no host-model mode, every model usable='unknown';
	// KubeVirt computes no CPU family on arm64, and neither does node-agent.
	"qemu_10.0.0-virt.aarch64.xml": {arch: "aarch64"},
}

// TestLibvirtCorpusKubeVirtParity runs node-agent under KubeVirt's settings on
// every capture and compares each label with KubeVirt's rules applied to the
// same file (kubevirtRules). cpu-feature comes from hypervisor-cpu-baseline in
// KubeVirt's pipeline, which no capture holds, so both leave it out here;
// TestLibvirtCorpusHostModelExpansion checks it.
func TestLibvirtCorpusKubeVirtParity(t *testing.T) {
	for _, name := range corpusCaptures(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(libvirtCorpus, name)
			h := discover(t, offline{domcaps: path})
			res := mustLabels(t, Policy{}, h)
			diffLabels(t, res.Labels, kubevirtRules(t, path, ""))

			host, ok := libvirtCorpusHosts[name]
			if !ok {
				t.Fatalf("%s has no entry in libvirtCorpusHosts", name)
			}
			if h.Arch != host.arch {
				t.Errorf("arch %q; want %q", h.Arch, host.arch)
			}
			var hostModel, vendor []string
			if host.hostModel != "" {
				hostModel, vendor = []string{host.hostModel}, []string{host.vendor}
			}
			for family, want := range map[string][]string{kubevirtlabels.HostModelCPULabelPrefix: hostModel, kubevirtlabels.CPUVendorLabelPrefix: vendor} {
				if got := familyValues(res.Labels, family); !slices.Equal(got, want) {
					t.Errorf("%s: %v; want %v", family, got, want)
				}
			}
			var security []string
			for _, k := range []string{kubevirtlabels.SEVLabel, kubevirtlabels.SEVESLabel, kubevirtlabels.SEVSNPLabel, kubevirtlabels.TDXLabel, kubevirtlabels.S390PVLabel} {
				if res.Labels[k] == "true" {
					security = append(security, k)
				}
			}
			if !slices.Equal(security, host.security) {
				t.Errorf("launch security %v; want %v", security, host.security)
			}
			usable, known := len(familyValues(res.Labels, kubevirtlabels.CPUModelLabelPrefix)), len(familyValues(res.Labels, kubevirtlabels.CPUModelMigrationLabelPrefix))
			if usable != host.usable || known != host.known {
				t.Errorf("%d cpu-model and %d cpu-model-migration labels; want %d and %d", usable, known, host.usable, host.known)
			}
			if _, ok := res.Labels[kubevirtlabels.ObsoleteHostModelLabel]; ok {
				t.Errorf("host model %s marked obsolete", host.hostModel)
			}
			// Offline, the families whose source is another file or this
			// machine are left out, never guessed; on arm64 cpu-feature is
			// not computed at all, as in KubeVirt.
			want := []string{kubevirtlabels.CPUFeatureLabelPrefix, kubevirtlabels.CPUTimerLabelPrefix, kubevirtlabels.MachineTypeLabelPrefix, kubevirtlabels.HyperVLabelPrefix, kubevirtlabels.RealtimeLabel}
			if host.arch == "aarch64" {
				want = want[1:]
			}
			if got := slices.Sorted(slices.Values(res.OmittedPrefixes())); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Errorf("left out %v; want %v", got, want)
			}
		})
	}
}

// TestLibvirtCorpusHostModelExpansion compares the cpu-feature labels that
// node-agent computes offline from libvirt's cpu_map with the host-model
// expansion libvirt itself printed for the same host (the host-model features
// of tests/domaincapsdata/<capture>-expanded.xml, `virsh domcapabilities
// --expand-cpu-features`, saved under expanded/). That expansion is what
// KubeVirt's hypervisor-cpu-baseline --features gives the node, so it is the
// cpu-feature family KubeVirt writes.
func TestLibvirtCorpusHostModelExpansion(t *testing.T) {
	tests := []struct {
		capture string
		// missing and extra are the known differences, each explained.
		missing, extra []string
	}{
		{capture: "qemu_10.0.0-q35.x86_64+amdsev.xml"},
		{
			capture: "qemu_10.1.0-q35.x86_64+inteltdx.xml",
			// The expanded capture comes from a later libvirt than the
			// stored one, whose host model does not require its-no and
			// vmx-any-errcode yet (the newer captures of the same host
			// do); and libvirt's expansion leaves out two VMX features
			// that its GraniteRapids definition lists. Both are why a
			// live libvirt, not a cpu_map, is the source node-agent uses
			// on a node.
			missing: []string{"its-no", "vmx-any-errcode"},
			extra:   []string{"vmx-ept-wb", "vmx-invvpid-single-context"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.capture, func(t *testing.T) {
			h := discover(t, offline{domcaps: filepath.Join(libvirtCorpus, tt.capture), cpuMap: filepath.Join(libvirtCorpus, "cpu_map")})
			res := mustLabels(t, Policy{}, h)
			got := familyValues(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix)
			b, err := os.ReadFile(filepath.Join(libvirtCorpus, "expanded", strings.TrimSuffix(tt.capture, ".xml")+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Fields(string(b))
			missing, extra := setDiff(want, got), setDiff(got, want)
			if !slices.Equal(missing, tt.missing) || !slices.Equal(extra, tt.extra) {
				t.Errorf("%d cpu-feature labels, libvirt expands %d: missing %v (want %v), extra %v (want %v)", len(got), len(want), missing, tt.missing, extra, tt.extra)
			}
		})
	}
}

// corpusCaptures lists the domain capabilities files of the corpus, and fails
// when one has no expectations here.
func corpusCaptures(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(libvirtCorpus, "*.xml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	if want := slices.Sorted(maps.Keys(libvirtCorpusHosts)); !slices.Equal(names, want) {
		t.Fatalf("captures %v; libvirtCorpusHosts describes %v", names, want)
	}
	return names
}

// diffLabels reports every label where got and want differ.
func diffLabels(t *testing.T, got, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("KubeVirt labels %s=%q; node-agent %q", k, want[k], got[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("node-agent labels %s=%q; KubeVirt does not", k, got[k])
		}
	}
}

// setDiff returns the sorted elements of a that b lacks.
func setDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}
