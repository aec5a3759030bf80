package hostcpu

import (
	"path/filepath"
	"slices"
	"testing"
)

// Fuzz targets for every parser of outside input. Run one with, for example,
//
//	go test -tags libvirt_dlopen -run='^$' -fuzz='^FuzzParseCPU$' -fuzztime=60s -fuzzminimizetime=5s ./pkg/hostcpu/
//
// Each seeds its corpus with the captured testdata, so the fuzzer starts from
// real libvirt output. Those seeds are large (up to 11 kB), and minimizing a
// new input from them takes the default 60 s budget on a busy 2-core machine,
// during which the workers report no executions: keep -fuzzminimizetime short.

func addSeeds(f *testing.F, pattern string, extra ...string) {
	paths, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seeds match testdata/%s: %v", pattern, err)
	}
	for _, p := range paths {
		f.Add(readTestdata(f, filepath.Base(p)))
	}
	for _, s := range extra {
		f.Add([]byte(s))
	}
}

func addSeedFiles(f *testing.F, dir string) {
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.xml"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seeds in testdata/%s: %v", dir, err)
	}
	for _, p := range paths {
		f.Add(readTestdata(f, filepath.Join(dir, filepath.Base(p))))
	}
}

// assertSortedSet fails unless names are sorted, distinct and non-empty.
func assertSortedSet(t *testing.T, what string, names []string) {
	t.Helper()
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) || slices.Contains(names, "") {
		t.Fatalf("%s is not a sorted set of names: %q", what, names)
	}
}

func FuzzParseDomainCapabilities(f *testing.F) {
	addSeeds(f, "domcapabilities-*.xml",
		`<domainCapabilities><cpu><mode name='host-model' supported='yes'><model>X</model><feature policy='require' name='a'/></mode></cpu></domainCapabilities>`,
		`<domainCapabilities><cpu><mode name='custom' supported='yes'><model usable='yes'>A</model><model>A</model></mode></cpu></domainCapabilities>`)
	f.Fuzz(func(t *testing.T, data []byte) {
		dc, err := ParseDomainCapabilities(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, m := range dc.Models {
			if m.Name == "" || seen[m.Name] {
				t.Fatalf("model name empty or repeated: %q", m.Name)
			}
			seen[m.Name] = true
		}
		if hm := dc.HostModel; hm != nil {
			if hm.Name == "" {
				t.Fatal("host model without a name")
			}
			assertSortedSet(t, "required", hm.Required)
			assertSortedSet(t, "disabled", hm.Disabled)
			// What discovery sends to libvirt must be valid CPU XML.
			assertCPURoundTrip(t, hostModelCPU(hm))
		}
	})
}

func FuzzParseCapabilities(f *testing.F) {
	addSeeds(f, "capabilities.xml",
		`<capabilities><host><cpu><arch>x86_64</arch><counter name='tsc' frequency='1' scaling='yes'/></cpu></host><guest><os_type>hvm</os_type><arch name='x86_64'><machine>pc</machine><domain type='kvm'><machine>q35</machine></domain></arch></guest></capabilities>`)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCapabilities(data)
		if err != nil {
			return
		}
		for _, g := range c.Guests {
			assertSortedSet(t, "guest machine types", g.Machines)
		}
		assertSortedSet(t, "machine types", c.MachineTypes())
	})
}

func FuzzParseCPU(f *testing.F) {
	addSeeds(f, "baseline-*.xml",
		`<cpu mode='custom' match='exact'><model fallback='forbid'>Penryn</model><vendor>Intel</vendor><feature name='x'/></cpu>`,
		`<cpu/>`)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCPU(data)
		if err != nil {
			return
		}
		assertSortedSet(t, "required", c.FeaturesWithPolicy("require"))
		assertSortedSet(t, "names", c.FeatureNames())
		assertCPURoundTrip(t, c)
	})
}

func FuzzParseCPUMapFile(f *testing.F) {
	addSeedFiles(f, "cpu_map")
	f.Add([]byte(`<cpus><arch name='x86'><model name='A'><model name='B'/><feature name='f'/></model><model name='B'><feature name='g' removed='yes'/></model></arch></cpus>`))
	f.Add([]byte(`<cpus><model name='A'><model name='A'/></model></cpus>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		models, err := ParseCPUMapFile(data)
		if err != nil {
			return
		}
		m, err := NewCPUMap("fuzz", models)
		if err != nil {
			return
		}
		for _, name := range m.Models() {
			feats, err := m.ModelFeatures(name)
			if err != nil {
				continue
			}
			if len(feats) > 0 {
				assertSortedSet(t, "features of "+name, feats)
			}
			exp, err := m.Expand(namedModelCPU(name))
			if err != nil {
				t.Fatalf("%s resolves but does not expand: %v", name, err)
			}
			if got := exp.FeaturesWithPolicy("require"); !slices.Equal(got, feats) && (len(got) != 0 || len(feats) != 0) {
				t.Fatalf("%s: expansion %v differs from features %v", name, got, feats)
			}
		}
	})
}
