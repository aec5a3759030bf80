package baseline

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Output formats of Result.Write.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// Write prints r in format: the table for a person, or the whole result as
// JSON or YAML.
func (r *Result) Write(w io.Writer, format string) error {
	var b []byte
	var err error
	switch format {
	case FormatTable:
		return r.WriteTable(w)
	case FormatJSON:
		if b, err = json.MarshalIndent(r, "", "  "); err != nil {
			return err
		}
		b = append(b, '\n')
	case FormatYAML:
		if b, err = yaml.Marshal(r); err != nil {
			return err
		}
	default:
		return fmt.Errorf("output format %q: must be %s, %s or %s", format, FormatTable, FormatJSON, FormatYAML)
	}
	_, err = w.Write(b)
	return err
}

// WriteTable prints r for a person: the baseline, the shared features, and
// the newer models with the nodes holding each back.
func (r *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	names := make([]string, 0, len(r.Nodes))
	for _, n := range r.Nodes {
		names = append(names, n.Name)
	}
	fmt.Fprintf(&b, "Nodes (%d): %s\n", len(names), strings.Join(names, ", "))
	if r.Model != "" {
		fmt.Fprintf(&b, "Baseline CPU model: %s (every selected node can run it)\n", r.Model)
	} else {
		b.WriteString("Baseline CPU model: none\n")
	}
	if len(r.Common) > 0 {
		fmt.Fprintf(&b, "Models every node can run (%d, newest first): %s\n", len(r.Common), strings.Join(r.Common, ", "))
	}
	fmt.Fprintf(&b, "Shared cpu-feature labels (%d): %s\n", len(r.SharedFeatures), strings.Join(r.SharedFeatures, " "))
	if len(r.Unlabelled) > 0 {
		fmt.Fprintf(&b, "Nodes without CPU model labels: %s\n", strings.Join(r.Unlabelled, ", "))
	}
	if len(r.Candidates) > 0 {
		if r.Model != "" {
			b.WriteString("\nNewer models, and the nodes holding each back:\n")
		} else {
			b.WriteString("\nModels, and the nodes holding each back:\n")
		}
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  MODEL\tNODES\tHELD BACK BY\n")
		for _, c := range r.Candidates {
			held := strings.Join(c.HeldBackBy, ", ")
			if held == "" {
				held = "-"
			}
			fmt.Fprintf(tw, "  %s\t%d/%d\t%s\n", c.Model, c.Nodes, len(r.Nodes), held)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
