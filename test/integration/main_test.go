// Package integration holds the tests that run node-agent against a real
// kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok.
package integration

import (
	"fmt"
	"os"
	"testing"

	"github.com/node-agent/node-agent/test/testenv"
)

// agentBinary is the node-agent the tests run: $NODE_AGENT_BINARY, or one
// built from this tree once per test run (testenv.AgentBinary).
var agentBinary string

// The tests that call t.Parallel spend most of their time waiting out a
// bound (a drain timeout, deleteAfter, a heartbeat or blocker bound, a PDB
// that still counts a killed eviction), not working. Each has its own
// control plane, so they wait side by side once the others have run, two
// at a time on a 2-core machine (go test's -parallel defaults to
// GOMAXPROCS). A test that measures how long something takes, whose
// timing is fixed in advance (TestMaintenanceGate's gate opens at a set
// time), or that sets the environment, stays serial.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	defer testenv.RemoveAgentBuild()
	bin, err := testenv.AgentBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-agent for the integration tests:", err)
		return 1
	}
	agentBinary = bin
	return m.Run()
}
