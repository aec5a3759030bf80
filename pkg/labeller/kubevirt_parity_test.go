package labeller

import (
	"context"
	"encoding/xml"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// kubevirtData holds KubeVirt's own node-labeller test inputs (see its
// README for where they come from).
const kubevirtData = "testdata/kubevirt"

// parityCase is one run of node-agent on KubeVirt's files, with what
// KubeVirt's tests assert for the same files.
type parityCase struct {
	features, cpuMap string
	policy           Policy
	// want are exact label sets per family (prefix or single key), from
	// KubeVirt's test assertions; each case says which.
	want map[string][]string
}

// parityCases are the acceptance cases of the issue: KubeVirt's settings
// (no minimum model, its default obsolete list) on each of its test files.
// Families KubeVirt takes from elsewhere (tsc and machine types from the
// host capabilities, hyperv from /dev/kvm, realtime from sysctl) are not in
// these files, so node-agent leaves them out; see
// TestKubeVirtParityLeavesOutOnlyOtherSources.
var parityCases = map[string]parityCase{
	// capabilities_test.go "should return correct cpu models" (4 models, 4
	// features), "should return correct host cpu" (Skylake-Client-IBRS,
	// required ds, acpi, ss); node_labeller_test.go "should add usable cpu
	// model labels for the host cpu model", "... if all required features are
	// supported" (Penryn), "should add SEV label", "should add SEVES label";
	// "When Intel TDX is not supported" uses this file.
	"virsh_domcapabilities.xml": {
		features: "supported_features.xml",
		want: map[string][]string{
			kubevirtlabels.CPUModelLabelPrefix: {"Haswell", "IvyBridge", "Penryn", "Skylake-Client-IBRS"},
			// node_labeller_test.go "should not include non-usable CPU
			// models with the CPU model label but include them with the
			// SupportedHostModelMigrationCPU label": EPYC-IBPB is
			// usable='no'; 486, Conroe and Opteron_G2 are obsolete.
			kubevirtlabels.CPUModelMigrationLabelPrefix:         {"EPYC-IBPB", "Haswell", "IvyBridge", "Penryn", "Skylake-Client-IBRS"},
			kubevirtlabels.CPUFeatureLabelPrefix:                {"apic", "clflush", "vmx", "xsaves"},
			kubevirtlabels.HostModelCPULabelPrefix:              {"Skylake-Client-IBRS"},
			kubevirtlabels.HostModelRequiredFeaturesLabelPrefix: {"acpi", "ds", "ss"},
			kubevirtlabels.CPUVendorLabelPrefix:                 {"Intel"},
			kubevirtlabels.SEVLabel:                             {"true"},
			kubevirtlabels.SEVESLabel:                           {"true"},
			kubevirtlabels.SEVSNPLabel:                          {"true"},
			kubevirtlabels.TDXLabel:                             nil,
			kubevirtlabels.S390PVLabel:                          nil,
			kubevirtlabels.ObsoleteHostModelLabel:               nil,
		},
	},
	// capabilities_test.go "No cpu model is usable": no usable models, 4
	// features; the known ones still get migration labels (KubeVirt's
	// knownModels), but for the obsolete 486, Conroe and coreduo.
	"virsh_domcapabilities_nothing_usable.xml": {
		features: "supported_features.xml",
		want: map[string][]string{
			kubevirtlabels.CPUModelLabelPrefix:          nil,
			kubevirtlabels.CPUModelMigrationLabelPrefix: {"EPYC-IBPB", "Haswell", "IvyBridge"},
			kubevirtlabels.CPUFeatureLabelPrefix:        {"apic", "clflush", "vmx", "xsaves"},
			kubevirtlabels.HostModelCPULabelPrefix:      {"Skylake-Client-IBRS"},
		},
	},
	// capabilities_test.go "return correct SEV capabilities", one entry each.
	"domcapabilities_nosev.xml": {
		features: "supported_features.xml",
		want:     map[string][]string{kubevirtlabels.SEVLabel: nil, kubevirtlabels.SEVESLabel: nil, kubevirtlabels.SEVSNPLabel: nil, kubevirtlabels.TDXLabel: nil, kubevirtlabels.CPUVendorLabelPrefix: {"AMD"}, kubevirtlabels.HostModelCPULabelPrefix: {"EPYC-Rome"}},
	},
	"domcapabilities_noseves.xml": {
		features: "supported_features.xml",
		want:     map[string][]string{kubevirtlabels.SEVLabel: {"true"}, kubevirtlabels.SEVESLabel: nil, kubevirtlabels.SEVSNPLabel: nil, kubevirtlabels.TDXLabel: nil},
	},
	"domcapabilities_sev.xml": {
		features: "supported_features.xml",
		want:     map[string][]string{kubevirtlabels.SEVLabel: {"true"}, kubevirtlabels.SEVESLabel: {"true"}, kubevirtlabels.SEVSNPLabel: nil, kubevirtlabels.TDXLabel: nil},
	},
	"domcapabilities_sevsnp.xml": {
		features: "supported_features.xml",
		want:     map[string][]string{kubevirtlabels.SEVLabel: {"true"}, kubevirtlabels.SEVESLabel: {"true"}, kubevirtlabels.SEVSNPLabel: {"true"}, kubevirtlabels.TDXLabel: nil},
	},
	// capabilities_test.go "When Intel TDX is supported"; node_labeller_test.go
	// "should add TDX label".
	"domcapabilities_tdx.xml": {
		features: "supported_features.xml",
		want:     map[string][]string{kubevirtlabels.TDXLabel: {"true"}, kubevirtlabels.SEVLabel: nil, kubevirtlabels.SEVESLabel: nil, kubevirtlabels.SEVSNPLabel: nil, kubevirtlabels.HostModelCPULabelPrefix: {"GraniteRapids"}, kubevirtlabels.CPUVendorLabelPrefix: {"Intel"}},
	},
	// arm64.go: no host-supported features, no host model, no named models.
	// KubeVirt does not read supported_features.xml on arm64 at all.
	"virsh_domcapabilities_aarch64.xml": {
		want: map[string][]string{
			kubevirtlabels.CPUModelLabelPrefix:                  nil,
			kubevirtlabels.CPUModelMigrationLabelPrefix:         nil,
			kubevirtlabels.CPUFeatureLabelPrefix:                nil,
			kubevirtlabels.HostModelCPULabelPrefix:              nil,
			kubevirtlabels.HostModelRequiredFeaturesLabelPrefix: nil,
			kubevirtlabels.CPUVendorLabelPrefix:                 nil,
		},
	},
	// capabilities_test.go "Should return the cpu features on s390x even
	// without policy='require' property" (89), "Should default to IBM as CPU
	// Vendor on s390x", "return correct SecureExecution capabilities";
	// node_labeller_test.go "should not add SecureExecution label".
	"s390x/virsh_domcapabilities.xml": {
		features: "s390x/supported_features.xml",
		want: map[string][]string{
			kubevirtlabels.CPUVendorLabelPrefix:    {"IBM"},
			kubevirtlabels.HostModelCPULabelPrefix: {"z14.2-base"},
			kubevirtlabels.S390PVLabel:             nil,
		},
	},
	// node_labeller_test.go "should  add SecureExecution label".
	"s390x/domcapabilities_s390-pv.xml": {
		features: "s390x/supported_features.xml",
		want:     map[string][]string{kubevirtlabels.S390PVLabel: {"true"}, kubevirtlabels.CPUVendorLabelPrefix: {"IBM"}},
	},
}

// TestKubeVirtParity runs node-agent on every domcapabilities file of
// KubeVirt's tests with KubeVirt's settings and checks what KubeVirt's tests
// assert, and beyond that every label against KubeVirt's rules applied to
// the same file by an independent reading (kubevirtRules).
func TestKubeVirtParity(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(parityCases)) {
		tc := parityCases[name]
		t.Run(name, func(t *testing.T) {
			res, _ := parityLabels(t, name, tc)
			for family, want := range tc.want {
				if got := familyValues(res.Labels, family); !slices.Equal(got, want) {
					t.Errorf("%s: %v; KubeVirt's tests want %v", family, got, want)
				}
			}
			if n := len(familyValues(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix)); strings.HasPrefix(name, "s390x/") && n != 89 {
				t.Errorf("%d cpu-feature labels; KubeVirt's test wants 89", n)
			}
			features := ""
			if tc.features != "" {
				features = filepath.Join(kubevirtData, tc.features)
			}
			want := kubevirtRules(t, filepath.Join(kubevirtData, name), features)
			diffLabels(t, res.Labels, want)
		})
	}
}

// TestKubeVirtParityCoversEveryFile fails when KubeVirt's test data holds a
// file no test here reads.
func TestKubeVirtParityCoversEveryFile(t *testing.T) {
	read := map[string]bool{"README.md": true}
	for name, tc := range parityCases {
		read[name] = true
		read[tc.features] = true
	}
	for _, m := range []string{"Penryn", "Skylake-Client-IBRS", "Opteron_G2"} {
		read["cpu_map/x86_"+m+".xml"] = true // TestKubeVirtCPUMap
	}
	err := filepath.WalkDir(kubevirtData, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(kubevirtData, path)
		if !read[filepath.ToSlash(rel)] {
			t.Errorf("%s is not read by any test", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestKubeVirtParityLeavesOutOnlyOtherSources checks that offline files
// leave out exactly the families they cannot give, and never take them from
// this machine.
func TestKubeVirtParityLeavesOutOnlyOtherSources(t *testing.T) {
	res, h := parityLabels(t, "virsh_domcapabilities.xml", parityCases["virsh_domcapabilities.xml"])
	want := []string{kubevirtlabels.CPUTimerLabelPrefix, kubevirtlabels.MachineTypeLabelPrefix, kubevirtlabels.HyperVLabelPrefix, kubevirtlabels.RealtimeLabel}
	if got := res.OmittedPrefixes(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Errorf("omitted %v; want %v", got, want)
	}
	if !h.Offline || len(h.CPUID.Features) != 0 {
		t.Errorf("offline %v, cpuid features %v; this machine's CPU read", h.Offline, h.CPUID.Features)
	}
}

// TestKubeVirtCPUMap exercises KubeVirt's cpu_map files: with the minimum
// model Penryn (KubeVirt before kubevirt/kubevirt#7765, node-agent's
// default), Penryn's apic and clflush lose their cpu-feature labels; without
// a supported-features file, node-agent expands the host model through the
// cpu_map instead.
func TestKubeVirtCPUMap(t *testing.T) {
	cpuMap := filepath.Join(kubevirtData, "cpu_map")
	tc := parityCase{features: "supported_features.xml", cpuMap: cpuMap, policy: Policy{MinCPUModel: "Penryn"}}
	res, _ := parityLabels(t, "virsh_domcapabilities.xml", tc)
	if got := familyValues(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix); !slices.Equal(got, []string{"vmx", "xsaves"}) {
		t.Errorf("cpu-feature minus Penryn: %v; want [vmx xsaves]", got)
	}

	res, h := parityLabels(t, "virsh_domcapabilities.xml", parityCase{cpuMap: cpuMap})
	if h.FeatureSource != hostcpu.FeatureSourceCPUMap {
		t.Fatalf("feature source %s; want cpu_map", h.FeatureSource)
	}
	got := familyValues(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix)
	for _, f := range []string{"acpi", "ds", "ss", "avx2", "xsavec"} {
		if !slices.Contains(got, f) {
			t.Errorf("cpu-feature labels %v lack %s (host-model requirement or Skylake-Client-IBRS feature)", got, f)
		}
	}

	m, err := hostcpu.LoadCPUMap(cpuMap)
	if err != nil {
		t.Fatal(err)
	}
	// KubeVirt's node_labeller.go notes that libvirt's Opteron_G2 requires
	// svm; it is obsolete by default now, so never labelled.
	g2, err := m.Expand(&hostcpu.CPU{Mode: "custom", Match: "exact", Model: "Opteron_G2"})
	if err != nil || !slices.Contains(g2.FeatureNames(), "svm") {
		t.Errorf("Opteron_G2 features %v, %v; want svm among them", g2, err)
	}
	if !(Policy{}).IsObsolete("Opteron_G2") {
		t.Error("Opteron_G2 not obsolete by default")
	}
}

func parityLabels(t *testing.T, domcaps string, tc parityCase) (*Result, *hostcpu.HostCPU) {
	t.Helper()
	opts := hostcpu.Options{
		DomainCapabilitiesFile: filepath.Join(kubevirtData, domcaps),
		CPUMapDir:              tc.cpuMap,
		FallbackCPUMapDir:      filepath.Join(t.TempDir(), "absent"),
		ExpandModels:           tc.policy.ExpandModels(),
		Dial: func(context.Context, string) (hostcpu.Conn, error) {
			t.Error("libvirt dialled although files describe the host")
			return nil, errors.New("no libvirt in this test")
		},
		ReadCPUID: func() hostcpu.CPUID {
			t.Error("cpuid read although files describe the host")
			return testCPUID
		},
		HyperV: func() ([]string, error) {
			t.Error("/dev/kvm read although files describe the host")
			return nil, nil
		},
		Realtime: func() (bool, error) {
			t.Error("sysctl read although files describe the host")
			return false, nil
		},
	}
	if tc.features != "" {
		opts.SupportedFeaturesFile = filepath.Join(kubevirtData, tc.features)
	}
	d, err := hostcpu.NewDiscoverer(opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return mustLabels(t, tc.policy, h), h
}

// familyValues returns the names under a prefix, or a single key's value.
func familyValues(labels map[string]string, family string) []string {
	if strings.HasSuffix(family, "/") {
		return keysWithPrefix(labels, family)
	}
	if v, ok := labels[family]; ok {
		return []string{v}
	}
	return nil
}

// kubevirtRules is KubeVirt's labelling (pkg/virt-handler/node-labeller at
// d923fdb, the rules of v1.7.0 and later: cpu_plugin.go loadDomCapabilities and loadHostSupportedFeatures,
// node_labeller.go prepareLabels, the arch files), restated here on its own
// minimal XML structs so that a bug in node-agent's parser or policy cannot
// hide itself. It covers what the two files give; KubeVirt's default obsolete
// list and no minimum model.
func kubevirtRules(t *testing.T, domcapsPath, featuresPath string) map[string]string {
	t.Helper()
	var dc struct {
		Arch  string `xml:"arch"`
		Modes []struct {
			Name   string `xml:"name,attr"`
			Vendor string `xml:"vendor"`
			Models []struct {
				Name   string `xml:",chardata"`
				Usable string `xml:"usable,attr"`
			} `xml:"model"`
			Features []struct {
				Name   string `xml:"name,attr"`
				Policy string `xml:"policy,attr"`
			} `xml:"feature"`
			Supported string `xml:"supported,attr"`
		} `xml:"cpu>mode"`
		SEV struct {
			Supported   string `xml:"supported,attr"`
			MaxESGuests uint   `xml:"maxESGuests"`
		} `xml:"features>sev"`
		LaunchSecurity struct {
			Supported string   `xml:"supported,attr"`
			Values    []string `xml:"enum>value"`
		} `xml:"features>launchSecurity"`
		TDX struct {
			Supported string `xml:"supported,attr"`
		} `xml:"features>tdx"`
		S390PV struct {
			Supported string `xml:"supported,attr"`
		} `xml:"features>s390-pv"`
	}
	readXML(t, domcapsPath, &dc)
	// KubeVirt takes the arch from the node it runs on; its tests run these
	// files as amd64 unless they set s390x or arm64.
	arch := strings.TrimSpace(dc.Arch)
	x86, s390x := arch == "x86_64" || arch == "", arch == "s390x"
	obsolete := map[string]bool{}
	for _, m := range []string{"486", "pentium", "pentium2", "pentium3", "pentiumpro", "coreduo", "n270", "core2duo", "Conroe", "athlon", "phenom", "qemu64", "qemu32", "kvm64", "kvm32", "Opteron_G1", "Opteron_G2"} {
		obsolete[m], obsolete[m+"-v1"] = true, true
	}
	labels := map[string]string{}
	if (x86 || s390x) && featuresPath != "" {
		var sf struct {
			Features []struct {
				Name   string `xml:"name,attr"`
				Policy string `xml:"policy,attr"`
			} `xml:"feature"`
		}
		readXML(t, featuresPath, &sf)
		for _, f := range sf.Features {
			if f.Policy == "require" || (s390x && f.Policy == "") {
				labels[kubevirtlabels.CPUFeatureLabelPrefix+f.Name] = "true"
			}
		}
	}
	for _, mode := range dc.Modes {
		if mode.Name == "host-model" && mode.Supported == "yes" && (x86 || s390x) {
			hm := strings.TrimSpace(mode.Models[0].Name)
			vendor := strings.TrimSpace(mode.Vendor)
			if vendor == "" && s390x {
				vendor = "IBM"
			}
			labels[kubevirtlabels.HostModelCPULabelPrefix+hm] = "true"
			labels[kubevirtlabels.CPUVendorLabelPrefix+vendor] = "true"
			// KubeVirt at d923fdb checks the host model against the
			// KubeVirt CR's list only, which a default install lacks, so
			// it writes no obsolete-host-model label here, whatever the
			// host model.
			for _, f := range mode.Features {
				if f.Policy == "require" {
					labels[kubevirtlabels.HostModelRequiredFeaturesLabelPrefix+f.Name] = "true"
				}
			}
		}
		if mode.Name != "custom" || !(x86 || s390x) {
			continue
		}
		for _, m := range mode.Models {
			// knownModels: any usable attribute; usableModels: known and
			// not usable='no'. Both lose the obsolete models.
			name := strings.TrimSpace(m.Name)
			if m.Usable == "" || name == "" || obsolete[name] {
				continue
			}
			labels[kubevirtlabels.CPUModelMigrationLabelPrefix+name] = "true"
			if m.Usable != "no" {
				labels[kubevirtlabels.CPUModelLabelPrefix+name] = "true"
			}
		}
	}
	if dc.SEV.Supported == "yes" {
		labels[kubevirtlabels.SEVLabel] = "true"
		if dc.SEV.MaxESGuests > 0 {
			labels[kubevirtlabels.SEVESLabel] = "true"
			if dc.LaunchSecurity.Supported == "yes" && slices.Contains(dc.LaunchSecurity.Values, "sev-snp") {
				labels[kubevirtlabels.SEVSNPLabel] = "true"
			}
		}
	}
	if dc.TDX.Supported == "yes" {
		labels[kubevirtlabels.TDXLabel] = "true"
	}
	if dc.S390PV.Supported == "yes" {
		labels[kubevirtlabels.S390PVLabel] = "true"
	}
	return labels
}

func readXML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
