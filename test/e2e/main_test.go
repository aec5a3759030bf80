//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	agentOnce sync.Once
	agentDir  string // removed by TestMain
	agentPath string
	agentErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if agentDir != "" {
		_ = os.RemoveAll(agentDir)
	}
	os.Exit(code)
}

// agentBinary builds node-agent from this tree once per test run, so a test
// never boots a stale bin/node-agent. It is built as `make build` builds it
// (cgo, -tags libvirt_dlopen, glibc linked dynamically): the host and the
// rootfs are both Debian bookworm, so the host's build runs in the container.
// Only the tests that need it pay for the build.
func agentBinary(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "node-agent-e2e-")
		if err != nil {
			agentErr = err
			return
		}
		agentDir = dir
		out := filepath.Join(dir, "node-agent")
		cmd := exec.Command("go", "build", "-tags", "libvirt_dlopen", "-o", out, "github.com/node-agent/node-agent/cmd/node-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("building node-agent for the end-to-end tests: %v\n%s", err, b)
			return
		}
		agentPath = out
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentPath
}
