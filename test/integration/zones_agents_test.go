package integration

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestAgentsDrainZoneByZone is TestSlotsDrainZoneByZone with the agents:
// six kwok nodes in three zones, one agent on each (as the shipped
// ServiceAccount), a pool of every node with a limit of two nodes, one zone
// (maxDomains 1) and a safety stop at the first unhealthy node
// (maxUnhealthy 0), and all six asked into maintenance. zone-a-1 runs a pod
// that a PodDisruptionBudget keeps, so zone a holds a slot until the test
// deletes the budget: meanwhile the nodes of the other zones wait, and
// their maintenance record, and `node-agent maintenance status`, say that
// they wait for zone a. Once the budget is gone every node drains, zone by
// zone (the watch of the slot Leases fails at the first change where two
// zones hold slots). The drained nodes stay cordoned by their agents
// (drain.onTimeout keepCordoned keeps a Succeeded maintenance cordoned
// until it ends): were those cordons counted by the safety stop, no zone
// after the first would ever drain.
func TestAgentsDrainZoneByZone(t *testing.T) {
	env := fullEnv(t)
	ctx := t.Context()
	c := env.Client()
	const ns = "work"
	if _, err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	installAgentIdentity(t, env)
	zoneOf := map[string]string{}
	// The held pod first, so that it lands on zone-a-1.
	addZonedNodes(t, env, zoneOf, "zone-a", "zone-a-1")
	testenv.CreateDeployment(ctx, t, c, ns, "db", 1, "zone-a-1")
	testenv.WaitRunningOn(ctx, t, c, ns, "zone-a-1", 1)
	testenv.CreatePDB(ctx, t, c, ns, "db", testenv.MaxUnavailable(0), 1, 0)
	addZonedNodes(t, env, zoneOf, "zone-a", "zone-a-2")
	addZonedNodes(t, env, zoneOf, "zone-b", "zone-b-1", "zone-b-2")
	addZonedNodes(t, env, zoneOf, "zone-c", "zone-c-1", "zone-c-2")
	nodes := slices.Sorted(maps.Keys(zoneOf))

	leases := watchSlotLeases(t, c)
	leases.check = oneZoneAtATime(zoneOf)
	args := []string{"--slots-limit=6", `--slots-pools=[{"name":"zones","selector":"","limit":2,"maxDomains":1,"maxUnhealthy":0}]`}
	var agents []*agentProcess
	for _, n := range nodes {
		agents = append(agents, startAgent(t, env, n, args...))
	}
	for _, a := range agents {
		a.WaitReady(t)
	}

	// zone-a-1 first: zone a takes the first slot, and keeps it.
	start := func(n string) {
		t.Helper()
		if out, err := cli(t, env, "start", n, "--reason", "zones"); err != nil {
			t.Fatalf("start %s: %v\n%s", n, err, out)
		}
	}
	start("zone-a-1")
	testenv.WaitFor(t, time.Minute, "zone-a-1 draining, held by the budget", func() (bool, error) {
		st := nodeStatus(t, c, "zone-a-1")
		return st != nil && st.Phase == selfdrain.PhaseRunning && len(st.Blockers) > 0, leases.stop()
	})
	for _, n := range nodes[1:] {
		start(n)
	}
	// zone-a-2 drains beside it (limit 2, the same zone); the others wait
	// for zone a, and say so.
	testenv.WaitFor(t, 2*time.Minute, "zone-a-2 drained", func() (bool, error) {
		st := nodeStatus(t, c, "zone-a-2")
		return st != nil && st.Phase == selfdrain.PhaseSucceeded, leases.stop()
	})
	const waitsForA = "(maxDomains): zone-a; this node's, zone-b, waits until one of them ends"
	testenv.WaitFor(t, time.Minute, "zone-b-1's record saying it waits for zone-a", func() (bool, error) {
		st := nodeStatus(t, c, "zone-b-1")
		return st != nil && st.Phase == selfdrain.PhaseWaiting && strings.Contains(st.LastError, waitsForA), leases.stop()
	})
	out, err := cli(t, env, "status", "zone-b-1", "--api", "annotation")
	if err != nil {
		t.Fatalf("status zone-b-1: %v\n%s", err, out)
	}
	t.Logf("status zone-b-1:\n%s", out)
	if !strings.Contains(out, waitsForA) {
		t.Errorf("status zone-b-1 does not say that it waits for zone a (%q)", waitsForA)
	}
	for _, n := range nodes {
		if zoneOf[n] != "zone-a" && slices.Contains(leases.holders(), n) {
			t.Errorf("%s holds a slot while zone-a-1 drains", n)
		}
	}

	// The budget goes: zone-a-1 drains, and the other zones follow, one
	// at a time, past the cordons the agents keep on drained nodes.
	if err := c.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 4*time.Minute, "every node drained", func() (bool, error) {
		for _, n := range nodes {
			if st := nodeStatus(t, c, n); st == nil || st.Phase != selfdrain.PhaseSucceeded {
				return false, leases.stop()
			}
		}
		return true, leases.stop()
	})
	for _, n := range nodes {
		if !getNode(t, c, n).Spec.Unschedulable {
			t.Errorf("%s is not cordoned after its drain; the test means drained nodes to stay cordoned by their agents", n)
		}
	}
	var order []string
	for _, ch := range leases.changes() {
		if z := zoneOf[ch.node]; ch.added && (len(order) == 0 || order[len(order)-1] != z) {
			order = append(order, z)
		}
	}
	t.Logf("zones in maintenance, in turn: %v", order)
	if len(order) != 3 {
		t.Errorf("the zones took slots in the order %v, want each once, one after another", order)
	}
}
