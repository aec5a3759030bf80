package hostcpu

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultCPUMapDir is where Debian, Fedora and upstream builds install
// libvirt's CPU model definitions.
const DefaultCPUMapDir = "/usr/share/libvirt/cpu_map"

// CPUMapModel is one <model> definition of a cpu_map file.
type CPUMapModel struct {
	Name   string
	Vendor string
	// Parents are the models named by <model name='...'/> inside this one;
	// this model has all their features too. libvirt 9 no longer ships such
	// definitions, but older cpu_map.xml files (and distributions' own
	// additions) use them.
	Parents []string
	// Features are this model's own features. Features marked
	// removed='yes' are kept: a live libvirt 9.0 still lists them when it
	// expands the model (checked on EPYC, Icelake-Server and Opteron_G3).
	Features []string
	// File is the file the definition came from.
	File string
}

type cpuMapModelXML struct {
	Name   string `xml:"name,attr"`
	Vendor *struct {
		Name string `xml:"name,attr"`
	} `xml:"vendor"`
	Parents []struct {
		Name string `xml:"name,attr"`
	} `xml:"model"`
	Features []struct {
		Name string `xml:"name,attr"`
	} `xml:"feature"`
}

type cpuMapFileXML struct {
	XMLName xml.Name         `xml:"cpus"`
	Models  []cpuMapModelXML `xml:"model"`
	// The single-file cpu_map.xml of libvirt before 5.x groups models by
	// <arch name='x86'>.
	Arches []struct {
		Models []cpuMapModelXML `xml:"model"`
	} `xml:"arch"`
}

// ParseCPUMapFile parses one file of libvirt's cpu_map directory (root <cpus>)
// and returns its model definitions. Files without models, such as
// x86_features.xml or index.xml, give none.
func ParseCPUMapFile(data []byte) ([]CPUMapModel, error) {
	var x cpuMapFileXML
	if err := unmarshalStrictRoot(data, &x); err != nil {
		return nil, fmt.Errorf("parsing cpu_map XML: %w", err)
	}
	all := x.Models
	for _, a := range x.Arches {
		all = append(all, a.Models...)
	}
	out := make([]CPUMapModel, 0, len(all))
	for _, mx := range all {
		name := strings.TrimSpace(mx.Name)
		if name == "" {
			return nil, errors.New("parsing cpu_map XML: a <model> has no name")
		}
		m := CPUMapModel{Name: name}
		if mx.Vendor != nil {
			m.Vendor = strings.TrimSpace(mx.Vendor.Name)
		}
		for _, p := range mx.Parents {
			if p := strings.TrimSpace(p.Name); p != "" {
				m.Parents = append(m.Parents, p)
			}
		}
		for _, f := range mx.Features {
			m.Features = append(m.Features, f.Name)
		}
		m.Features = sortedSet(m.Features)
		out = append(out, m)
	}
	return out, nil
}

// CPUMap holds the model definitions of a cpu_map directory and resolves a
// model's features through its ancestry, without a live libvirt.
//
// A live libvirt's expansion can differ by a feature or two, because libvirt
// also consults the hypervisor: on this project's test host (libvirt 9.0,
// QEMU TCG) it adds topoext and nrip-save to some AMD models and pni to
// pentiumpro. Penryn, the default minimum model, resolves identically.
type CPUMap struct {
	dir    string
	models map[string]CPUMapModel
}

// NewCPUMap builds a CPUMap from definitions; a name defined twice is an
// error, since which one libvirt would use is not knowable here.
func NewCPUMap(dir string, models []CPUMapModel) (*CPUMap, error) {
	m := &CPUMap{dir: dir, models: make(map[string]CPUMapModel, len(models))}
	for _, md := range models {
		if prev, ok := m.models[md.Name]; ok {
			return nil, fmt.Errorf("cpu_map %s: model %q is defined twice (in %s and %s); remove one", dir, md.Name, prev.File, md.File)
		}
		m.models[md.Name] = md
	}
	return m, nil
}

// LoadCPUMap reads every *.xml file of dir (libvirt's cpu_map directory, or a
// copy of some of its files).
func LoadCPUMap(dir string) (*CPUMap, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.xml"))
	if err != nil {
		return nil, fmt.Errorf("cpu_map %s: %w", dir, err)
	}
	if len(paths) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("cpu_map %s: %w; point --cpu-map at libvirt's cpu_map directory, usually %s", dir, err, DefaultCPUMapDir)
		}
		return nil, fmt.Errorf("cpu_map %s: no *.xml files; point --cpu-map at libvirt's cpu_map directory, usually %s", dir, DefaultCPUMapDir)
	}
	slices.Sort(paths)
	var all []CPUMapModel
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("cpu_map: %w", err)
		}
		models, err := ParseCPUMapFile(data)
		if err != nil {
			return nil, fmt.Errorf("cpu_map file %s: %w", p, err)
		}
		for i := range models {
			models[i].File = p
		}
		all = append(all, models...)
	}
	return NewCPUMap(dir, all)
}

// Dir is the directory the map was read from.
func (m *CPUMap) Dir() string { return m.dir }

// Models returns the names of all defined models, sorted.
func (m *CPUMap) Models() []string {
	out := make([]string, 0, len(m.models))
	for n := range m.models {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// ModelFeatures returns every feature of model, including those it inherits
// through <model name=.../> references, sorted.
func (m *CPUMap) ModelFeatures(model string) ([]string, error) {
	return m.resolve(model, nil, map[string][]string{})
}

// resolve walks the ancestry depth first. memo keeps a model shared by
// several branches from being walked again, which would otherwise be
// exponential in the depth of a diamond-shaped ancestry.
func (m *CPUMap) resolve(model string, path []string, memo map[string][]string) ([]string, error) {
	if f, ok := memo[model]; ok {
		return f, nil
	}
	if slices.Contains(path, model) {
		return nil, fmt.Errorf("cpu_map %s: model %q refers to itself through %s; fix the definitions", m.dir, model, strings.Join(append(slices.Clip(path), model), " -> "))
	}
	md, ok := m.models[model]
	if !ok {
		if len(path) == 0 {
			return nil, fmt.Errorf("cpu_map %s: no definition of model %q", m.dir, model)
		}
		return nil, fmt.Errorf("cpu_map %s: model %q refers to %q, which is not defined", m.dir, path[len(path)-1], model)
	}
	next := append(slices.Clip(path), model)
	all := slices.Clone(md.Features)
	for _, p := range md.Parents {
		f, err := m.resolve(p, next, memo)
		if err != nil {
			return nil, err
		}
		all = append(all, f...)
	}
	all = sortedSet(all)
	memo[model] = all
	return all, nil
}

// Expand does offline what hypervisor-cpu-baseline --features does: the
// features of cpu's model plus those it requires, minus those it disables.
// The result lists every feature with policy require.
func (m *CPUMap) Expand(cpu *CPU) (*CPU, error) {
	if cpu.Model == "" {
		return nil, errors.New("expanding a CPU without a model: nothing to resolve")
	}
	base, err := m.ModelFeatures(cpu.Model)
	if err != nil {
		return nil, err
	}
	disabled := cpu.FeaturesWithPolicy("disable")
	want := slices.Concat(base, cpu.FeaturesWithPolicy("require"))
	var feats []CPUFeature
	for _, f := range sortedSet(want) {
		if !slices.Contains(disabled, f) {
			feats = append(feats, CPUFeature{Name: f, Policy: "require"})
		}
	}
	for _, f := range disabled {
		feats = append(feats, CPUFeature{Name: f, Policy: "disable"})
	}
	vendor := cpu.Vendor
	if vendor == "" {
		vendor = m.models[cpu.Model].Vendor
	}
	return &CPU{Mode: "custom", Match: "exact", Model: cpu.Model, Fallback: "forbid", Vendor: vendor, Features: feats}, nil
}
