// Package integration holds the tests that run node-agent against a real
// kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok.
package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// agentBinary is node-agent built from this tree once per test run, so the
// tests never exercise a stale bin/node-agent.
var agentBinary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "node-agent-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agentBinary = filepath.Join(dir, "node-agent")
	cmd := exec.Command("go", "build", "-tags", "libvirt_dlopen", "-o", agentBinary, "github.com/node-agent/node-agent/cmd/node-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building node-agent for the integration tests:", err)
		return 1
	}
	return m.Run()
}
