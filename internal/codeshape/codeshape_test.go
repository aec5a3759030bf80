// Package codeshape holds the repository's size rules as a test: no product
// file, function or package grows past what one person reads in one go. It
// has no product code; the test parses every non-test Go file under cmd/,
// pkg/ and internal/.
package codeshape

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The limits. Lines are counted as an editor numbers them, comments and
// blank lines included; a function runs from its func keyword to its closing
// brace, so a function literal counts inside its enclosing function too.
const (
	maxFileLines = 700
	maxFuncLines = 120
	// maxCmdLines bounds cmd/node-agent: main wires options to packages
	// and keeps no behaviour of its own (STYLE.md, "Keep main small").
	maxCmdLines = 800
	cmdDir      = "cmd/node-agent"
	// maxPackageLines bounds each package directory under pkg/: a
	// package that outgrows it owns more than one thing.
	maxPackageLines = 3000
)

// exception lets one file or function past its limit because it is a table
// of data, not code: splitting a table into parts makes it no easier to
// read. Each entry says which table it is; code that is simply long gets no
// entry.
type exception struct {
	file string // slash-separated, from the repository's root
	fn   string // the function (funcName's form); "" for the file itself
	why  string // which table of data it is
}

// exceptions are the data tables allowed past a limit. None is needed today.
var exceptions = []exception{}

// pending is a violation that another branch of the current issue removes.
type pending struct {
	// what is a file, a function (file + ": " + funcName) or a package
	// directory, as the violation names it.
	what  string
	owner string
}

// pendingElsewhere is TEMPORARY: the violations that other engineers' branches
// of the current issue remove, listed so that this test passes on the branch
// that added it. The lead empties this list after merging those branches; an
// entry that no longer matches a violation fails the test, so it cannot
// outlive its reason.
var pendingElsewhere = []pending{}

// violation is one rule broken, keyed by what breaks it.
type violation struct {
	what, msg string
}

func TestCodeShape(t *testing.T) {
	root := repoRoot(t)
	var found []violation
	cmdLines := 0
	pkgLines := map[string]int{}
	for _, top := range []string{"cmd", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			lines, funcs, err := measure(rel, src)
			if err != nil {
				return err
			}
			if lines > maxFileLines {
				found = append(found, violation{rel, fmt.Sprintf("%s: %d lines, %d over the %d-line limit for a file: split it into files with one job each",
					rel, lines, lines-maxFileLines, maxFileLines)})
			}
			for _, f := range funcs {
				if f.lines > maxFuncLines {
					found = append(found, violation{rel + ": " + f.name, fmt.Sprintf("%s:%d: %s: %d lines, %d over the %d-line limit for a function: extract its steps into named functions",
						rel, f.line, f.name, f.lines, f.lines-maxFuncLines, maxFuncLines)})
				}
			}
			dir := filepath.ToSlash(filepath.Dir(rel))
			if dir == cmdDir {
				cmdLines += lines
			}
			if strings.HasPrefix(dir, "pkg/") {
				pkgLines[dir] += lines
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if cmdLines == 0 {
		t.Fatalf("no Go file found in %s: the walk is broken, or the command moved", cmdDir)
	}
	if cmdLines > maxCmdLines {
		found = append(found, violation{cmdDir, fmt.Sprintf("%s: %d non-test lines, %d over the %d-line limit for the command (main wires options to packages): move behaviour into pkg/",
			cmdDir, cmdLines, cmdLines-maxCmdLines, maxCmdLines)})
	}
	for dir, n := range pkgLines {
		if n > maxPackageLines {
			found = append(found, violation{dir, fmt.Sprintf("%s: %d non-test lines, %d over the %d-line limit for a package under pkg/: split what it owns into packages",
				dir, n, n-maxPackageLines, maxPackageLines)})
		}
	}
	slices.SortFunc(found, func(a, b violation) int { return strings.Compare(a.msg, b.msg) })

	allowed := map[string]string{}
	for _, e := range exceptions {
		if e.why == "" {
			t.Errorf("exception %s %s names no table of data: say which table it is, or shorten the code", e.file, e.fn)
		}
		key := e.file
		if e.fn != "" {
			key += ": " + e.fn
		}
		allowed[key] = "exception (" + e.why + ")"
	}
	for _, p := range pendingElsewhere {
		allowed[p.what] = "pendingElsewhere (" + p.owner + ")"
	}
	used := map[string]bool{}
	for _, v := range found {
		if _, ok := allowed[v.what]; ok {
			used[v.what] = true
			t.Logf("allowed for now: %s", v.msg)
			continue
		}
		t.Error(v.msg)
	}
	for what, list := range allowed {
		if !used[what] {
			t.Errorf("%s is listed as %s but breaks no size rule: remove its entry", what, list)
		}
	}
}

// funcSize is one function or function literal and its length in lines.
type funcSize struct {
	name  string
	line  int
	lines int
}

// measure returns the lines of the file src and the size of every function
// and function literal in it.
func measure(name string, src []byte) (int, []funcSize, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return 0, nil, err
	}
	lines := fset.File(file.Pos()).LineCount()
	var out []funcSize
	size := func(name string, from, to token.Pos) {
		start, end := fset.Position(from).Line, fset.Position(to).Line
		out = append(out, funcSize{name: name, line: start, lines: end - start + 1})
	}
	for _, decl := range file.Decls {
		owner := "package-level"
		if fd, ok := decl.(*ast.FuncDecl); ok {
			owner = funcName(fd)
			if fd.Body != nil {
				size(owner, fd.Pos(), fd.End())
			}
		}
		// A literal is F.funcN, N counting the literals of F's
		// declaration in source order, nested ones included: a name that
		// stays put while lines move, for an exception to name.
		n := 0
		ast.Inspect(decl, func(node ast.Node) bool {
			if lit, ok := node.(*ast.FuncLit); ok {
				n++
				size(fmt.Sprintf("%s.func%d", owner, n), lit.Pos(), lit.End())
			}
			return true
		})
	}
	return lines, out, nil
}

// funcName is F for a function and T.F for a method (on T or *T).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr: // a generic type, T[P]
		t = x.X
	case *ast.IndexListExpr: // T[P, Q]
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// repoRoot is the directory of go.mod, above this package's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// The measure itself: a file's lines, a function's and a literal's, named so
// that an exception can name them.
func TestMeasure(t *testing.T) {
	var b strings.Builder
	b.WriteString("package p\n\n")          // lines 1-2
	b.WriteString("type T struct{}\n\n")    // lines 3-4
	b.WriteString("func (t *T) M() {\n")    // line 5
	b.WriteString("\tf := func() {\n")      // line 6
	b.WriteString("\t\tg := func() {}\n")   // line 7
	b.WriteString("\t\t_ = g\n")            // line 8
	b.WriteString("\t}\n")                  // line 9
	b.WriteString("\t_ = f\n")              // line 10
	b.WriteString("}\n\n")                  // lines 11-12
	b.WriteString("var v = func() int {\n") // line 13
	b.WriteString("\treturn 1\n")           // line 14
	b.WriteString("}\n")                    // line 15
	b.WriteString("\nfunc F()\n")           // lines 16-17: no body
	lines, funcs, err := measure("p.go", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if lines != 17 {
		t.Errorf("lines = %d, want 17", lines)
	}
	want := []funcSize{
		{name: "T.M", line: 5, lines: 7},
		{name: "T.M.func1", line: 6, lines: 4},
		{name: "T.M.func2", line: 7, lines: 1},
		{name: "package-level.func1", line: 13, lines: 3},
	}
	if !slices.Equal(funcs, want) {
		t.Errorf("functions = %+v, want %+v", funcs, want)
	}
}
