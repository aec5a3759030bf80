package spec

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Fields are what a webhook template can place, in the order of the json
// preset's keys. Time is written in RFC 3339 (UTC).
var Fields = []string{"Event", "Node", "Reason", "Type", "Message", "Time"}

// Template is a webhook's body: text with placeholders. {{.Field}} places a
// field's text as it is; {{json .Field}} places it as a JSON string. Spaces
// inside the braces are allowed; nothing else goes between them, and text
// outside them is copied as it is.
//
// It is not Go's text/template, whose method calls by name keep every
// exported method of every type in the binary (the linker cannot tell
// which a template may call); that made the agent's binary a sixth larger
// and its idle memory about a MiB higher (issue 43). A body places fields;
// it does not compute, so a template from the ConfigMap can do no more
// than that.
type Template struct {
	parts []part
}

// part is literal text, or a field with how to write it.
type part struct {
	text  string
	field string
	json  bool
}

// ParseTemplate parses a webhook template. It refuses anything between
// {{ and }} that is not a placeholder of a known field, and a {{ without
// its }}, naming where. A }} outside a placeholder is text, as a JSON
// body's closing braces are.
func ParseTemplate(name, text string) (*Template, error) {
	t := &Template{}
	rest, at := text, 0
	for {
		open := strings.Index(rest, "{{")
		if open < 0 {
			t.literal(rest)
			return t, nil
		}
		t.literal(rest[:open])
		end := strings.Index(rest[open:], "}}")
		if end < 0 {
			return nil, fmt.Errorf("template %s: at byte %d: {{ without }}", name, at+open)
		}
		inner := rest[open+2 : open+end]
		p, err := placeholder(inner)
		if err != nil {
			return nil, fmt.Errorf("template %s: at byte %d: {{%s}}: %w", name, at+open, inner, err)
		}
		t.parts = append(t.parts, p)
		at += open + end + 2
		rest = rest[open+end+2:]
	}
}

func (t *Template) literal(s string) {
	if s != "" {
		t.parts = append(t.parts, part{text: s})
	}
}

// placeholder reads what is between the braces: ".Field" or "json .Field".
func placeholder(inner string) (part, error) {
	words := strings.Fields(inner)
	p := part{}
	switch {
	case len(words) == 1:
	case len(words) == 2 && words[0] == "json":
		p.json = true
	default:
		return part{}, fmt.Errorf("a placeholder is {{.Field}} or {{json .Field}}, with Field one of %s", strings.Join(Fields, ", "))
	}
	name, ok := strings.CutPrefix(words[len(words)-1], ".")
	if !ok || !known(name) {
		return part{}, fmt.Errorf("%q is not a field; the fields are %s", words[len(words)-1], strings.Join(Fields, ", "))
	}
	p.field = name
	return p, nil
}

func known(name string) bool { return slices.Contains(Fields, name) }

// Render writes the body, taking each field's text from value (called with
// one of Fields).
func (t *Template) Render(value func(field string) string) []byte {
	var b []byte
	for _, p := range t.parts {
		switch {
		case p.field == "":
			b = append(b, p.text...)
		case p.json:
			q, _ := json.Marshal(value(p.field)) // a string always marshals
			b = append(b, q...)
		default:
			b = append(b, value(p.field)...)
		}
	}
	return b
}
