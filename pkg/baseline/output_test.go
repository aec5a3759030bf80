package baseline

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestWrite(t *testing.T) {
	r := Compute([]NodeCPU{
		node("a", []string{"Haswell", "Penryn", "Skylake-Client"}, []string{"avx2"}),
		node("b", []string{"Haswell", "Penryn"}, []string{"avx2"}),
	})
	var table bytes.Buffer
	if err := r.Write(&table, FormatTable); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "Baseline CPU model: Haswell (every selected node can run it)\n") {
		t.Errorf("table:\n%s", table.String())
	}
	for format, unmarshal := range map[string]func([]byte, any) error{
		FormatJSON: json.Unmarshal,
		FormatYAML: func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) },
	} {
		var b bytes.Buffer
		if err := r.Write(&b, format); err != nil {
			t.Fatal(err)
		}
		var got Result
		if err := unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v\n%s", format, err, b.String())
		}
		if got.Model != "Haswell" || len(got.Candidates) != 1 || got.Candidates[0].Model != "Skylake-Client" {
			t.Errorf("%s read back as %+v", format, got)
		}
	}
	if err := r.Write(&bytes.Buffer{}, "xml"); err == nil {
		t.Error("format xml accepted")
	}
}
