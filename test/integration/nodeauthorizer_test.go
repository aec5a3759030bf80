package integration

import (
	"strings"
	"testing"

	"github.com/node-agent/node-agent/test/testenv"
)

// TestWithoutNodeAuthorizer is issue 40's last acceptance: on a cluster
// whose kube-apiserver runs without the Node authorizer
// (--authorization-mode=RBAC), the constrained impersonation of the node is
// allowed but the node is then refused its own Node. The agent, with
// deploy/'s ServiceAccount and a token bound to its pod, falls back to the
// ServiceAccount's own read of its Node (as the README promises), turns
// ready, and says once, in one line, that the Node authorizer is missing;
// its drains are refused with a line that names it too.
func TestWithoutNodeAuthorizer(t *testing.T) {
	opts := testenv.Options{Controllers: true, Scheduler: true, Kwok: true,
		// Replaces the harness's --authorization-mode=Node,RBAC.
		APIServerArgs: []string{"--authorization-mode=RBAC"}}
	env := testenv.StartForTest(t, opts)
	installAgentIdentity(t, env)
	if err := env.AddNode(t.Context(), "node-1"); err != nil {
		t.Fatal(err)
	}
	kubeconfig := agentKubeconfig(t, env, "node-1")
	// The agent's refusals are this test's subject: startAgent's check for
	// none does not apply.
	identities.Delete(env)
	agent := startAgent(t, env, "node-1", "--kubeconfig", kubeconfig, "--shutdown-enabled=false", "--labeller-enabled=false")
	agent.WaitReady(t)

	const fellBack = "Reading the own Node as the node itself was refused"
	var lines []string
	for _, l := range strings.Split(agent.Log(), "\n") {
		if strings.Contains(l, fellBack) {
			lines = append(lines, l)
		}
	}
	switch {
	case len(lines) != 1:
		t.Errorf("the agent said %d times that it reads its Node with the ServiceAccount, want once:\n%s", len(lines), agent.Tail(30))
	case !strings.Contains(lines[0], "--authorization-mode lacks Node") || !strings.Contains(lines[0], "level=WARN"):
		t.Errorf("the line does not name the missing Node authorizer as a warning: %s", lines[0])
	default:
		t.Logf("agent: %s", lines[0])
	}
	const noPods = "drains are refused: the agent cannot reach its node's pods"
	found := false
	for _, l := range strings.Split(agent.Log(), "\n") {
		if strings.Contains(l, noPods) {
			found = true
			if !strings.Contains(l, "--authorization-mode lacks Node") {
				t.Errorf("the pod access line does not name the missing Node authorizer: %s", l)
			}
		}
	}
	if !found {
		t.Errorf("the agent did not say that drains are refused:\n%s", agent.Tail(30))
	}
	// It keeps working: no failed watch of its Node after it is ready.
	if n := strings.Count(agent.Log(), "Failed to watch"); n > 0 {
		t.Errorf("%d failed watches logged:\n%s", n, agent.Tail(30))
	}
}
