package spec

import (
	"strings"
	"testing"
)

func values(field string) string {
	return map[string]string{"Event": "maintenance-failed", "Node": "node-1", "Reason": "DrainFailed",
		"Type": "Warning", "Message": "pod \"db-0\" said \"no\"\nline two", "Time": "2026-11-29T17:00:00Z"}[field]
}

func TestTemplateRenders(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{``, ``},
		{`no placeholder`, `no placeholder`},
		{`{"node":{{json .Node}},"what":{{json .Event}},"why":{{json .Message}}}`,
			`{"node":"node-1","what":"maintenance-failed","why":"pod \"db-0\" said \"no\"\nline two"}`},
		{`{{.Node}} {{ .Reason }}/{{.Type}} at {{ json   .Time }}`, `node-1 DrainFailed/Warning at "2026-11-29T17:00:00Z"`},
		{`{{json .Message}}`, `"pod \"db-0\" said \"no\"\nline two"`},
		{`a } b { c`, `a } b { c`},
		// A JSON body's closing braces are text.
		{`{"node":{{json .Node}},"labels":{"a":{"b":1}}}`, `{"node":"node-1","labels":{"a":{"b":1}}}`},
		{`x}} {{.Type}}}}`, `x}} Warning}}`},
	} {
		tmpl, err := ParseTemplate("t", tt.text)
		if err != nil {
			t.Fatalf("%q: %v", tt.text, err)
		}
		if got := string(tmpl.Render(values)); got != tt.want {
			t.Errorf("%q rendered %q, want %q", tt.text, got, tt.want)
		}
	}
}

// Anything but a placeholder of a known field is refused at parse, with
// where and what: the config that holds it is refused at start.
func TestTemplateRefuses(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{`{{.Message`, "at byte 0: {{ without }}"},
		{`ok {{.Nodes}}`, `at byte 3: {{.Nodes}}: ".Nodes" is not a field`},
		{`{{Node}}`, `"Node" is not a field`},
		{`{{json (printf "%s" .Node)}}`, "a placeholder is {{.Field}} or {{json .Field}}"},
		{`{{if .Node}}x{{end}}`, "a placeholder is"},
		{`{{- .Node}}`, "a placeholder is"},
		{`{{}}`, "a placeholder is"},
		{`{{quote .Node}}`, "a placeholder is"},
	} {
		_, err := ParseTemplate("ops", tt.text)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "template ops: ") {
			t.Errorf("%q: error %v, want one with %q", tt.text, err, tt.want)
		}
	}
}

// Parsing never panics, and text without placeholders renders as itself.
func FuzzParseTemplate(f *testing.F) {
	f.Add(`{"node":{{json .Node}}}`)
	f.Add(`{{.Time}} {{`)
	f.Fuzz(func(t *testing.T, text string) {
		tmpl, err := ParseTemplate("f", text)
		if err != nil {
			return
		}
		out := tmpl.Render(values)
		if !strings.Contains(text, "{{") && string(out) != text {
			t.Fatalf("%q without placeholders rendered %q", text, out)
		}
	})
}
