package inputs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRegisterMatchesCode: every annotation or label key the code declares
// as a constant named ...Annotation, ...Label or ...TaintKey (or a slot Lease's
// annotation) is in the register, so a new input cannot ship without saying
// who may write it. The labels the labeller writes (pkg/kubevirtlabels) are
// its output, listed in docs/labels.md, and are left out.
func TestRegisterMatchesCode(t *testing.T) {
	// Keys the code declares that are not read from outside.
	notRead := map[string]string{
		// pkg/confinement writes it in a dry run the policy must refuse.
		"node-agent.io/confinement-probe": "a dry-run write, never read",
	}
	names := map[string]bool{}
	for k := range notRead {
		names[k] = true
	}
	for _, in := range Register {
		names[in.Name] = true
	}
	root := filepath.Join("..", "..", "pkg")
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); base == "kubevirtlabels" || base == "inputs" || base == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					prefix := strings.HasSuffix(n.Name, "AnnotationPrefix")
					if !prefix && !strings.HasSuffix(n.Name, "Annotation") && !strings.HasSuffix(n.Name, "Label") && !strings.HasSuffix(n.Name, "TaintKey") && !strings.HasPrefix(n.Name, "Lease") {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					if !strings.Contains(v, "/") {
						continue
					}
					found++
					if prefix {
						// A family of keys (maintenance.node-agent.io/<owner>):
						// the register names it with the prefix.
						if !slices.ContainsFunc(Register, func(in Input) bool { return strings.HasPrefix(in.Name, v) }) {
							t.Errorf("%s: %s = %q starts keys read from outside, but pkg/inputs' Register has none", path, n.Name, v)
						}
						continue
					}
					if !names[v] {
						t.Errorf("%s: %s = %q is read from outside, but pkg/inputs' Register does not say who may write it", path, n.Name, v)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 8 {
		t.Fatalf("found only %d annotation and label constants; the scan is broken", found)
	}
}

// TestRegisterComplete: every entry says who writes it, what it is trusted
// for and what bounds it.
func TestRegisterComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, in := range Register {
		key := string(in.Kind) + " " + in.Name + " on " + in.On
		if seen[key] {
			t.Errorf("%s is registered twice", key)
		}
		seen[key] = true
		if len(in.Writers) == 0 || in.Reader == "" || strings.TrimSpace(in.TrustedFor) == "" || strings.TrimSpace(in.Bound) == "" {
			t.Errorf("%s: incomplete entry %+v", key, in)
		}
	}
}

// TestDocsUpToDate keeps docs/inputs.md the register's; UPDATE_DOCS=1 (make
// docs) rewrites it.
func TestDocsUpToDate(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "inputs.md")
	want := Markdown()
	if os.Getenv("UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; run `make docs`", err)
	}
	if string(got) != want {
		t.Errorf("%s is out of date; run `make docs`", path)
	}
}
