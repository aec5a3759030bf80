package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
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
	// Labelling on, from cpuid alone (no libvirt behind the socket): the
	// labels show the agent works, not only that it is ready.
	agent := startAgent(t, env, "node-1", "--kubeconfig", kubeconfig, "--shutdown-enabled=false",
		"--libvirt-uri=qemu:///system?socket=/nonexistent/libvirt-sock")
	agent.WaitReady(t)
	testenv.WaitFor(t, time.Minute, "cpu-feature labels on node-1", func() (bool, error) {
		for k := range getNode(t, env.Client(), "node-1").Labels {
			if strings.HasPrefix(k, kubevirtlabels.CPUFeatureLabelPrefix) {
				return true, nil
			}
		}
		return false, nil
	})

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
	// And the metric says who reads the Node after the line has scrolled
	// away.
	if v := scrape(t, agent.MetricsAddr, `node_agent_own_node_reader{identity="serviceaccount"}`); v != 1 {
		t.Errorf(`node_agent_own_node_reader{identity="serviceaccount"} = %v, want 1`, v)
	}
}

// TestOwnNodeRefusedToEveryIdentity is the other answer issue 40 allows: on
// a cluster without the Node authorizer, an identity refused its Node both
// as the node and as itself (here a ServiceAccount with no grant at all)
// cannot work, and the agent says so: it exits non-zero, rather than
// watching a refused Node for ever, with one line that names the missing
// right.
func TestOwnNodeRefusedToEveryIdentity(t *testing.T) {
	env := testenv.StartForTest(t, testenv.Options{Controllers: true, Kwok: true,
		APIServerArgs: []string{"--authorization-mode=RBAC"}})
	if err := env.AddNode(t.Context(), "node-1"); err != nil {
		t.Fatal(err)
	}
	c := env.Client()
	const ns, sa = "unbound", "nobody"
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hour := int64(3600)
	tok, err := c.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "nobody.kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, env.TokenConfig(tok.Status.Token)); err != nil {
		t.Fatal(err)
	}
	agent := testenv.StartAgent(t, testenv.AgentOptions{Binary: agentBinary, Kubeconfig: kubeconfig, Node: "node-1",
		Args: []string{"--shutdown-enabled=false", "--labeller-enabled=false"}})
	var exit error
	testenv.WaitFor(t, time.Minute, "the agent to exit, refused its Node", func() (bool, error) {
		err, done := agent.Exited()
		exit = err
		return done, nil
	})
	if exit == nil {
		t.Errorf("the agent exited 0, want non-zero:\n%s", agent.Tail(20))
	}
	const missing = "grant the agent's ServiceAccount get, list and watch on nodes"
	var lines []string
	for _, l := range strings.Split(agent.Log(), "\n") {
		if strings.Contains(l, missing) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "node-1") {
		t.Errorf("want one line naming node-1 and the missing right (%q), got %d:\n%s", missing, len(lines), agent.Tail(20))
	} else {
		t.Logf("agent: %s", lines[0])
	}
	if n := strings.Count(agent.Log(), "Failed to watch"); n > 0 {
		t.Errorf("%d failed watches logged, want none: the agent stops before it watches", n)
	}
}
