package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoPartialOutput: a build that fails leaves neither the archive nor a
// temporary file; one that works leaves only the archive (and, for a layer,
// its side file).
func TestNoPartialOutput(t *testing.T) {
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	notGzip := filepath.Join(t.TempDir(), "layer.tar.gz")
	if err := os.WriteFile(notGzip, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	listing := func(dir string) string {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return strings.Join(names, " ")
	}
	for name, tc := range map[string]struct {
		args  []string
		files string // in the output directory afterwards
	}{
		"bad layer":          {args: []string{"--name", "localhost/t:v1", "--layer", tree, "--layer", notGzip}},
		"no layer":           {args: []string{"--name", "localhost/t:v1", "--layer", filepath.Join(tree, "missing")}},
		"bad name":           {args: []string{"--name", "t:v1", "--layer", tree}},
		"image":              {args: []string{"--name", "localhost/t:v1", "--layer", tree}, files: "out"},
		"layer-only":         {args: []string{"--layer-only", "--layer", tree}, files: "out out.diffid.json"},
		"layer-only, no dir": {args: []string{"--layer-only", "--layer", filepath.Join(tree, "missing")}},
	} {
		dir := t.TempDir()
		args := append([]string{"--out", filepath.Join(dir, "out"), "--epoch", "1"}, tc.args...)
		err := run(args)
		if (err == nil) != (tc.files != "") {
			t.Errorf("%s: error %v", name, err)
		}
		if got := listing(dir); got != tc.files {
			t.Errorf("%s: left %q in the output directory, want %q", name, got, tc.files)
		}
	}
}
