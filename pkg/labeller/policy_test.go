package labeller

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

var update = flag.Bool("update", false, "rewrite the golden label files in testdata")

// The captures of the real libvirt live with the discovery package.
const capturedDir = "../hostcpu/testdata"

var testCPUID = hostcpu.CPUID{
	VendorString: "GenuineIntel", Vendor: "Intel", Brand: "Test CPU", Family: 6, Model: 85,
	Features: []string{"avx", "avx2", "cx8", "fpu", "hypervisor", "pni", "sse2", "sse4.1", "sse4.2"},
}

type offline struct {
	domcaps, caps, cpuMap string
	expand                []string
	// hyperV is the fake /dev/kvm probe; nil is a KVM that offers no
	// enlightenment. The host's own device is never read.
	hyperV func() ([]string, error)
}

// discover runs the real discovery on files only; libvirt is never dialled,
// and the kernel's probes are fakes.
func discover(t *testing.T, in offline) *hostcpu.HostCPU {
	t.Helper()
	hyperV := in.hyperV
	if hyperV == nil {
		hyperV = func() ([]string, error) { return []string{}, nil }
	}
	d, err := hostcpu.NewDiscoverer(hostcpu.Options{
		DomainCapabilitiesFile: in.domcaps,
		CapabilitiesFile:       in.caps,
		CPUMapDir:              in.cpuMap,
		FallbackCPUMapDir:      filepath.Join(t.TempDir(), "absent"),
		ExpandModels:           in.expand,
		Dial: func(context.Context, string) (hostcpu.Conn, error) {
			return nil, errors.New("no libvirt in this test")
		},
		ReadCPUID:    func() hostcpu.CPUID { return testCPUID },
		KVMAvailable: func() bool { return false },
		HyperV:       hyperV,
		Realtime:     func() (bool, error) { return false, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func captured(virtType string) offline {
	return offline{
		domcaps: filepath.Join(capturedDir, "domcapabilities-"+virtType+".xml"),
		caps:    filepath.Join(capturedDir, "capabilities.xml"),
		cpuMap:  filepath.Join(capturedDir, "cpu_map"),
		expand:  []string{"Penryn"},
	}
}

func keysWithPrefix(labels map[string]string, prefix string) []string {
	var out []string
	for k := range labels {
		if name, ok := strings.CutPrefix(k, prefix); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// penryn is the default configuration: Penryn's features subtracted.
var penryn = Policy{MinCPUModel: DefaultMinCPUModel}

func mustLabels(t *testing.T, p Policy, h *hostcpu.HostCPU) *Result {
	t.Helper()
	res, err := p.Labels(h)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range res.Labels {
		if !IsOwnedKey(k) {
			t.Errorf("label %s is not an owned key", k)
		}
		if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			t.Errorf("invalid label %s=%s", k, v)
		}
	}
	return res
}

// TestLabelsGolden pins the complete label sets of the two captures. After an
// intended change, rerun with -update and review the diff.
func TestLabelsGolden(t *testing.T) {
	for _, vt := range []string{"qemu", "kvm"} {
		t.Run(vt, func(t *testing.T) {
			res := mustLabels(t, penryn, discover(t, captured(vt)))
			// Offline files leave out only what this machine's kernel would
			// have to tell.
			if got, want := res.OmittedPrefixes(), []string{kubevirtlabels.HyperVLabelPrefix, kubevirtlabels.RealtimeLabel}; !reflect.DeepEqual(got, want) || len(res.Warnings) != 0 || len(res.Notes) != 0 {
				t.Errorf("omitted %v, warnings %v, notes %v; want omitted %v and nothing else", got, res.Warnings, res.Notes, want)
			}
			got, err := json.MarshalIndent(res.Labels, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "labels-"+vt+".golden.json")
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if string(want) != string(got)+"\n" {
				t.Errorf("labels differ from %s (rerun with -update if intended):\n%s", golden, got)
			}
			// The golden file could encode a wrong rule (it did, before
			// KubeVirt v1.7's migration rule was followed): check each
			// model family against the capture read independently.
			known, usable := modelsOf(t, filepath.Join(capturedDir, "domcapabilities-"+vt+".xml"))
			if got := keysWithPrefix(res.Labels, kubevirtlabels.CPUModelLabelPrefix); !reflect.DeepEqual(got, usable) {
				t.Errorf("cpu-model: %v; want the usable models %v", got, usable)
			}
			if got := keysWithPrefix(res.Labels, kubevirtlabels.CPUModelMigrationLabelPrefix); !reflect.DeepEqual(got, known) {
				t.Errorf("cpu-model-migration: %v; want the known models %v", got, known)
			}
		})
	}
}

// TestLabelsFollowTheCapture derives the expected labels of the qemu capture
// straight from what virsh printed, family by family, as in the issue's
// acceptance test.
func TestLabelsFollowTheCapture(t *testing.T) {
	h := discover(t, captured("qemu"))
	res := mustLabels(t, penryn, h)
	parse := func(name string) *hostcpu.CPU {
		b, err := os.ReadFile(filepath.Join(capturedDir, name))
		if err != nil {
			t.Fatal(err)
		}
		c, err := hostcpu.ParseCPU(b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	penrynFeatures := parse("baseline-Penryn-qemu.xml").FeatureNames()
	known, _ := modelsOf(t, filepath.Join(capturedDir, "domcapabilities-qemu.xml"))
	minus := func(a []string) []string {
		var out []string
		for _, f := range a {
			if !slices.Contains(penrynFeatures, f) {
				out = append(out, f)
			}
		}
		return out
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		// usable='yes' in the capture, minus the default obsolete models
		// (Opteron_G1 and Opteron_G2 among them).
		{kubevirtlabels.CPUModelLabelPrefix, []string{"Nehalem", "Penryn", "Westmere"}},
		// Every model with a usable attribute, usable='no' included, minus
		// the obsolete ones: KubeVirt v1.7 and later.
		{kubevirtlabels.CPUModelMigrationLabelPrefix, known},
		{kubevirtlabels.HostModelCPULabelPrefix, []string{"EPYC"}},
		{kubevirtlabels.CPUVendorLabelPrefix, []string{"AMD"}},
		{kubevirtlabels.CPUFeatureLabelPrefix, minus(parse("baseline-host-model-qemu.xml").FeaturesWithPolicy("require"))},
		{kubevirtlabels.HostModelRequiredFeaturesLabelPrefix, minus(h.HostModel.Required)},
	}
	for _, tt := range tests {
		if got := keysWithPrefix(res.Labels, tt.prefix); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %v; want %v", tt.prefix, got, tt.want)
		}
	}
	if n := len(keysWithPrefix(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix)); n != 46 {
		t.Errorf("%d cpu-feature labels; the capture gives 46", n)
	}
	if res.Labels[kubevirtlabels.TSCFrequencyLabel] != "2445426000" || res.Labels[kubevirtlabels.TSCScalableLabel] != "false" {
		t.Errorf("tsc labels %q %q", res.Labels[kubevirtlabels.TSCFrequencyLabel], res.Labels[kubevirtlabels.TSCScalableLabel])
	}
	if n := len(keysWithPrefix(res.Labels, kubevirtlabels.MachineTypeLabelPrefix)); n != 60 {
		t.Errorf("%d machine types; want 60", n)
	}
}

func TestIsObsolete(t *testing.T) {
	tests := []struct {
		admin []string
		model string
		want  bool
	}{
		{nil, "qemu64", true},
		{nil, "486", true},
		{nil, "Conroe", true},
		{nil, "conroe", false}, // libvirt's names are case-sensitive
		{nil, "Penryn", false},
		{nil, "Conroe-v1", true},
		{nil, "Opteron_G1", true},
		{nil, "Opteron_G2-v1", true},
		{nil, "Opteron_G3", false},
		{nil, "kvm64-v12", true},
		{nil, "Penryn-v1", false},
		{nil, "Conroe-v", false},
		{nil, "Conroe-vx", false},
		{nil, "-v1", false},
		{[]string{"Penryn"}, "Penryn", true},
		{[]string{"Penryn"}, "Penryn-v1", true},
		{[]string{"Penryn"}, "qemu64", true}, // the configuration's list adds to the defaults
		{[]string{" Westmere "}, "Westmere", true},
		{[]string{"Penryn-v1"}, "Penryn", false},
		{[]string{"Penryn-v1"}, "Penryn-v1", true},
		{[]string{"Penryn-v1"}, "Penryn-v2", false},
	}
	for _, tt := range tests {
		if got := (Policy{ObsoleteCPUModels: tt.admin}).IsObsolete(tt.model); got != tt.want {
			t.Errorf("obsolete %v: IsObsolete(%q) = %v; want %v", tt.admin, tt.model, got, tt.want)
		}
	}
	// KubeVirt's 17 defaults and their 17 -v1 forms.
	if got := (Policy{}).ObsoleteModels(); len(got) != 34 || !slices.IsSorted(got) {
		t.Errorf("ObsoleteModels = %v; want the 34 defaults, sorted", got)
	}
	if got := (Policy{ObsoleteCPUModels: []string{"Penryn", "486", "", "Penryn"}}).ObsoleteModels(); len(got) != 35 || !slices.Contains(got, "Penryn") || !slices.IsSorted(got) {
		t.Errorf("ObsoleteModels = %v; want the 34 defaults and Penryn, sorted and distinct", got)
	}
}

func TestLabelsPolicy(t *testing.T) {
	ancestry := offline{
		domcaps: "testdata/domcapabilities-ancestry.xml",
		cpuMap:  "testdata/cpu_map-ancestry",
		expand:  []string{"MinChild", "Penryn"},
	}
	tests := []struct {
		name   string
		in     offline
		policy Policy
		want   map[string][]string // prefix -> names
	}{
		{
			name:   "minimum model subtracted through its ancestry",
			in:     ancestry,
			policy: Policy{MinCPUModel: "MinChild"},
			want: map[string][]string{
				// HostX = MinChild(MinBase: fpu sse; sse2) + avx aes,
				// requires avx2, disables aes.
				kubevirtlabels.CPUFeatureLabelPrefix:                {"avx", "avx2"},
				kubevirtlabels.HostModelRequiredFeaturesLabelPrefix: {"avx2"},
				kubevirtlabels.CPUModelLabelPrefix:                  {"HostX", "MinChild", "MinChild-v1"},
				// MinBase is usable='no': known, so a migration label
				// but no cpu-model label, as in KubeVirt v1.7 and later.
				kubevirtlabels.CPUModelMigrationLabelPrefix: {"HostX", "MinBase", "MinChild", "MinChild-v1"},
				kubevirtlabels.HostModelCPULabelPrefix:      {"HostX"},
				kubevirtlabels.CPUVendorLabelPrefix:         {"Intel"},
			},
		},
		{
			name:   "admin additions and their versioned aliases",
			in:     ancestry,
			policy: Policy{MinCPUModel: "MinChild", ObsoleteCPUModels: []string{"MinChild", "MinBase"}},
			want: map[string][]string{
				kubevirtlabels.CPUModelLabelPrefix:          {"HostX"},
				kubevirtlabels.CPUModelMigrationLabelPrefix: {"HostX"},
				// The minimum model may be obsolete; it is still subtracted.
				kubevirtlabels.CPUFeatureLabelPrefix: {"avx", "avx2"},
			},
		},
		{
			name:   "the host model obsolete",
			in:     ancestry,
			policy: Policy{MinCPUModel: "MinChild", ObsoleteCPUModels: []string{"HostX"}},
			want: map[string][]string{
				kubevirtlabels.CPUModelLabelPrefix:          {"MinChild", "MinChild-v1"},
				kubevirtlabels.CPUModelMigrationLabelPrefix: {"MinBase", "MinChild", "MinChild-v1"},
				kubevirtlabels.HostModelCPULabelPrefix:      {"HostX"},
			},
		},
		{
			name:   "a different minimum model",
			in:     ancestry,
			policy: penryn, // none of the synthetic features but fpu, sse, sse2
			want: map[string][]string{
				kubevirtlabels.CPUFeatureLabelPrefix:                {"avx", "avx2"},
				kubevirtlabels.HostModelRequiredFeaturesLabelPrefix: {"avx2"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustLabels(t, tt.policy, discover(t, tt.in))
			for prefix, want := range tt.want {
				if got := keysWithPrefix(res.Labels, prefix); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %v; want %v", prefix, got, want)
				}
			}
			obsolete := slices.Contains(tt.policy.ObsoleteCPUModels, "HostX")
			if _, ok := res.Labels[kubevirtlabels.ObsoleteHostModelLabel]; ok != obsolete || res.HostModelObsolete != obsolete {
				t.Errorf("obsolete-host-model label %v, flag %v; want %v", ok, res.HostModelObsolete, obsolete)
			}
		})
	}
}

// The example from the OpenShift docs: with Penryn as the minimum,
// a Haswell host gets labels only for what Haswell has and Penryn lacks.
func TestLabelsHaswellOverPenryn(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(capturedDir, "baseline-Haswell-qemu.xml"))
	if err != nil {
		t.Fatal(err)
	}
	haswell, err := hostcpu.ParseCPU(b)
	if err != nil {
		t.Fatal(err)
	}
	penrynFeatures := discover(t, offline{cpuMap: filepath.Join(capturedDir, "cpu_map"), expand: []string{"Penryn"}}).ModelFeatures["Penryn"]
	h := &hostcpu.HostCPU{
		Vendor:            "Intel",
		Models:            []hostcpu.Model{{Name: "Haswell", Usable: true, Usability: "yes"}, {Name: "Penryn", Usable: true, Usability: "yes"}},
		HostModel:         &hostcpu.HostModel{Name: "Haswell", Vendor: "Intel"},
		SupportedFeatures: haswell.FeatureNames(),
		FeatureSource:     hostcpu.FeatureSourceLibvirt,
		ModelFeatures:     map[string][]string{"Penryn": penrynFeatures},
	}
	res := mustLabels(t, penryn, h)
	want := []string{"aes", "avx", "avx2", "bmi1", "bmi2", "erms", "fma", "fsgsbase", "hle", "invpcid", "movbe", "pcid", "pclmuldq", "popcnt", "rdtscp", "rtm", "smep", "sse4.2", "tsc-deadline", "x2apic", "xsave"}
	if got := keysWithPrefix(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix); !reflect.DeepEqual(got, want) {
		t.Errorf("cpu-feature labels %v; want %v", got, want)
	}
}

func TestLabelsInvalidNames(t *testing.T) {
	long := strings.Repeat("x", 64)
	h := &hostcpu.HostCPU{
		Vendor: "Weird Vendor",
		Models: []hostcpu.Model{
			{Name: "Good", Usability: "yes"}, {Name: "Bad Model", Usability: "yes"},
			{Name: long, Usability: "unknown"}, {Name: "trailing-", Usability: "no"},
		},
		HostModel:         &hostcpu.HostModel{Name: "Host/Model", Required: []string{"ok-req", "bad req"}},
		SupportedFeatures: []string{"sse4.1", "bad/feature", "-lead", "avx512-bf16", "fsgsbase"},
		ModelFeatures:     map[string][]string{"Penryn": {"fsgsbase"}},
		TSC:               &hostcpu.TSC{Frequency: 1000},
		MachineTypes:      []string{"pc-q35-7.2", "bad machine"},
	}
	res := mustLabels(t, penryn, h)
	want := map[string]string{
		kubevirtlabels.CPUModelLabelPrefix + "Good":                    "true",
		kubevirtlabels.CPUModelMigrationLabelPrefix + "Good":           "true",
		kubevirtlabels.HostModelRequiredFeaturesLabelPrefix + "ok-req": "true",
		kubevirtlabels.CPUFeatureLabelPrefix + "sse4.1":                "true",
		kubevirtlabels.CPUFeatureLabelPrefix + "avx512-bf16":           "true",
		kubevirtlabels.TSCFrequencyLabel:                               "1000",
		kubevirtlabels.TSCScalableLabel:                                "false",
		kubevirtlabels.MachineTypeLabelPrefix + "pc-q35-7.2":           "true",
	}
	if !reflect.DeepEqual(res.Labels, want) {
		t.Errorf("labels = %v\nwant %v", res.Labels, want)
	}
	for _, bad := range []string{`"Bad Model"`, long, `"trailing-"`, `"Host/Model"`, `"bad req"`, `"bad/feature"`, `"-lead"`, `"Weird Vendor"`, `"bad machine"`} {
		if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, bad) }) {
			t.Errorf("no warning names %s: %v", bad, res.Warnings)
		}
	}
	// Bad Model twice (cpu-model and migration), the long name twice,
	// Host/Model once (host-model-cpu), then one each for the rest;
	// trailing- is usable='no', so only its migration key is tried, and
	// refused.
	if len(res.Warnings) != 11 {
		t.Errorf("%d warnings; want 11: %v", len(res.Warnings), res.Warnings)
	}
}

// TestLabelsWithoutLibvirt labels from cpuid alone, on a host with KVM and on
// one without: the hyperv family follows the (fake) /dev/kvm, everything
// libvirt would give is omitted for one reason.
func TestLabelsWithoutLibvirt(t *testing.T) {
	libvirtOnly := []string{kubevirtlabels.CPUModelLabelPrefix, kubevirtlabels.CPUModelMigrationLabelPrefix, kubevirtlabels.HostModelCPULabelPrefix, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix, kubevirtlabels.ObsoleteHostModelLabel, kubevirtlabels.CPUTimerLabelPrefix, kubevirtlabels.MachineTypeLabelPrefix, kubevirtlabels.SEVLabel, kubevirtlabels.SEVESLabel, kubevirtlabels.SEVSNPLabel, kubevirtlabels.TDXLabel, kubevirtlabels.S390PVLabel}
	tests := []struct {
		name        string
		hyperV      func() ([]string, error)
		wantHyperV  []string
		wantOmitted []string
	}{
		{
			name:        "with /dev/kvm",
			hyperV:      func() ([]string, error) { return []string{"base", "time"}, nil },
			wantHyperV:  []string{"base", "time"},
			wantOmitted: libvirtOnly,
		},
		{
			name:        "without /dev/kvm",
			hyperV:      func() ([]string, error) { return nil, errors.New("opening /dev/kvm: no such file or directory") },
			wantOmitted: append(slices.Clone(libvirtOnly), kubevirtlabels.HyperVLabelPrefix),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := discover(t, offline{expand: []string{"Penryn"}, hyperV: tt.hyperV}) // libvirt fails, built-in Penryn
			res := mustLabels(t, penryn, h)
			want := map[string]string{
				kubevirtlabels.CPUVendorLabelPrefix + "Intel":       "true",
				kubevirtlabels.CPUFeatureLabelPrefix + "avx":        "true",
				kubevirtlabels.CPUFeatureLabelPrefix + "avx2":       "true",
				kubevirtlabels.CPUFeatureLabelPrefix + "hypervisor": "true",
				kubevirtlabels.CPUFeatureLabelPrefix + "sse4.2":     "true",
			}
			for _, e := range tt.wantHyperV {
				want[kubevirtlabels.HyperVLabelPrefix+e] = "true"
			}
			if !reflect.DeepEqual(res.Labels, want) {
				t.Errorf("labels = %v; want %v", res.Labels, want)
			}
			if got := res.OmittedPrefixes(); !reflect.DeepEqual(got, tt.wantOmitted) {
				t.Errorf("omitted %v; want %v", got, tt.wantOmitted)
			}
			if !strings.Contains(res.Omitted[0].Reason, "libvirt unreachable") || !strings.Contains(res.Omitted[0].String(), "machine-type.node.kubevirt.io/*") {
				t.Errorf("omissions = %v; want the first for libvirt", res.Omitted)
			}
			if tt.wantHyperV == nil {
				if len(res.Omitted) != 2 || !strings.Contains(res.Omitted[1].Reason, "/dev/kvm") {
					t.Errorf("omissions = %v; want a second one naming /dev/kvm", res.Omitted)
				}
			} else if len(res.Omitted) != 1 {
				t.Errorf("omissions = %v; want one, for libvirt", res.Omitted)
			}
			if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "cpuid") {
				t.Errorf("notes = %v", res.Notes)
			}
		})
	}
}

func TestLabelsUnknownMinimumModel(t *testing.T) {
	in := captured("qemu")
	in.expand = []string{"Skylake-Server"} // not in the testdata cpu_map
	res := mustLabels(t, Policy{MinCPUModel: "Skylake-Server"}, discover(t, in))
	if n := len(keysWithPrefix(res.Labels, kubevirtlabels.CPUFeatureLabelPrefix)) + len(keysWithPrefix(res.Labels, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix)); n != 0 {
		t.Errorf("%d feature labels without the minimum model's features", n)
	}
	if got := res.OmittedPrefixes(); !slices.Contains(got, kubevirtlabels.CPUFeatureLabelPrefix) || !slices.Contains(got, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix) {
		t.Errorf("omitted %v", got)
	}
	if !strings.Contains(res.Omitted[0].Reason, "Skylake-Server") {
		t.Errorf("reason %q does not name the model", res.Omitted[0].Reason)
	}
	if len(keysWithPrefix(res.Labels, kubevirtlabels.CPUModelLabelPrefix)) == 0 {
		t.Error("model labels lost too")
	}
}

func TestLabelsTSC(t *testing.T) {
	h := &hostcpu.HostCPU{TSC: &hostcpu.TSC{Scalable: true}, ModelFeatures: map[string][]string{"Penryn": nil}}
	res := mustLabels(t, penryn, h)
	if _, ok := res.Labels[kubevirtlabels.TSCFrequencyLabel]; ok || res.Labels[kubevirtlabels.TSCScalableLabel] != "true" {
		t.Errorf("labels = %v; want only tsc-scalable=true", res.Labels)
	}
	if _, err := (Policy{}).Labels(nil); err == nil {
		t.Error("nil snapshot accepted")
	}
}

func TestIsOwnedKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"cpu-model.node.kubevirt.io/Haswell", true},
		{"cpu-model-migration.node.kubevirt.io/Haswell", true},
		{"cpu-feature.node.kubevirt.io/avx", true},
		{"host-model-cpu.node.kubevirt.io/EPYC", true},
		{"host-model-required-features.node.kubevirt.io/la57", true},
		{"cpu-vendor.node.kubevirt.io/AMD", true},
		{"cpu-timer.node.kubevirt.io/tsc-frequency", true},
		{"machine-type.node.kubevirt.io/q35", true},
		{"node-labeller.kubevirt.io/obsolete-host-model", true},
		{"hyperv.node.kubevirt.io/vpindex", true},
		{"kubevirt.io/sev", true},
		{"kubevirt.io/sev-snp", true},
		{"kubevirt.io/tdx", true},
		{"kubevirt.io/s390-pv", true},
		{"kubevirt.io/realtime", true},
		// Similar, but not ours.
		{"node-labeller.kubevirt.io/skip-node", false},
		{"node-labeller.kubevirt.io/obsolete-host-model-x", false},
		{"cpu-model.node.kubevirt.io", false},
		{"xcpu-model.node.kubevirt.io/Haswell", false},
		{"feature.node.kubernetes.io/cpu-model-Haswell", false},
		{"kubevirt.io/sev-other", false},
		{"kubevirt.io/realtime-x", false},
		{"kubevirt.io/schedulable", false},
		{"cpu-model.node.kubevirt.io.example.com/x", false},
	}
	for _, tt := range tests {
		if got := IsOwnedKey(tt.key); got != tt.want {
			t.Errorf("IsOwnedKey(%q) = %v; want %v", tt.key, got, tt.want)
		}
	}
}

// KubeVirt (cpu_plugin.go, loadDomCapabilities, v1.7.0 and later) gives
// cpu-model to usable='yes' and usable='unknown' models, and
// cpu-model-migration to every model with a usable attribute, usable='no'
// included; a model without the attribute, or obsolete, gets neither.
//
// The "No" row is the case node-agent got wrong before: it gave migration
// labels to usable models only, as KubeVirt did up to v1.6, so a node was
// refused as the target of a host-model guest that KubeVirt would send there.
func TestModelUsability(t *testing.T) {
	h := &hostcpu.HostCPU{Arch: "x86_64", Models: []hostcpu.Model{
		{Name: "Yes", Usability: "yes"}, {Name: "Unknown", Usability: "unknown"},
		{Name: "No", Usability: "no"}, {Name: "None"}, {Name: "Old", Usability: "yes"},
		{Name: "OldNo", Usability: "no"},
	}}
	res := mustLabels(t, Policy{ObsoleteCPUModels: []string{"Old", "OldNo"}}, h)
	want := map[string][]string{
		kubevirtlabels.CPUModelLabelPrefix:          {"Unknown", "Yes"},
		kubevirtlabels.CPUModelMigrationLabelPrefix: {"No", "Unknown", "Yes"},
	}
	for prefix, w := range want {
		if got := keysWithPrefix(res.Labels, prefix); !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %v; want %v", prefix, got, w)
		}
	}
}

// modelsOf reads a domcapabilities file with its own minimal struct and
// returns KubeVirt's two model sets, each without the default obsolete
// models and sorted: known (any usable attribute: cpu-model-migration) and
// usable (known, and not usable='no': cpu-model).
func modelsOf(t *testing.T, path string) (known, usable []string) {
	t.Helper()
	var dc struct {
		Models []struct {
			Name   string `xml:",chardata"`
			Usable string `xml:"usable,attr"`
		} `xml:"cpu>mode>model"`
	}
	readXML(t, path, &dc)
	for _, m := range dc.Models {
		if m.Usable == "" || (Policy{}).IsObsolete(m.Name) {
			continue
		}
		known = append(known, m.Name)
		if m.Usable != "no" {
			usable = append(usable, m.Name)
		}
	}
	slices.Sort(known)
	slices.Sort(usable)
	if len(known) == len(usable) {
		t.Fatalf("%s: no known model is unusable; the two families would not be told apart", path)
	}
	return slices.Compact(known), slices.Compact(usable)
}

// Unknown sources leave their families alone; known ones, even empty, do
// not.
func TestLocalFamilies(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name        string
		h           hostcpu.HostCPU
		want        map[string]string
		wantOmitted []string
	}{
		{"unknown", hostcpu.HostCPU{Arch: "x86_64"}, map[string]string{},
			[]string{kubevirtlabels.HyperVLabelPrefix, kubevirtlabels.SEVLabel, kubevirtlabels.SEVESLabel, kubevirtlabels.SEVSNPLabel, kubevirtlabels.TDXLabel, kubevirtlabels.S390PVLabel, kubevirtlabels.RealtimeLabel}},
		{"known, nothing offered", hostcpu.HostCPU{Arch: "x86_64", HyperV: []string{}, Security: &hostcpu.LaunchSecurity{}, Realtime: &no}, map[string]string{}, nil},
		{"known, all offered", hostcpu.HostCPU{Arch: "x86_64", HyperV: []string{"base", "vpindex"}, Security: &hostcpu.LaunchSecurity{SEV: true, SEVES: true, SEVSNP: true, TDX: true, S390PV: true}, Realtime: &yes},
			map[string]string{kubevirtlabels.HyperVLabelPrefix + "base": "true", kubevirtlabels.HyperVLabelPrefix + "vpindex": "true", kubevirtlabels.SEVLabel: "true", kubevirtlabels.SEVESLabel: "true", kubevirtlabels.SEVSNPLabel: "true", kubevirtlabels.TDXLabel: "true", kubevirtlabels.S390PVLabel: "true", kubevirtlabels.RealtimeLabel: "true"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h
			h.Models = []hostcpu.Model{}
			h.SupportedFeatures = []string{}
			h.MachineTypes = []string{}
			h.HostModel = &hostcpu.HostModel{Name: "H", Vendor: "Intel"}
			h.Vendor = "Intel"
			h.TSC = &hostcpu.TSC{}
			res := mustLabels(t, Policy{}, &h)
			got := map[string]string{}
			for k, v := range res.Labels {
				if slices.Contains(OwnedKeys(), k) || strings.HasPrefix(k, kubevirtlabels.HyperVLabelPrefix) {
					got[k] = v
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("labels %v; want %v", got, tt.want)
			}
			if o := res.OmittedPrefixes(); !slices.Equal(o, tt.wantOmitted) {
				t.Errorf("omitted %v; want %v", o, tt.wantOmitted)
			}
		})
	}
}
