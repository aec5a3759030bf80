package labeller

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// lines joins want's lines, each ended by a newline.
func lines(want ...string) string { return strings.Join(want, "\n") + "\n" }

func TestWriteColumns(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		width int
		want  string
	}{
		{name: "one row", names: []string{"a", "bb", "c"}, width: 20, want: "  a   bb  c\n"},
		{
			// (20-2)/(4+2) = 3 columns.
			name: "rows of three", names: []string{"aaaa", "b", "c", "d", "e"}, width: 20,
			want: lines("  aaaa  b     c", "  d     e"),
		},
		{
			// (8-2)/(1+2) = 2 columns; the last row is full.
			name: "full last row", names: []string{"a", "b", "c", "d"}, width: 8,
			want: lines("  a  b", "  c  d"),
		},
		{
			name: "a name wider than the width gets a column of its own", names: []string{"a-very-long-name", "b"}, width: 10,
			want: lines("  a-very-long-name", "  b"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeColumns(&b, tt.names, tt.width)
			if got := b.String(); got != tt.want {
				t.Errorf("got:\n%q\nwant:\n%q", got, tt.want)
			}
		})
	}
}

func TestWriteWrapped(t *testing.T) {
	tests := []struct {
		name  string
		items []string
		width int
		want  string
	}{
		{name: "fits", items: []string{"a", "b"}, width: 20, want: "  a, b\n"},
		{name: "one item", items: []string{"a"}, width: 20, want: "  a\n"},
		{
			name: "wraps before the item that would pass width", items: []string{"aaaa", "bbbb", "cccc"}, width: 13,
			want: lines("  aaaa, bbbb,", "  cccc"),
		},
		{
			name: "an item longer than a line stands alone", items: []string{"a", "bbbbbbbbbbbbbbbbbbbb", "c"}, width: 10,
			want: lines("  a,", "  bbbbbbbbbbbbbbbbbbbb,", "  c"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeWrapped(&b, tt.items, "  ", tt.width)
			if got := b.String(); got != tt.want {
				t.Errorf("got:\n%q\nwant:\n%q", got, tt.want)
			}
		})
	}
}

func testReport() Report {
	return Report{
		Host: &hostcpu.HostCPU{Arch: "x86_64", VirtType: "kvm", Sources: []hostcpu.Source{
			{Kind: "cpuid", Detail: "GenuineIntel", Provided: []string{"features", "vendor"}},
			{Kind: "libvirt", Detail: "qemu:///system", Provided: []string{"models"}},
		}},
		Policy: Policy{MinCPUModel: "Penryn"},
		Result: &Result{
			Labels: map[string]string{
				kubevirtlabels.CPUVendorLabelPrefix + "Intel":             "true",
				kubevirtlabels.CPUModelLabelPrefix + "Skylake-Client":     "true",
				kubevirtlabels.CPUModelLabelPrefix + "Haswell-noTSX":      "true",
				kubevirtlabels.CPUModelLabelPrefix + "Broadwell":          "true",
				kubevirtlabels.CPUFeatureLabelPrefix + "avx2":             "true",
				kubevirtlabels.CPUTimerLabelPrefix + "tsc-frequency":      "2400000000",
				kubevirtlabels.HostModelCPULabelPrefix + "Skylake-Client": "true",
				kubevirtlabels.SEVLabel:                                   "true",
			},
			Omitted:  []Omission{{Keys: []string{kubevirtlabels.HyperVLabelPrefix + "*"}, Reason: "/dev/kvm is not there"}},
			Notes:    []string{"a note"},
			Warnings: []string{"a warning"},
		},
	}
}

func TestReportTable(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := testReport().Write(&out, &errOut, FormatTable); err != nil {
		t.Fatal(err)
	}
	want := lines(
		"cpu-vendor.node.kubevirt.io/ (1)",
		"  Intel",
		"host-model-cpu.node.kubevirt.io/ (1)",
		"  Skylake-Client",
		"cpu-model.node.kubevirt.io/ (3)",
		"  Broadwell       Haswell-noTSX   Skylake-Client",
		"cpu-feature.node.kubevirt.io/ (1)",
		"  avx2",
		"cpu-timer.node.kubevirt.io/ (1)",
		"  tsc-frequency=2400000000",
		kubevirtlabels.SEVLabel+"=true",
		"8 labels",
		"",
		"Settings: node-agent's configuration: KubeVirt's default obsolete CPU models; minimum CPU model Penryn",
		"Sources (this machine; arch x86_64, virttype kvm, minimum CPU model Penryn):",
		"  cpuid    GenuineIntel: features, vendor",
		"  libvirt  qemu:///system: models",
		"Left out:",
		"  hyperv.node.kubevirt.io/*",
		"    because /dev/kvm is not there",
		"Note: a note",
		"Warning: a warning",
	)
	if got := out.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr %q, want nothing", errOut.String())
	}
}

// TestReportMachineReadable: JSON and YAML put only the label map on
// stdout, and the sources on stderr.
func TestReportMachineReadable(t *testing.T) {
	r := testReport()
	r.Host.Offline = true
	r.Policy.MinCPUModel = ""
	r.Result.Omitted, r.Result.Notes, r.Result.Warnings = nil, nil, nil
	wantErr := lines(
		"",
		"Settings: node-agent's configuration: KubeVirt's default obsolete CPU models; no minimum CPU model",
		"Sources (offline files only; arch x86_64, virttype kvm, minimum CPU model none):",
		"  cpuid    GenuineIntel: features, vendor",
		"  libvirt  qemu:///system: models",
	)
	for format, unmarshal := range map[string]func([]byte, any) error{FormatJSON: json.Unmarshal, FormatYAML: func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) }} {
		t.Run(format, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := r.Write(&out, &errOut, format); err != nil {
				t.Fatal(err)
			}
			var got map[string]string
			if err := unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not %s: %v\n%s", format, err, out.String())
			}
			if len(got) != len(r.Result.Labels) || got[kubevirtlabels.CPUTimerLabelPrefix+"tsc-frequency"] != "2400000000" {
				t.Errorf("labels %v, want %v", got, r.Result.Labels)
			}
			if !strings.HasSuffix(out.String(), "\n") {
				t.Error("stdout does not end with a newline")
			}
			if errOut.String() != wantErr {
				t.Errorf("stderr:\n%s\nwant:\n%s", errOut.String(), wantErr)
			}
		})
	}
	if err := r.Write(&bytes.Buffer{}, &bytes.Buffer{}, "xml"); err == nil {
		t.Error("format xml accepted")
	}
}
