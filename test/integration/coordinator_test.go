package integration

import (
	"bytes"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// Without a drain slot coordinator no maintenance drain and no coordinated
// reboot ever starts (pkg/slots): every control plane whose agents drain
// needs one. startAgent starts it with the first agent of a control plane,
// so the tests about the agent need not think of it; a test about the
// coordinator, or about its absence, says so (startCoordinator,
// withoutCoordinator).

// coordinators holds, per control plane, the coordinator its agents share.
var coordinators sync.Map // *testenv.Env -> *envCoordinator

type envCoordinator struct {
	// off: the test runs the agents without a coordinator
	// (withoutCoordinator).
	off bool
	c   *testenv.Coordinator
	// config is the configuration file c reads (testenv.CoordinatorConfig).
	config []byte
	// args are the agent arguments config was made from.
	args []string
}

// withoutCoordinator makes startAgent start no coordinator for env: the
// test shows what agents do without one, or starts its own later.
func withoutCoordinator(t *testing.T, env *testenv.Env) {
	t.Helper()
	if v, ok := coordinators.Load(env); ok && !v.(*envCoordinator).off {
		t.Fatal("withoutCoordinator after a coordinator was started for this control plane")
	}
	coordinators.Store(env, &envCoordinator{off: true})
}

// startCoordinator runs node-agent-coordinator for env, as admin (the
// agent's tests are about the agent; the coordinator's shipped
// ServiceAccount is the deploy tests'), reading what agents run with
// agentArgs read (testenv.CoordinatorConfig): the limits are the
// coordinator's to apply, not the agents'. It creates slots.namespace
// when it is missing, as deploy/ would have, and waits until the
// coordinator leads and is ready (it has read the Nodes and slot Leases).
// From then on startAgent checks that every agent of env
// agrees with it. It is stopped when t ends.
func startCoordinator(t *testing.T, env *testenv.Env, agentArgs ...string) *testenv.Coordinator {
	t.Helper()
	cfgFile, err := testenv.CoordinatorConfig(agentArgs)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Parse(cfgFile, config.Default())
	if err != nil {
		t.Fatalf("the coordinator's configuration\n%s: %v", cfgFile, err)
	}
	if _, err := env.CreateNamespace(t.Context(), cfg.Slots.Namespace); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c := testenv.StartCoordinator(t, testenv.CoordinatorOptions{
		Binary: testenv.CoordinatorBinary(agentBinary), Kubeconfig: env.KubeconfigPath(), Config: cfgFile,
	})
	useCoordinator(t, env, c, agentArgs...)
	c.WaitLeading(t, coordinatorLeadTimeout)
	c.WaitReady(t)
	return c
}

// useCoordinator makes c env's coordinator until t ends, for agents run
// with agentArgs: startAgent then starts none, and checks that every agent
// agrees with what c reads. startCoordinator uses it; a test that runs its
// coordinator otherwise (as the coordinator's shipped ServiceAccount, say)
// calls it before its first startAgent.
func useCoordinator(t *testing.T, env *testenv.Env, c *testenv.Coordinator, agentArgs ...string) {
	t.Helper()
	cfgFile, err := testenv.CoordinatorConfig(agentArgs)
	if err != nil {
		t.Fatal(err)
	}
	entry := &envCoordinator{c: c, config: cfgFile, args: agentArgs}
	if prev, loaded := coordinators.Swap(env, entry); loaded && prev.(*envCoordinator).c != nil {
		if _, exited := prev.(*envCoordinator).c.Exited(); !exited {
			t.Logf("a second coordinator for this control plane, %s; %s is still running", c.Identity, prev.(*envCoordinator).c.Identity)
		}
	}
	t.Cleanup(func() {
		coordinators.CompareAndDelete(env, entry)
		if t.Failed() {
			t.Logf("%s log:\n%s", c.Identity, c.Tail(40))
		}
	})
}

// coordinatorLeadTimeout bounds the wait for a coordinator to lead: at
// once on a fresh control plane; a Lease duration (15 s) and a retry period
// after a leader that was killed.
const coordinatorLeadTimeout = 45 * time.Second

// coordinatorFor makes sure env has the coordinator an agent run with
// agentArgs needs: it starts one for the first agent, and fails the test
// when a later agent needs the coordinator to read something else.
func coordinatorFor(t *testing.T, env *testenv.Env, agentArgs []string) {
	t.Helper()
	v, ok := coordinators.Load(env)
	if !ok {
		startCoordinator(t, env, agentArgs...)
		return
	}
	e := v.(*envCoordinator)
	if e.off {
		return
	}
	want, err := testenv.CoordinatorConfig(agentArgs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, e.config) {
		t.Fatalf("node-agent with %q needs a coordinator that reads\n%s\nbut the coordinator of this control plane (%s, started for agents with %q) reads\n%s\n"+
			"give the agents the same drain settings, or start a coordinator per setting yourself", agentArgs, want, e.c.Identity, e.args, e.config)
	}
}

// coordinatorMetric reads a metric of env's coordinator
// (testenv.Coordinator.Metric).
func coordinatorMetric(t *testing.T, env *testenv.Env, series string) float64 {
	t.Helper()
	v, ok := coordinators.Load(env)
	if !ok || v.(*envCoordinator).c == nil {
		t.Fatal("no coordinator runs for this control plane")
	}
	m, err := v.(*envCoordinator).c.Metric(series)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// holdSlot makes node hold a drain slot with no agent on it, as admin: it
// writes the request node's agent would write (pkg/slots), waits until the
// coordinator grants it, and keeps the request's heartbeat going until the
// test ends, so the slot stays node's however long the test runs. It
// returns the grant.
func holdSlot(t *testing.T, c kubernetes.Interface, node string) *slots.Grant {
	t.Helper()
	h := askForSlot(t, c, node)
	h.waitGranted(t, c)
	g := grantOn(t, c, node)
	t.Logf("%s holds drain slot %s", node, g.Slot)
	return g
}
