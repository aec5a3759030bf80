package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/labeller"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestLabelsCorpus and the counts in its README")

// corpusDir holds domain capabilities of real hosts from libvirt's test
// suite (its README says which and from where); pkg/labeller's tests check the
// same files against KubeVirt's rules.
const corpusDir = "../../pkg/labeller/testdata/libvirt"

type corpusCapture struct {
	file   string
	cpuMap bool
}

// corpusCaptures are the captures `node-agent labels` runs on. The x86 ones
// get the cpu_map definitions of their host models, so that the cpu-feature
// family is computed as well; libvirt defines no s390x or arm64 models there.
var corpusCaptures = []corpusCapture{
	{file: "qemu_9.1.0-q35.x86_64.xml", cpuMap: true},
	{file: "qemu_10.0.0-q35.x86_64+amdsev.xml", cpuMap: true},
	{file: "qemu_10.1.0-q35.x86_64+inteltdx.xml", cpuMap: true},
	{file: "qemu_10.1.0.s390x.xml"},
	{file: "qemu_10.0.0-virt.aarch64.xml"},
}

// TestLabelsCorpus runs `node-agent labels --domcapabilities` on every
// capture, through the command itself, with KubeVirt's settings (no minimum
// CPU model), and compares the label map on stdout and the sources and
// left-out families on stderr with golden files. With the default minimum
// model (Penryn) the labels must be the same but for Penryn's features.
// After an intended change, rerun with -update and review the diff.
func TestLabelsCorpus(t *testing.T) {
	t.Chdir(corpusDir)
	penryn := penrynFeatures(t)
	var counts []corpusCounts
	for _, c := range corpusCaptures {
		t.Run(c.file, func(t *testing.T) {
			args := []string{"--domcapabilities", c.file, "-o", "json"}
			if c.cpuMap {
				args = append(args, "--cpu-map", "cpu_map")
			}
			stdout, stderr := runLabels(t, append([]string{"--min-cpu-model", ""}, args...)...)
			base := filepath.Join("golden", strings.TrimSuffix(c.file, ".xml"))
			compareGolden(t, base+".labels.json", stdout)
			compareGolden(t, base+".sources.txt", stderr)

			labels := map[string]string{}
			if err := json.Unmarshal([]byte(stdout), &labels); err != nil {
				t.Fatalf("stdout is not a JSON label map: %v", err)
			}
			for k := range labels {
				if !labeller.IsOwnedKey(k) {
					t.Errorf("%s is not a key node-agent owns", k)
				}
			}
			counts = append(counts, countFamilies(c.file, labels, stderr))

			defStdout, _ := runLabels(t, args...)
			def := map[string]string{}
			if err := json.Unmarshal([]byte(defStdout), &def); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for k, v := range labels {
				name := k[strings.LastIndex(k, "/")+1:]
				isFeature := strings.HasPrefix(k, kubevirtlabels.CPUFeatureLabelPrefix) || strings.HasPrefix(k, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix)
				if !isFeature || !slices.Contains(penryn, name) {
					want[k] = v
				}
			}
			keys := maps.Clone(want)
			maps.Copy(keys, def)
			for _, k := range slices.Sorted(maps.Keys(keys)) {
				if want[k] != def[k] {
					t.Errorf("default settings: %s=%q; want %q (KubeVirt's settings minus Penryn's features)", k, def[k], want[k])
				}
			}
		})
	}
	if !t.Failed() {
		compareCountsTable(t, counts)
	}
}

// TestLabelsCorpusCoversEveryCapture fails when a capture of the corpus is
// not run by TestLabelsCorpus.
func TestLabelsCorpusCoversEveryCapture(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(corpusDir, "*.xml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if !slices.ContainsFunc(corpusCaptures, func(c corpusCapture) bool { return c.file == filepath.Base(p) }) {
			t.Errorf("%s is not in corpusCaptures", filepath.Base(p))
		}
	}
}

// runLabels runs `node-agent labels args...` and returns its stdout and
// stderr; the command must succeed.
func runLabels(t *testing.T, args ...string) (string, string) {
	t.Helper()
	root := newRootCommand()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(append([]string{"labels"}, args...))
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("node-agent labels %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; run with -update to create it", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (rerun with -update if intended):\n%s", path, got)
	}
}

// penrynFeatures are the features of Penryn, the default minimum model, as
// the corpus's cpu_map defines it.
func penrynFeatures(t *testing.T) []string {
	t.Helper()
	m, err := hostcpu.LoadCPUMap("cpu_map")
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.ModelFeatures("Penryn")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// corpusFamilies are the columns of the README's table: the families a
// domain capabilities file gives. The others (cpu-timer, machine-type,
// hyperv, realtime) come from other sources and are left out offline.
var corpusFamilies = []struct{ title, key string }{
	{"cpu-model", kubevirtlabels.CPUModelLabelPrefix},
	{"cpu-model-migration", kubevirtlabels.CPUModelMigrationLabelPrefix},
	{"cpu-feature", kubevirtlabels.CPUFeatureLabelPrefix},
	{"host-model-cpu", kubevirtlabels.HostModelCPULabelPrefix},
	{"host-model-required-features", kubevirtlabels.HostModelRequiredFeaturesLabelPrefix},
	{"cpu-vendor", kubevirtlabels.CPUVendorLabelPrefix},
	{"obsolete-host-model", kubevirtlabels.ObsoleteHostModelLabel},
	{"sev", kubevirtlabels.SEVLabel},
	{"sev-es", kubevirtlabels.SEVESLabel},
	{"sev-snp", kubevirtlabels.SEVSNPLabel},
	{"tdx", kubevirtlabels.TDXLabel},
	{"s390-pv", kubevirtlabels.S390PVLabel},
}

type corpusCounts struct {
	file string
	// counts are the labels per family, "left out" for a family the
	// command left out (stderr says why).
	counts []string
	total  int
}

func countFamilies(file string, labels map[string]string, stderr string) corpusCounts {
	c := corpusCounts{file: file, total: len(labels)}
	_, leftOut, _ := strings.Cut(stderr, "Left out:\n")
	for _, f := range corpusFamilies {
		key := f.key
		if strings.HasSuffix(key, "/") {
			key += "*"
		}
		if strings.Contains(leftOut, key) {
			c.counts = append(c.counts, "left out")
			continue
		}
		n := 0
		for k := range labels {
			if k == f.key || (strings.HasSuffix(f.key, "/") && strings.HasPrefix(k, f.key)) {
				n++
			}
		}
		c.counts = append(c.counts, fmt.Sprint(n))
	}
	return c
}

const (
	countsBegin = "<!-- counts: written by cmd/node-agent TestLabelsCorpus -update -->\n"
	countsEnd   = "<!-- end of counts -->\n"
)

// compareCountsTable checks the README's table of label counts per family
// against the golden files, so that the table never tells an old story.
func compareCountsTable(t *testing.T, counts []corpusCounts) {
	t.Helper()
	var b strings.Builder
	b.WriteString("| capture |")
	for _, f := range corpusFamilies {
		fmt.Fprintf(&b, " %s |", f.title)
	}
	b.WriteString(" total |\n|---|")
	for range corpusFamilies {
		b.WriteString("---:|")
	}
	b.WriteString("---:|\n")
	for _, c := range counts {
		fmt.Fprintf(&b, "| `%s` |", c.file)
		for _, n := range c.counts {
			fmt.Fprintf(&b, " %s |", n)
		}
		fmt.Fprintf(&b, " %d |\n", c.total)
	}
	table := b.String()

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(readme), countsBegin)
	_, after, ok2 := strings.Cut(rest, countsEnd)
	if !ok1 || !ok2 {
		t.Fatalf("README.md lacks the markers %q and %q around the counts table", countsBegin, countsEnd)
	}
	if *update {
		if err := os.WriteFile("README.md", []byte(before+countsBegin+table+countsEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got, _, _ := strings.Cut(rest, countsEnd); got != table {
		t.Errorf("README.md's counts table differs from the golden files (rerun with -update):\n%s", table)
	}
}
