package slots

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
)

// zones is a pool of every node with a limit of limit nodes and of
// maxDomains zones.
func zones(limit, maxDomains int) []Pool {
	return []Pool{{Name: DefaultPool, Limit: 10}, {Name: "zones", Limit: limit, MaxDomains: maxDomains, TopologyKey: "topology.kubernetes.io/zone"}}
}

func zone(z string) string { return "topology.kubernetes.io/zone=" + z }

func TestDecideMaxDomains(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit, max  int
		nodes       []*Node
		held        []string
		wantGrant   []string
		wantQueued  []string
		wantReason  string // in the first Queued answer
		wantDomains int    // distinct domains holding after the decision
	}{{
		name: "the first zone in the queue takes both its nodes; the others wait",
		// Seen a1, b1, a2, b2, c1: a2 passes b1, which waits for a zone.
		limit: 2, max: 1,
		nodes: []*Node{asking("a1", 1*time.Second, 0, zone("a")), asking("b1", 2*time.Second, 0, zone("b")),
			asking("a2", 3*time.Second, 0, zone("a")), asking("b2", 4*time.Second, 0, zone("b")), asking("c1", 5*time.Second, 0, zone("c"))},
		wantGrant: []string{"a1", "a2"}, wantQueued: []string{"b1", "b2", "c1"},
		// b1 is decided before a2: it waits for zone a.
		wantReason:  "pool zones: 1 of 1 topology.kubernetes.io/zone domains in maintenance (maxDomains): a; this node's, b, waits until one of them ends; slots held by a1",
		wantDomains: 1,
	}, {
		name:  "a zone that holds a slot keeps the others out while it has room",
		limit: 2, max: 1,
		nodes: []*Node{asking("a1", 0, 0, zone("a")), asking("b1", 1*time.Second, 0, zone("b")),
			asking("a2", 2*time.Second, 0, zone("a")), asking("c1", 3*time.Second, 0, zone("c"))},
		held:      []string{"a1"},
		wantGrant: []string{"a2"}, wantQueued: []string{"b1", "c1"},
		wantReason:  "pool zones: 1 of 1 topology.kubernetes.io/zone domains in maintenance (maxDomains): a; this node's, b, waits until one of them ends; slots held by a1",
		wantDomains: 1,
	}, {
		name:  "the next zone goes once the last holder of the zone gives its slot back",
		limit: 2, max: 1,
		nodes: []*Node{asking("b1", 1*time.Second, 0, zone("b")), asking("c1", 2*time.Second, 0, zone("c")), asking("b2", 3*time.Second, 0, zone("b")),
			idle("a1", zone("a"))},
		wantGrant: []string{"b1", "b2"}, wantQueued: []string{"c1"},
		wantDomains: 1,
	}, {
		name:  "two zones at once",
		limit: 3, max: 2,
		nodes: []*Node{asking("a1", 0, 0, zone("a")), asking("b1", 1*time.Second, 0, zone("b")),
			asking("c1", 2*time.Second, 0, zone("c")), asking("a2", 3*time.Second, 0, zone("a"))},
		held:      []string{"a1"},
		wantGrant: []string{"b1", "a2"}, wantQueued: []string{"c1"},
		wantReason:  "pool zones: 2 of 2 topology.kubernetes.io/zone domains in maintenance (maxDomains): a, b; this node's, c, waits",
		wantDomains: 2,
	}, {
		name: "a node without the label is a domain of its own",
		// Two unlabelled nodes may be in two zones: they never share.
		limit: 2, max: 1,
		nodes:     []*Node{asking("x", 1*time.Second, 0), asking("y", 2*time.Second, 0)},
		wantGrant: []string{"x"}, wantQueued: []string{"y"},
		wantReason:  "domains in maintenance (maxDomains): node x (no topology.kubernetes.io/zone label); this node's, node y (no topology.kubernetes.io/zone label), waits",
		wantDomains: 1,
	}, {
		name:  "a node without the label waits for a zone, and a zone for it",
		limit: 2, max: 1,
		nodes: []*Node{asking("a1", 0, 0, zone("a")), asking("x", 1*time.Second, 0), asking("a2", 2*time.Second, 0, zone("a"))},
		held:  []string{"a1"}, wantGrant: []string{"a2"}, wantQueued: []string{"x"},
		wantDomains: 1,
	}, {
		name: "an empty value is no zone",
		// "" is a valid label value; it names no zone, so the node is
		// a domain of its own, not one with every other "".
		limit: 2, max: 1,
		nodes:     []*Node{asking("e1", 1*time.Second, 0, zone("")), asking("e2", 2*time.Second, 0, zone(""))},
		wantGrant: []string{"e1"}, wantQueued: []string{"e2"},
		wantDomains: 1,
	}, {
		name:  "maxDomains 0 limits nothing",
		limit: 3, max: 0,
		nodes:       []*Node{asking("a1", 1*time.Second, 0, zone("a")), asking("b1", 2*time.Second, 0, zone("b")), asking("c1", 3*time.Second, 0, zone("c"))},
		wantGrant:   []string{"a1", "b1", "c1"},
		wantDomains: 3,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var held []*Node
			in := input(time.Minute, zones(tc.limit, tc.max), tc.nodes...)
			for _, h := range tc.held {
				held = append(held, in.Nodes[h])
			}
			in = withLeases(in, held...)
			out := Decide(in)
			if !slices.Equal(out.Grant, tc.wantGrant) {
				t.Errorf("granted %v, want %v", out.Grant, tc.wantGrant)
			}
			if !slices.Equal(queued(out), tc.wantQueued) {
				t.Errorf("queued %v, want %v", queued(out), tc.wantQueued)
			}
			if tc.wantReason != "" && (len(out.Queue) == 0 || !strings.Contains(out.Queue[0].Reason, tc.wantReason)) {
				t.Errorf("reason %+v, want one with %q", out.Queue, tc.wantReason)
			}
			if got := holdingDomains(in, out, in.Pools[1]); len(got) != tc.wantDomains {
				t.Errorf("domains holding slots %v, want %d", got, tc.wantDomains)
			}
		})
	}
}

// holdingDomains are the domains of p's nodes that hold a slot after out:
// the holders it kept and the nodes it granted. A node without a domain
// counts on its own.
func holdingDomains(in Input, out Output, p Pool) map[string]bool {
	gone := map[string]bool{}
	for _, n := range out.Release {
		gone[n] = true
	}
	for _, r := range out.Revoke {
		gone[r.Node] = true
	}
	doms := map[string]bool{}
	count := func(name string) {
		n := in.Nodes[name]
		if n == nil || !p.has(n) {
			return
		}
		if z := n.Labels[p.TopologyKey]; z != "" {
			doms[z] = true
		} else {
			doms["node:"+name] = true
		}
	}
	for name := range in.Leases {
		if !gone[name] {
			count(name)
		}
	}
	for _, name := range out.Grant {
		count(name)
	}
	return doms
}

func TestDecideSafetyStop(t *testing.T) {
	one := intstr.FromInt32(1)
	pools := []Pool{{Name: DefaultPool, Limit: 5}, {Name: "all", MaxUnhealthy: &one}}
	sick := func(n *Node) *Node { n.Unhealthy = true; return n }

	// Two nodes down, one allowed: no new slot; the holder keeps its
	// slot, though it is unhealthy too (it does not count).
	h := sick(asking("h", 0, 0))
	in := withLeases(input(time.Minute, pools, sick(idle("u1")), sick(idle("u2")), h, asking("r", time.Second, 0)), h)
	out := Decide(in)
	if len(out.Grant) != 0 || len(out.Revoke) != 0 || len(out.Release) != 0 {
		t.Errorf("granted %v, revoked %v, released %v; want the holder kept and nothing granted", out.Grant, out.Revoke, out.Release)
	}
	if len(out.Queue) != 1 || !strings.Contains(out.Queue[0].Reason, "pool all: safety stop: 2 of 4 nodes are not Ready or cordoned other than by node-agent (u1, u2), more than maxUnhealthy 1 allows (1)") {
		t.Errorf("queue %+v", out.Queue)
	}
	if !slices.Equal(out.Stopped, []string{"all"}) || out.Unhealthy["all"] != 2 {
		t.Errorf("stopped %v, unhealthy %v; want pool all stopped with 2", out.Stopped, out.Unhealthy)
	}

	// One recovers: the stop ends.
	in.Nodes["u2"].Unhealthy = false
	out = Decide(in)
	if !slices.Equal(out.Grant, []string{"r"}) || len(out.Stopped) != 0 {
		t.Errorf("with one node down: granted %v, stopped %v; want r granted", out.Grant, out.Stopped)
	}

	// The node asking does not count against itself: an admin who
	// cordons a node and then asks for its maintenance is not refused by
	// that cordon. Another one beside it is within the limit.
	in = input(time.Minute, pools, sick(asking("c", time.Second, 0)), sick(idle("u1")), idle("ok"))
	if out := Decide(in); !slices.Equal(out.Grant, []string{"c"}) {
		t.Errorf("granted %v, want the cordoned node that asks", out.Grant)
	}

	// A percentage is of the pool's nodes, rounded down: 10% of 5 is 0,
	// so the first unhealthy node stops the pool.
	tenth := intstr.FromString("10%")
	pools[1].MaxUnhealthy = &tenth
	in = input(time.Minute, pools, sick(idle("u1")), asking("r", time.Second, 0), idle("a"), idle("b"), idle("c"))
	if out := Decide(in); len(out.Grant) != 0 || !strings.Contains(out.Queue[0].Reason, "more than maxUnhealthy 10% allows (0)") {
		t.Errorf("10%% of 5 nodes with one down: granted %v, queue %+v; want none granted", out.Grant, out.Queue)
	}

	// The stop is the pool's: a node outside it goes on.
	pools[1].Selector = labels.SelectorFromSet(labels.Set{"rack": "a"})
	in = input(time.Minute, pools, sick(idle("u1", "rack=a")), asking("r", time.Second, 0, "rack=a"), asking("s", 2*time.Second, 0))
	if out := Decide(in); !slices.Equal(out.Grant, []string{"s"}) || !slices.Equal(queued(out), []string{"r"}) {
		t.Errorf("granted %v, queued %v; want s granted and r stopped", out.Grant, queued(out))
	}

	// Many down: the answer names three and counts the rest, leaving out
	// the node asking, so that it changes only when those do.
	pools[1].Selector, pools[1].MaxUnhealthy = nil, &one
	in = input(time.Minute, pools, sick(asking("a", time.Second, 0)), sick(idle("u1")), sick(idle("u2")), sick(idle("u3")), sick(idle("u4")), sick(idle("u5")))
	if out := Decide(in); len(out.Grant) != 0 || !strings.Contains(out.Queue[0].Reason, "5 of 6 nodes are not Ready or cordoned other than by node-agent (u1, u2, u3 and 2 more)") {
		t.Errorf("five others down: granted %v, queue %+v", out.Grant, out.Queue)
	}

	// Without maxUnhealthy, unhealthy nodes stop nothing.
	in = input(time.Minute, []Pool{{Name: DefaultPool, Limit: 5}}, sick(idle("u1")), sick(idle("u2")), asking("r", time.Second, 0))
	if out := Decide(in); !slices.Equal(out.Grant, []string{"r"}) || len(out.Stopped) != 0 {
		t.Errorf("without maxUnhealthy: granted %v, stopped %v", out.Grant, out.Stopped)
	}
}

// TestDecideDomainsAndStopHoldOverTime drives Decide through random
// histories, as the coordinator would (grants become Leases, holders give
// their slots back, nodes ask, fall ill and recover), and checks after
// every decision that no pool has more domains than maxDomains or more
// holders than its limit, and that nothing was granted while the safety
// stop held for the node granted.
func TestDecideDomainsAndStopHoldOverTime(t *testing.T) {
	one := intstr.FromInt32(1)
	pools := []Pool{{Name: DefaultPool, Limit: 4},
		{Name: "zones", Limit: 2, MaxDomains: 1, TopologyKey: "topology.kubernetes.io/zone", MaxUnhealthy: &one},
		{Name: "racks", Selector: labels.SelectorFromSet(labels.Set{"gpu": "true"}), MaxDomains: 2, TopologyKey: "rack"}}
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 44))
		in := input(0, pools)
		for i := range 9 {
			var lbls []string
			if r.IntN(5) > 0 { // some nodes have no zone
				lbls = append(lbls, zone(string(rune('a'+r.IntN(3)))))
			}
			if r.IntN(2) == 0 {
				lbls = append(lbls, "gpu=true", "rack=r"+string(rune('0'+r.IntN(3))))
			}
			n := idle(string(rune('a'+i)), lbls...)
			in.Nodes[n.Name] = n
		}
		names := sortedKeys(in.Nodes)
		for step := range 40 {
			in.Now = t0.Add(time.Duration(step) * time.Second)
			for _, name := range names {
				n := in.Nodes[name]
				switch x := r.IntN(10); {
				case x == 0 && n.Request == nil:
					n.Request = &Request{Purpose: PurposeMaintenance, ID: name + "-" + string(rune('a'+step%26)), RequestedAt: in.Now}
					n.Seen, n.LastBeat, n.Grant = in.Now, in.Now, nil
				case x == 1 && n.Request != nil:
					n.Request = nil // done: gives its slot back
				case x == 2:
					n.Unhealthy = !n.Unhealthy
				}
				if n.Request != nil {
					n.LastBeat = in.Now
				}
			}
			out := Decide(in)
			checkGrants(t, seed, step, in, out)
			// Apply, as the coordinator does.
			for _, name := range out.Release {
				delete(in.Leases, name)
			}
			for _, name := range out.Grant {
				n := in.Nodes[name]
				in.Leases[name] = Lease{Name: LeaseName(name), Node: name, RequestID: n.Request.ID, Purpose: n.Request.Purpose, AcquiredAt: in.Now}
				n.Grant = &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Granted, Slot: LeaseName(name), Time: in.Now}
			}
			for _, q := range out.Queue {
				n := in.Nodes[q.Node]
				n.Grant = &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Queued, Reason: q.Reason, Time: n.QueuedAt()}
			}
		}
	}
}

func checkGrants(t *testing.T, seed uint64, step int, in Input, out Output) {
	t.Helper()
	for _, p := range in.Pools {
		if p.MaxDomains > 0 {
			if doms := holdingDomains(in, out, p); len(doms) > p.MaxDomains {
				t.Fatalf("seed %d step %d: pool %s: %d domains hold slots %v, more than maxDomains %d (granted %v)", seed, step, p.Name, len(doms), doms, p.MaxDomains, out.Grant)
			}
		}
		held := 0
		for name := range in.Leases {
			if n := in.Nodes[name]; n != nil && p.has(n) && !slices.Contains(out.Release, name) {
				held++
			}
		}
		for _, g := range out.Grant {
			if p.has(in.Nodes[g]) {
				held++
			}
		}
		if p.Limit > 0 && held > p.Limit {
			t.Fatalf("seed %d step %d: pool %s: %d holders, limit %d", seed, step, p.Name, held, p.Limit)
		}
		if p.MaxUnhealthy == nil {
			continue
		}
		// The unhealthy nodes that hold no slot after the decision (a
		// holder never counts, nor does a node granted), the node
		// granted aside, may not pass maxUnhealthy for any grant.
		holdsAfter := func(name string) bool {
			_, held := in.Leases[name]
			return slices.Contains(out.Grant, name) ||
				held && !slices.Contains(out.Release, name) && !slices.ContainsFunc(out.Revoke, func(r Revocation) bool { return r.Node == name })
		}
		for _, g := range out.Grant {
			if !p.has(in.Nodes[g]) {
				continue
			}
			sick := 0
			for name, n := range in.Nodes {
				if n.Unhealthy && p.has(n) && name != g && !holdsAfter(name) {
					sick++
				}
			}
			if sick > p.MaxUnhealthy.IntValue() {
				t.Fatalf("seed %d step %d: pool %s granted %s while %d other nodes were unhealthy, maxUnhealthy %s", seed, step, p.Name, g, sick, p.MaxUnhealthy)
			}
		}
	}
}

// Which Nodes the coordinator tells Decide are unhealthy: not Ready, or
// cordoned other than by node-agent's own maintenance (OwnCordon).
func TestCoordinatorUnhealthy(t *testing.T) {
	own := func(n *corev1.Node) bool { return n.Annotations["own"] == "true" }
	node := func(ready corev1.ConditionStatus, cordoned bool, ownCordon bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{}}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		}
		if ownCordon {
			n.Annotations["own"] = "true"
		}
		return n
	}
	for _, tc := range []struct {
		name      string
		node      *corev1.Node
		ownCordon func(*corev1.Node) bool
		want      bool
	}{
		{"Ready and schedulable", node(corev1.ConditionTrue, false, false), own, false},
		{"not Ready", node(corev1.ConditionFalse, false, false), own, true},
		{"Ready unknown", node(corev1.ConditionUnknown, false, false), own, true},
		{"no Ready condition", node("", false, false), own, true},
		{"cordoned by an admin", node(corev1.ConditionTrue, true, false), own, true},
		{"cordoned by node-agent's maintenance", node(corev1.ConditionTrue, true, true), own, false},
		{"cordoned by node-agent's maintenance, but not Ready", node(corev1.ConditionFalse, true, true), own, true},
		{"cordoned, and no way to tell whose", node(corev1.ConditionTrue, true, true), nil, true},
		// A node that waits for its reboot carries the reboot controller's
		// PreferNoSchedule taint (pkg/reboot PendingTaintKey, spelt out:
		// pkg/reboot imports this package); it still takes pods, so the
		// safety stop does not count it (nor maxUnavailable, which counts
		// cordoned or not Ready nodes only).
		{"Ready, waiting for a reboot (PreferNoSchedule)", pendingReboot(node(corev1.ConditionTrue, false, false)), own, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCoordinator(CoordinatorOptions{OwnCordon: tc.ownCordon, Clock: clocktesting.NewFakeClock(t0)})
			if got := c.unhealthy(tc.node); got != tc.want {
				t.Errorf("unhealthy = %v, want %v", got, tc.want)
			}
		})
	}
}

func pendingReboot(n *corev1.Node) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "node-agent.io/reboot-pending", Effect: corev1.TaintEffectPreferNoSchedule})
	return n
}
