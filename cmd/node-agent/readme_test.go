package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines keeps the README a page a newcomer reads through: the
// reference lives in docs/, one link away.
const readmeMaxLines = 450

// pendingPages are pages another change adds. A link to one is tolerated only
// while the file is missing; once it exists, its links are checked like any.
var pendingPages = map[string]bool{
	"docs/glossary.md": true, // written on its own branch
}

// TestReadmeShort holds the README to readmeMaxLines.
func TestReadmeShort(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail into a page under docs/ and link it", n, readmeMaxLines)
	}
}

// TestDocLinksResolve checks every relative link of README.md and of the
// pages under docs/: the file it names exists, and so does the heading its
// #fragment names (GitHub's anchors), so that moving a section never leaves a
// link pointing at nothing.
func TestDocLinksResolve(t *testing.T) {
	const root = "../.."
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[file] = a
		return a, nil
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(b)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(l.target, "#")
			target := file
			if path != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					if pendingPages[target] {
						continue
					}
					t.Errorf("%s:%d: link %q: %s does not exist", file, l.line, l.target, target)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			a, err := anchorsOf(target)
			if err != nil {
				t.Fatal(err)
			}
			if !a[frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", file, l.line, l.target, target, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links found in README.md and docs/; the link pattern no longer matches", checked)
	}
}

type mdLink struct {
	line   int
	target string
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// markdownLinks returns the targets of the inline links outside fenced code
// blocks and code spans.
func markdownLinks(text string) []mdLink {
	var links []mdLink
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			links = append(links, mdLink{line: i + 1, target: m[1]})
		}
	}
	return links
}

func stripCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 0 {
			b.WriteString(p)
		}
	}
	return b.String()
}

// headingAnchors returns the anchors GitHub gives the headings of a page: the
// text lowercased, punctuation dropped, spaces turned into hyphens, and a
// -1, -2... suffix on a repeat.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# Kubernetes 1.37: node lifecycle conditions and EvictionRequests\n" +
		"## kured's options and node-agent's keys\n## Request values\n## Request values\n" +
		"```\n# not a heading\n```\n### 1. The image\n")
	for _, want := range []string{
		"kubernetes-137-node-lifecycle-conditions-and-evictionrequests",
		"kureds-options-and-node-agents-keys",
		"request-values", "request-values-1", "1-the-image",
	} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a comment in a code block became an anchor: %v", got)
	}
}

// layoutPending are Layout rows for packages another change adds: tolerated
// only while the directory is missing.
var layoutPending = map[string]bool{}

// layoutDissolving are packages being folded into others: the Layout leaves
// them out. Remove an entry once its package is gone.
var layoutDissolving = map[string]bool{}

// TestReadmeLayout holds the README's Layout to the module: every package
// `go list ./...` finds has its row, and every row names a path that exists.
func TestReadmeLayout(t *testing.T) {
	const root = "../.."
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no \"## Layout\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		path, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
		path = strings.TrimSuffix(path, "/")
		rows[path] = true
		if _, err := os.Stat(filepath.Join(root, path)); err != nil && !layoutPending[path] {
			t.Errorf("README.md Layout: row %q names nothing in the repository", path)
		}
	}
	const module = "github.com/node-agent/node-agent"
	cmd := exec.Command("go", "list", "-tags", "libvirt_dlopen", "./...")
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderr.String())
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list ./... found only %v", pkgs)
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if !rows[rel] && !layoutDissolving[rel] {
			t.Errorf("README.md Layout has no row for %s: add one line saying its one job", rel)
		}
	}
}
