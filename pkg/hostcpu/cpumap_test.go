package hostcpu

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustParseCPU(t *testing.T, file string) *CPU {
	t.Helper()
	c, err := ParseCPU(readTestdata(t, file))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The cpu_map files in testdata are copies of libvirt 9.0's; resolving them
// offline must give what the live libvirt printed for the same models.
func TestCPUMapMatchesLiveLibvirt(t *testing.T) {
	m, err := LoadCPUMap("testdata/cpu_map")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Models(); !reflect.DeepEqual(got, []string{"EPYC", "EPYC-Milan", "Haswell", "Penryn"}) {
		t.Errorf("models = %v", got)
	}
	for _, model := range []string{"Penryn", "Haswell"} {
		got, err := m.ModelFeatures(model)
		if err != nil {
			t.Fatal(err)
		}
		// Every feature the live expansion names, required or
		// disabled by the hypervisor, is part of the model.
		want := mustParseCPU(t, "baseline-"+model+"-qemu.xml").FeatureNames()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: cpu_map gives %v\nlive libvirt gives %v", model, got, want)
		}
	}
	builtin, _ := builtinModelFeatures("Penryn")
	if penryn, _ := m.ModelFeatures("Penryn"); !reflect.DeepEqual(builtin, penryn) {
		t.Errorf("built-in Penryn %v differs from cpu_map %v", builtin, penryn)
	}

	for _, vt := range []string{"qemu", "kvm"} {
		dc, err := ParseDomainCapabilities(readTestdata(t, "domcapabilities-"+vt+".xml"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Expand(hostModelCPU(dc.HostModel))
		if err != nil {
			t.Fatal(err)
		}
		live := mustParseCPU(t, "baseline-host-model-"+vt+".xml")
		if g, w := got.FeaturesWithPolicy("require"), live.FeaturesWithPolicy("require"); !reflect.DeepEqual(g, w) {
			t.Errorf("%s host model: offline expansion %v\nlive %v", vt, g, w)
		}
	}
}

func TestCPUMapAncestry(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"x86_Grand.xml":  `<cpus><model name='Grand'><vendor name='Intel'/><feature name='fpu'/><feature name='old' removed='yes'/></model></cpus>`,
		"x86_Parent.xml": `<cpus><model name='Parent'><model name='Grand'/><feature name='sse2'/></model></cpus>`,
		"x86_Child.xml":  `<cpus><model name='Child'><model name='Parent'/><feature name='avx'/><feature name='fpu'/></model></cpus>`,
		// The pre-5.0 single-file layout groups models by arch.
		"cpu_map.xml":        `<cpus><arch name='x86'><model name='Legacy'><model name='Child'/><feature name='aes'/></model></arch></cpus>`,
		"x86_features.xml":   `<cpus><feature name='fpu'><cpuid eax_in='0x01' edx='0x00000001'/></feature></cpus>`,
		"index.xml":          `<cpus><arch name='x86'><include filename='x86_Child.xml'/></arch></cpus>`,
		"not-a-cpu-map.json": `{}`,
	})
	m, err := LoadCPUMap(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model string
		want  []string
	}{
		{"Grand", []string{"fpu", "old"}},
		{"Parent", []string{"fpu", "old", "sse2"}},
		{"Child", []string{"avx", "fpu", "old", "sse2"}},
		{"Legacy", []string{"aes", "avx", "fpu", "old", "sse2"}},
	}
	for _, tt := range tests {
		got, err := m.ModelFeatures(tt.model)
		if err != nil {
			t.Fatalf("%s: %v", tt.model, err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: features %v; want %v", tt.model, got, tt.want)
		}
	}

	exp, err := m.Expand(&CPU{Model: "Child", Features: []CPUFeature{{Name: "extra", Policy: "require"}, {Name: "sse2", Policy: "disable"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := exp.FeaturesWithPolicy("require"); !reflect.DeepEqual(got, []string{"avx", "extra", "fpu", "old"}) {
		t.Errorf("expanded require = %v", got)
	}
	if got := exp.FeaturesWithPolicy("disable"); !reflect.DeepEqual(got, []string{"sse2"}) {
		t.Errorf("expanded disable = %v", got)
	}
	if exp.Vendor != "" {
		t.Errorf("vendor = %q; Child defines none", exp.Vendor)
	}
	if exp, _ := m.Expand(&CPU{Model: "Grand"}); exp.Vendor != "Intel" {
		t.Errorf("Grand's vendor = %q; want Intel", exp.Vendor)
	}
}

func TestCPUMapErrors(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		model   string
		wantErr string
	}{
		{
			name:    "cycle",
			files:   map[string]string{"a.xml": `<cpus><model name='A'><model name='B'/></model><model name='B'><model name='A'/></model></cpus>`},
			model:   "A",
			wantErr: "A -> B -> A",
		},
		{
			name:    "self reference",
			files:   map[string]string{"a.xml": `<cpus><model name='A'><model name='A'/></model></cpus>`},
			model:   "A",
			wantErr: "refers to itself",
		},
		{
			name:    "missing parent",
			files:   map[string]string{"a.xml": `<cpus><model name='A'><model name='Gone'/></model></cpus>`},
			model:   "A",
			wantErr: `model "A" refers to "Gone", which is not defined`,
		},
		{
			name:    "unknown model",
			files:   map[string]string{"a.xml": `<cpus><model name='A'/></cpus>`},
			model:   "Penryn",
			wantErr: `no definition of model "Penryn"`,
		},
		{
			name:    "defined twice",
			files:   map[string]string{"a.xml": `<cpus><model name='A'/></cpus>`, "b.xml": `<cpus><model name='A'/></cpus>`},
			wantErr: `model "A" is defined twice`,
		},
		{
			name:    "model without name",
			files:   map[string]string{"a.xml": `<cpus><model><feature name='x'/></model></cpus>`},
			wantErr: "a <model> has no name",
		},
		{
			name:    "broken file",
			files:   map[string]string{"a.xml": `<cpus><model name='A'>`},
			wantErr: "a.xml",
		},
		{
			name:    "no xml files",
			files:   map[string]string{"README": "x"},
			wantErr: "no *.xml files",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := LoadCPUMap(writeFiles(t, tt.files))
			if err == nil && tt.model != "" {
				_, err = m.ModelFeatures(tt.model)
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v; want it to contain %q", err, tt.wantErr)
			}
		})
	}
	if _, err := LoadCPUMap(filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), DefaultCPUMapDir) {
		t.Errorf("absent dir: err = %v; want a hint at %s", err, DefaultCPUMapDir)
	}
	m, err := NewCPUMap("x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Expand(&CPU{}); err == nil {
		t.Error("expanding a CPU without model succeeded")
	}
}
