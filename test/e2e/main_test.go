//go:build linux

package e2e

import (
	"os"
	"testing"

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
