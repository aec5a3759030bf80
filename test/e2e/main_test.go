//go:build linux

package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveAgentBuild()
	os.Exit(code)
}

// agentBinary is node-agent built as `make build` builds it (cgo, -tags
// libvirt_dlopen, glibc linked dynamically), or $NODE_AGENT_BINARY
// (testenv.AgentBinary): the host and the rootfs are both Debian bookworm,
// so the host's build runs in the container. Only the tests that need it
// pay for the build.
func agentBinary(t *testing.T) string {
	t.Helper()
	p, err := testenv.AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor polls cond every 200 ms until it holds; it fails the test when
// ctx ends first. The test's context is the only bound, so a loaded machine
// only makes the test slower, never failed.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	if err := testenv.Poll(ctx, 200*time.Millisecond, what, cond); err != nil {
		t.Fatal(err)
	}
}
