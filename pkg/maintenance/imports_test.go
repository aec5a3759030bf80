package maintenance

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The rule this package exists for: the sides of the handshake do not
// import one another, nor this package; each takes what it needs of the
// others as functions, and this package supplies them.
func TestSidesDoNotImportEachOther(t *testing.T) {
	const module = "github.com/node-agent/node-agent/pkg/"
	sides := []string{"reboot", "selfdrain", "shutdown"}
	for _, side := range sides {
		files, err := filepath.Glob(filepath.Join("..", side, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s: %v", side, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, other := range append(sides, "maintenance") {
					if other != side && path == module+other {
						t.Errorf("%s imports pkg/%s: hand it a function in its options instead, and put the rule in pkg/maintenance", f, other)
					}
				}
			}
		}
	}
}
