package codeshape

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBinariesKeepDeadCodeElimination links the agent and the coordinator
// and fails if anything in them calls a method by name through reflect
// (text/template's field evaluation, reflect.Value.MethodByName and the
// like). The linker then keeps every exported method of every type that
// can reach an interface, because it cannot tell which one will be called:
// with text/template in pkg/notify the agent's binary was a sixth larger
// and its idle RSS about a MiB higher (issue 43, docs/footprint.md). The
// linker's -dumpdep marks such a function <ReflectMethod>.
func TestBinariesKeepDeadCodeElimination(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the shipped binaries are linux ones")
	}
	root := repoRoot(t)
	for _, cmd := range []string{"node-agent", "node-agent-coordinator"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			c := exec.Command("go", "build", "-tags", "libvirt_dlopen", "-ldflags=-dumpdep", "-o", filepath.Join(t.TempDir(), cmd), "./cmd/"+cmd)
			c.Dir = root
			c.Env = append(os.Environ(), "CGO_ENABLED=0")
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			if err := c.Run(); err != nil {
				t.Fatalf("go build: %v\n%s", err, tail(out.String()))
			}
			deps := out.String()
			if !strings.Contains(deps, " -> ") {
				t.Fatalf("go build -ldflags=-dumpdep printed no dependency; the check saw nothing:\n%s", tail(deps))
			}
			seen := map[string]bool{}
			var dynamic []string
			sc := bufio.NewScanner(strings.NewReader(deps))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				from, _, ok := strings.Cut(sc.Text(), " <ReflectMethod>")
				if ok && !seen[from] {
					seen[from] = true
					dynamic = append(dynamic, from)
				}
			}
			if len(dynamic) > 8 {
				dynamic = append(dynamic[:8], "…")
			}
			if len(dynamic) > 0 {
				t.Errorf("%s calls methods by name through reflect, so the linker keeps every exported method; from: %s", cmd, strings.Join(dynamic, ", "))
			}
		})
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}
