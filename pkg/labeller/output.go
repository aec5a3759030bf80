package labeller

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// Report is what `node-agent labels` prints for one discovery: the labels the
// policy computed from it, and where they came from.
type Report struct {
	Host   *hostcpu.HostCPU
	Policy Policy
	Result *Result
}

// Output formats of Report.Write.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// reportWidth is the width the table and the sources are laid out for.
const reportWidth = 100

// Write prints the report in format. The table puts the labels and their
// sources on stdout; JSON and YAML put a flat label map on stdout and the
// sources on stderr, so that stdout stays a document a program can read.
func (r Report) Write(stdout, stderr io.Writer, format string) error {
	var b []byte
	var err error
	switch format {
	case FormatTable:
		if err := r.WriteTable(stdout); err != nil {
			return err
		}
		return r.WriteSources(stdout)
	case FormatJSON:
		if b, err = json.MarshalIndent(r.Result.Labels, "", "  "); err != nil {
			return fmt.Errorf("encoding labels as JSON: %w", err)
		}
		b = append(b, '\n')
	case FormatYAML:
		if b, err = yaml.Marshal(r.Result.Labels); err != nil {
			return fmt.Errorf("encoding labels as YAML: %w", err)
		}
	default:
		return fmt.Errorf("output format %q: must be %s, %s or %s", format, FormatTable, FormatJSON, FormatYAML)
	}
	if _, err := stdout.Write(b); err != nil {
		return err
	}
	return r.WriteSources(stderr)
}

// tableGroups is the order of the table's sections: what the host is, then
// what it can run, then the rest.
var tableGroups = []string{
	kubevirtlabels.CPUVendorLabelPrefix,
	kubevirtlabels.HostModelCPULabelPrefix,
	kubevirtlabels.HostModelRequiredFeaturesLabelPrefix,
	kubevirtlabels.CPUModelLabelPrefix,
	kubevirtlabels.CPUModelMigrationLabelPrefix,
	kubevirtlabels.CPUFeatureLabelPrefix,
	kubevirtlabels.CPUTimerLabelPrefix,
	kubevirtlabels.MachineTypeLabelPrefix,
	kubevirtlabels.HyperVLabelPrefix,
	kubevirtlabels.VMArchLabelPrefix,
}

// WriteTable prints the labels grouped by prefix, the names of each group in
// columns, then the single keys and the count; a value other than "true" is
// shown as name=value.
func (r Report) WriteTable(w io.Writer) error {
	labels := r.Result.Labels
	var b strings.Builder
	for _, prefix := range tableGroups {
		var names []string
		for k, v := range labels {
			if name, ok := strings.CutPrefix(k, prefix); ok {
				if v != "true" {
					name += "=" + v
				}
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		fmt.Fprintf(&b, "%s (%d)\n", prefix, len(names))
		writeColumns(&b, names, reportWidth)
	}
	for _, k := range OwnedKeys() {
		if v, ok := labels[k]; ok {
			fmt.Fprintf(&b, "%s=%s\n", k, v)
		}
	}
	fmt.Fprintf(&b, "%d labels\n", len(labels))
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSources says where the labels came from, which families were left
// out and why, and the policy's notes and warnings.
func (r Report) WriteSources(w io.Writer) error {
	h, res := r.Host, r.Result
	var b strings.Builder
	minModel := r.Policy.MinModel()
	if minModel == "" {
		minModel = "none"
	}
	mode := "this machine"
	if h.Offline {
		mode = "offline files only"
	}
	fmt.Fprintf(&b, "\nSettings: %s\n", r.Policy.Summary())
	if r.Policy.KubeVirtNote != "" {
		fmt.Fprintf(&b, "  (%s)\n", r.Policy.KubeVirtNote)
	}
	fmt.Fprintf(&b, "Sources (%s; arch %s, virttype %s, minimum CPU model %s):\n", mode, h.Arch, h.VirtType, minModel)
	for _, s := range h.Sources {
		fmt.Fprintf(&b, "  %-8s %s: %s\n", s.Kind, s.Detail, strings.Join(s.Provided, ", "))
	}
	if len(res.Omitted) > 0 {
		b.WriteString("Left out:\n")
		for _, om := range res.Omitted {
			writeWrapped(&b, om.Keys, "  ", reportWidth)
			fmt.Fprintf(&b, "    because %s\n", om.Reason)
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	for _, wn := range res.Warnings {
		fmt.Fprintf(&b, "Warning: %s\n", wn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeColumns lays names out row by row, each row indented by two spaces,
// in as many columns of equal width as fit in width; one column at least.
func writeColumns(b *strings.Builder, names []string, width int) {
	longest := 0
	for _, n := range names {
		longest = max(longest, len(n))
	}
	colWidth := longest + 2
	cols := max(1, (width-2)/colWidth)
	for i, n := range names {
		if i%cols == 0 {
			b.WriteString("  ")
		}
		if i%cols == cols-1 || i == len(names)-1 {
			b.WriteString(n + "\n")
		} else {
			b.WriteString(n + strings.Repeat(" ", colWidth-len(n)))
		}
	}
}

// writeWrapped writes items separated by commas, after indent, in lines of
// at most width columns where the items allow it: an item longer than a
// line gets a line of its own.
func writeWrapped(b *strings.Builder, items []string, indent string, width int) {
	line := indent
	for i, it := range items {
		if i < len(items)-1 {
			it += ","
		}
		if line != indent && len(line)+1+len(it) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += it
	}
	b.WriteString(line + "\n")
}
