package integration

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestMaintenanceStatusExplainsTheWait: with one drain slot, node-1's
// drain is held by a PodDisruptionBudget that allows no disruption, and
// node-2, asked into maintenance after it, waits for the slot. The Node of
// each says why, as the agent on it reports it, and `node-agent
// maintenance status` says it to a person: for node-2 the node that holds
// the slot ahead of it and for how long, for node-1 the budget and the pod
// it blocks.
func TestMaintenanceStatusExplainsTheWait(t *testing.T) {
	b := newDrainBed(t)
	c := b.env.Client()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "db", 1, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 1)
	testenv.CreatePDB(t.Context(), t, c, b.ns, "db", testenv.MaxUnavailable(0), 1, 0)
	b.addTargets(t)
	pods, err := testenv.PodsOn(t.Context(), c, b.ns, "node-1")
	if err != nil || len(pods) != 1 {
		t.Fatalf("pods of %s on node-1: %v (%v), want the one db pod", b.ns, pods, err)
	}
	pod := b.ns + "/" + pods[0].Name
	budget := b.ns + "/db"

	a1 := startAgent(t, b.env, "node-1")
	a2 := startAgent(t, b.env, "node-2")
	a1.WaitReady(t)
	a2.WaitReady(t)
	if out, err := cli(t, b.env, "start", "node-1", "--reason", "held by a budget"); err != nil {
		t.Fatalf("start node-1: %v\n%s", err, out)
	}
	// node-1 drains, and its record names what holds the drain.
	testenv.WaitFor(t, time.Minute, "node-1's record to name "+budget+" blocking "+pod, func() (bool, error) {
		st := nodeStatus(t, c, "node-1")
		if st == nil || st.Phase != selfdrain.PhaseRunning {
			return false, nil
		}
		for _, bl := range st.Blockers {
			if bl.Pod == pod && bl.Reason == selfdrain.BlockerPodDisruptionBudget && bl.PodDisruptionBudget == budget {
				return true, nil
			}
		}
		return false, nil
	})
	if out, err := cli(t, b.env, "start", "node-2", "--reason", "after node-1"); err != nil {
		t.Fatalf("start node-2: %v\n%s", err, out)
	}
	// node-2 waits, and its record and condition say for whom.
	const heldBy = "slots held by node-1 since "
	testenv.WaitFor(t, time.Minute, "node-2's record to name node-1 as the holder", func() (bool, error) {
		st := nodeStatus(t, c, "node-2")
		return st != nil && st.Phase == selfdrain.PhaseWaiting && strings.Contains(st.LastError, heldBy), nil
	})
	node2 := getNode(t, c, "node-2")
	st2, _ := selfdrain.ParseStatus(node2)
	t.Logf("node-2's record: %s", st2.LastError)
	if !strings.HasPrefix(st2.LastError, "waiting for a drain slot from the coordinator: pool default: 1 of 1 nodes drain (limit)") ||
		!strings.Contains(st2.LastError, "place 1 in the queue of pool default") {
		t.Errorf("node-2's record says %q, want the full pool, node-1 and its place", st2.LastError)
	}
	testenv.WaitFor(t, 30*time.Second, "node-2's condition to name node-1 as the holder", func() (bool, error) {
		cond := nodeCondition(getNode(t, c, "node-2"))
		return cond != nil && cond.Reason == selfdrain.ReasonWaiting && strings.Contains(cond.Message, heldBy), nil
	})
	if g, err := slots.ParseGrant(node2); err != nil || g == nil || g.State != slots.Queued || !strings.Contains(g.Reason, heldBy) {
		t.Errorf("node-2's answer from the coordinator %+v (%v), want Queued naming node-1", g, err)
	}

	out, err := cli(t, b.env, "status", "node-2", "--api", "annotation")
	if err != nil {
		t.Fatalf("status node-2: %v\n%s", err, out)
	}
	t.Logf("status node-2:\n%s", out)
	for _, re := range []string{
		`Drain slot \(maintenance\): queued by the coordinator since \S+ \(\S+ ago\), place 1 of 1 queued in the cluster`,
		`the coordinator's answer: pool default: 1 of 1 nodes drain \(limit\); slots held by node-1 since `,
		`(?m)^  node-1 +maintenance +held for [0-9][0-9smh]*, since \S+Z$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status node-2 does not match %s", re)
		}
	}

	out, err = cli(t, b.env, "status", "node-1", "--api", "annotation")
	if err != nil {
		t.Fatalf("status node-1: %v\n%s", err, out)
	}
	t.Logf("status node-1:\n%s", out)
	blocking := `(?m)^Blocking the drain:\n  ` + regexp.QuoteMeta(pod) + ` +PodDisruptionBudget ` + regexp.QuoteMeta(budget) + ` +The disruption budget db `
	if !regexp.MustCompile(blocking).MatchString(out) {
		t.Errorf("status node-1 does not match %s", blocking)
	}

	// node-1's maintenance ends: node-2 takes the slot and drains, and
	// waits for nothing any more.
	if out, err := cli(t, b.env, "stop", "node-1"); err != nil {
		t.Fatalf("stop node-1: %v\n%s", err, out)
	}
	testenv.WaitFor(t, time.Minute, "node-2 drained", func() (bool, error) {
		st := nodeStatus(t, c, "node-2")
		return st != nil && st.Phase == selfdrain.PhaseSucceeded, nil
	})
	if out, err := cli(t, b.env, "status", "node-2", "--api", "annotation"); err != nil || strings.Contains(out, "queued") || strings.Contains(out, "Blocking") {
		t.Errorf("status node-2 once drained (%v):\n%s", err, out)
	}
}
