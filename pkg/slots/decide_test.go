package slots

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// node builds a Node that asks (purpose maintenance, id "<name>-1") and was
// seen at t0+seen; heartbeat last seen at t0+beat.
func asking(name string, seen, beat time.Duration, lbls ...string) *Node {
	l := map[string]string{}
	for _, kv := range lbls {
		k, v, _ := strings.Cut(kv, "=")
		l[k] = v
	}
	// The requester's honest clock: asked when seen. A backdated request
	// (1970) then claims to be older than every other, as a stolen token's
	// would, so a test that orders by RequestedAt fails.
	req := &Request{Purpose: PurposeMaintenance, ID: name + "-1", RequestedAt: t0.Add(seen)}
	return &Node{Name: name, Labels: l, Request: req, Seen: t0.Add(seen), LastBeat: t0.Add(beat)}
}

func idle(name string, lbls ...string) *Node {
	n := asking(name, 0, 0, lbls...)
	n.Request = nil
	return n
}

func holding(n *Node, at time.Duration) (*Node, Lease) {
	n.Grant = &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Granted, Slot: LeaseName(n.Name)}
	return n, Lease{Name: LeaseName(n.Name), Node: n.Name, RequestID: n.Request.ID, Purpose: n.Request.Purpose, AcquiredAt: t0.Add(at)}
}

func input(now time.Duration, pools []Pool, nodes ...*Node) Input {
	in := Input{Now: t0.Add(now), Nodes: map[string]*Node{}, Leases: map[string]Lease{}, Pools: pools,
		HeartbeatBound: time.Minute, RebootHoldBound: 30 * time.Minute,
		MaxHold: map[Purpose]time.Duration{PurposeMaintenance: time.Hour, PurposeReboot: 2 * time.Hour}}
	for _, n := range nodes {
		in.Nodes[n.Name] = n
	}
	return in
}

func withLeases(in Input, held ...*Node) Input {
	for _, n := range held {
		n2, l := holding(n, 0)
		in.Nodes[n.Name] = n2
		in.Leases[n.Name] = l
	}
	return in
}

func cluster(max int) []Pool { return []Pool{{Name: DefaultPool, Limit: max}} }

func revoked(out Output) []string {
	var s []string
	for _, r := range out.Revoke {
		s = append(s, r.Node)
	}
	return s
}

func queued(out Output) []string {
	var s []string
	for _, q := range out.Queue {
		s = append(s, q.Node)
	}
	return s
}

func TestDecideFirstComeFirstServed(t *testing.T) {
	// Seen in the order c, a, b: c first, then a.
	in := input(time.Minute, cluster(2), asking("a", 2*time.Second, 0), asking("b", 3*time.Second, 0), asking("c", time.Second, 0))
	out := Decide(in)
	if want := []string{"c", "a"}; !slices.Equal(out.Grant, want) {
		t.Errorf("granted %v, want %v (first seen first)", out.Grant, want)
	}
	if want := []string{"b"}; !slices.Equal(queued(out), want) {
		t.Errorf("queued %v, want %v", queued(out), want)
	}
	if out.Held[DefaultPool] != 2 || out.Waiting[DefaultPool] != 1 {
		t.Errorf("held %v waiting %v", out.Held, out.Waiting)
	}
	if !strings.Contains(out.Queue[0].Reason, "pool default: 2 of 2 nodes drain") {
		t.Errorf("reason %q", out.Queue[0].Reason)
	}
}

func TestDecideHoldersKeepTheirSlot(t *testing.T) {
	a, b := asking("a", 0, 30*time.Second), asking("b", time.Second, 0)
	in := withLeases(input(time.Minute, cluster(1), a, b), a)
	out := Decide(in)
	if len(out.Grant) != 0 || len(out.Revoke) != 0 || len(out.Release) != 0 || len(out.Repair) != 0 {
		t.Errorf("changed a held slot: %+v", out)
	}
	if !slices.Equal(queued(out), []string{"b"}) {
		t.Errorf("queued %v", queued(out))
	}
	// Next look: when a's silence bound passes (beat at 30s, bound 1m).
	if want := 31 * time.Second; out.Next != want {
		t.Errorf("next = %s, want %s", out.Next, want)
	}
	// A second decision with b's Queued written (its Time is its place, as
	// the coordinator writes it) changes nothing; an answer whose Time is
	// not its place is written again to carry it.
	b.Grant = &Grant{ID: b.Request.ID, Purpose: PurposeMaintenance, State: Queued, Reason: out.Queue[0].Reason}
	if out := Decide(in); !slices.Equal(queued(out), []string{"b"}) {
		t.Errorf("an answer without its place: queued %v, want b again", queued(out))
	}
	b.Grant.Time = b.Seen
	if out := Decide(in); len(out.Queue) != 0 {
		t.Errorf("queued again: %+v", out.Queue)
	}
}

func TestDecideReleases(t *testing.T) {
	gone := asking("gone", 0, 0)
	withdrawn := asking("withdrawn", 0, 0)
	renewed := asking("renewed", 0, 0)
	in := withLeases(input(time.Second, cluster(3), gone, withdrawn, renewed), gone, withdrawn, renewed)
	delete(in.Nodes, "gone")
	in.Nodes["withdrawn"].Request = nil
	in.Nodes["renewed"].Request = &Request{Purpose: PurposeMaintenance, ID: "renewed-2"}
	out := Decide(in)
	if want := []string{"gone", "renewed", "withdrawn"}; !slices.Equal(out.Release, want) {
		t.Errorf("released %v, want %v", out.Release, want)
	}
	// The renewed node's new request is a new one in the queue; the old
	// slot is released first (Output's order), so it is served at once.
	if !slices.Equal(out.Grant, []string{"renewed"}) {
		t.Errorf("granted %v, want the new request", out.Grant)
	}
}

func TestDecideRevokesSilentAndLongHolders(t *testing.T) {
	silent := asking("silent", 0, 0)
	long := asking("long", 0, 59*time.Minute+30*time.Second)
	next := asking("next", time.Second, 0)
	in := withLeases(input(time.Hour+time.Second, cluster(2), silent, long, next), silent, long)
	out := Decide(in)
	if want := []string{"long", "silent"}; !slices.Equal(revoked(out), want) {
		t.Fatalf("revoked %v, want %v", revoked(out), want)
	}
	for _, r := range out.Revoke {
		switch r.Node {
		case "silent":
			if !strings.Contains(r.Reason, "no heartbeat for 1h0m1s") || !strings.Contains(r.Reason, "slots.heartbeatBound (1m0s)") {
				t.Errorf("silent reason %q", r.Reason)
			}
		case "long":
			if !strings.Contains(r.Reason, "held for 1h0m1s, longer than the maintenance bound of 1h0m0s") {
				t.Errorf("long reason %q", r.Reason)
			}
		}
	}
	if !slices.Equal(out.Grant, []string{"next"}) {
		t.Errorf("granted %v, want the next node at once", out.Grant)
	}
	// A revoked request is not served again; a new one is.
	silent.Grant = &Grant{ID: silent.Request.ID, Purpose: PurposeMaintenance, State: Revoked}
	delete(in.Leases, "silent")
	delete(in.Leases, "long")
	in.Nodes["long"].Grant = &Grant{ID: long.Request.ID, Purpose: PurposeMaintenance, State: Revoked}
	out = Decide(in)
	if !slices.Equal(out.Grant, []string{"next"}) {
		t.Errorf("granted %v after revocation, want only next", out.Grant)
	}
	silent.Request = &Request{Purpose: PurposeMaintenance, ID: "silent-2"}
	silent.Seen = in.Now
	out = Decide(in)
	if !slices.Equal(out.Grant, []string{"next", "silent"}) {
		t.Errorf("granted %v, want the new request served too", out.Grant)
	}
}

func TestDecideRebootingHolderKeepsItsSlot(t *testing.T) {
	r := asking("r", 0, 0)
	r.Request.Purpose = PurposeReboot
	r.Request.HoldSeconds = 20 * 60
	in := withLeases(input(10*time.Minute, cluster(1), r), r)
	if out := Decide(in); len(out.Revoke) != 0 {
		t.Errorf("revoked a rebooting host's slot within its hold: %+v", out.Revoke)
	}
	in.Now = t0.Add(21 * time.Minute)
	if out := Decide(in); len(out.Revoke) != 1 || !strings.Contains(out.Revoke[0].Reason, "20m0s its host may take to reboot") {
		t.Errorf("revocations %+v, want one past the 20m hold", out.Revoke)
	}
	// The agent may not ask for more than the coordinator's bound: a
	// hold of 2^31 seconds is cut to reboot.slotHoldBound (30m).
	r.Request.HoldSeconds = 1 << 31
	in.Now = t0.Add(31 * time.Minute)
	if out := Decide(in); len(out.Revoke) != 1 {
		t.Errorf("a huge holdSeconds kept the slot past the coordinator's bound: %+v", out)
	}
}

func TestDecideRepairsAMissingGrant(t *testing.T) {
	a := asking("a", 0, 0)
	in := withLeases(input(time.Second, cluster(1), a), a)
	a.Grant = nil
	if out := Decide(in); !slices.Equal(out.Repair, []string{"a"}) {
		t.Errorf("repair %v", out.Repair)
	}
}

func TestDecideClearsGrantsOfNoRequest(t *testing.T) {
	a := idle("a")
	a.Grant = &Grant{ID: "x", Purpose: PurposeMaintenance, State: Revoked}
	if out := Decide(input(0, cluster(1), a)); !slices.Equal(out.Clear, []string{"a"}) {
		t.Errorf("clear %v", out.Clear)
	}
}

func TestDecidePools(t *testing.T) {
	gpu := labels.SelectorFromSet(labels.Set{"gpu": "true"})
	pools := []Pool{{Name: DefaultPool, Limit: 3}, {Name: "gpu", Selector: gpu, Limit: 1}}
	// g1 and g2 are GPU nodes; c1 is not. g2 waits behind g1 in the gpu
	// pool, c1 (seen after g2) goes on: another pool's wait blocks only
	// that pool.
	in := input(time.Minute, pools, asking("g1", 1*time.Second, 0, "gpu=true"), asking("g2", 2*time.Second, 0, "gpu=true"), asking("c1", 3*time.Second, 0))
	out := Decide(in)
	if want := []string{"g1", "c1"}; !slices.Equal(out.Grant, want) {
		t.Errorf("granted %v, want %v", out.Grant, want)
	}
	if len(out.Queue) != 1 || out.Queue[0].Node != "g2" || !strings.Contains(out.Queue[0].Reason, "pool gpu: 1 of 1") {
		t.Errorf("queue %+v", out.Queue)
	}
	if out.Held["gpu"] != 1 || out.Held[DefaultPool] != 2 || out.Waiting["gpu"] != 1 {
		t.Errorf("held %v waiting %v", out.Held, out.Waiting)
	}

	// Within a full pool, order holds: c2 (seen before c3) waits while
	// the default pool is full, and c3 behind it.
	pools[0].Limit = 1
	in = input(time.Minute, pools, asking("c2", time.Second, 0), asking("c3", 2*time.Second, 0), asking("g3", 3*time.Second, 0, "gpu=true"))
	out = Decide(in)
	if !slices.Equal(out.Grant, []string{"c2"}) {
		t.Errorf("granted %v, want only c2", out.Grant)
	}
	if !slices.Equal(queued(out), []string{"c3", "g3"}) {
		t.Errorf("queued %v", queued(out))
	}
}

func TestDecideMaxUnavailable(t *testing.T) {
	pct := intstr.FromString("50%")
	pools := []Pool{{Name: DefaultPool, Limit: 10}, {Name: "rack", Selector: labels.SelectorFromSet(labels.Set{"rack": "a"}), MaxUnavailable: &pct}}
	down := idle("r1", "rack=a")
	down.Unavailable = true // an admin cordoned it
	in := input(time.Minute, pools, down, asking("r2", time.Second, 0, "rack=a"), asking("r3", 2*time.Second, 0, "rack=a"), idle("r4", "rack=a"))
	out := Decide(in)
	// 4 nodes, 50%: 2 may be unavailable; r1 is, so one more.
	if !slices.Equal(out.Grant, []string{"r2"}) {
		t.Errorf("granted %v, want r2 only", out.Grant)
	}
	if len(out.Queue) != 1 || !strings.Contains(out.Queue[0].Reason, "2 of 4 nodes unavailable (1 draining, 1 not Ready or cordoned; maxUnavailable 50%)") {
		t.Errorf("queue %+v", out.Queue)
	}
	// A percentage that rounds to 0 still lets one node go.
	tiny := intstr.FromString("10%")
	pools[1].MaxUnavailable = &tiny
	in = input(time.Minute, pools, asking("r2", time.Second, 0, "rack=a"), idle("r4", "rack=a"))
	if out := Decide(in); !slices.Equal(out.Grant, []string{"r2"}) {
		t.Errorf("granted %v with 10%% of 2 nodes, want one", out.Grant)
	}
}

// TestDecideNeverPassesALimit: whatever the requests, leases and pools, no
// pool ends a decision with more holders than its limit, unless it had
// them before (a smaller limit after a restart only stops new grants).
func TestDecideNeverPassesALimit(t *testing.T) {
	pools := []Pool{{Name: DefaultPool, Limit: 3}, {Name: "odd", Selector: labels.SelectorFromSet(labels.Set{"odd": "true"}), Limit: 1}}
	for seed := range 200 {
		var nodes []*Node
		for i := range 12 {
			var lbls []string
			if i%2 == 1 {
				lbls = append(lbls, "odd=true")
			}
			if (seed>>(i%8))&1 == 1 || i%5 == seed%5 {
				nodes = append(nodes, asking(string(rune('a'+i)), time.Duration((i*7+seed)%13)*time.Second, 0, lbls...))
			} else {
				nodes = append(nodes, idle(string(rune('a'+i)), lbls...))
			}
		}
		in := input(time.Minute, pools, nodes...)
		out := Decide(in)
		for _, p := range pools {
			n := 0
			for _, g := range out.Grant {
				if p.has(in.Nodes[g]) {
					n++
				}
			}
			if n > p.Limit {
				t.Fatalf("seed %d: pool %s granted %d > %d: %v", seed, p.Name, n, p.Limit, out.Grant)
			}
		}
	}
}

// reboot.minInterval spaces reboots out across the cluster; it holds back
// no maintenance, and a reboot waiting for it blocks no pool.
func TestDecideMinRebootInterval(t *testing.T) {
	reboots := func(n *Node) *Node { n.Request.Purpose = PurposeReboot; return n }
	t.Run("since the last recorded reboot", func(t *testing.T) {
		in := input(10*time.Minute, cluster(3), reboots(asking("a", 0, 10*time.Minute)), asking("b", time.Second, 10*time.Minute))
		in.MinRebootInterval, in.LastReboot = 30*time.Minute, t0
		out := Decide(in)
		if !slices.Equal(out.Grant, []string{"b"}) || !slices.Equal(queued(out), []string{"a"}) {
			t.Fatalf("grants %v, queued %v: want b's maintenance granted and a's reboot queued", out.Grant, queued(out))
		}
		if want := "reboot.minInterval: the last reboot began at " + t0.UTC().Format(time.RFC3339) + "; the next may begin at " + t0.Add(30*time.Minute).UTC().Format(time.RFC3339); out.Queue[0].Reason != want {
			t.Errorf("reason %q, want %q", out.Queue[0].Reason, want)
		}
		if out.Next != 20*time.Minute {
			t.Errorf("Next = %s, want the 20m until the interval ends", out.Next)
		}
		in.Now = t0.Add(30 * time.Minute)
		for _, n := range in.Nodes {
			n.LastBeat = in.Now
		}
		if out := Decide(in); !slices.Contains(out.Grant, "a") {
			t.Errorf("at the interval's end: grants %v, want a", out.Grant)
		}
	})
	t.Run("one reboot per decision, and a held one counts", func(t *testing.T) {
		in := input(0, cluster(3), reboots(asking("a", 0, 0)), reboots(asking("b", time.Second, 0)))
		in.MinRebootInterval = time.Hour
		out := Decide(in)
		if !slices.Equal(out.Grant, []string{"a"}) || !slices.Equal(queued(out), []string{"b"}) {
			t.Fatalf("grants %v, queued %v: want a granted, b queued behind it", out.Grant, queued(out))
		}
		held := withLeases(input(15*time.Minute, cluster(3), reboots(asking("c", 0, 15*time.Minute))), reboots(asking("a", 0, 15*time.Minute)))
		held.MinRebootInterval = time.Hour
		if out := Decide(held); len(out.Grant) != 0 || !slices.Equal(queued(out), []string{"c"}) {
			t.Errorf("with a's reboot held since t0: grants %v, queued %v, want c queued", out.Grant, queued(out))
		}
	})
	t.Run("no interval", func(t *testing.T) {
		in := input(0, cluster(3), reboots(asking("a", 0, 0)), reboots(asking("b", time.Second, 0)))
		in.LastReboot = t0
		if out := Decide(in); len(out.Grant) != 2 {
			t.Errorf("grants %v, want both", out.Grant)
		}
	})
}

// stamped gives n the Queued answer a coordinator wrote when it first saw
// n's request at t0+at.
func stamped(n *Node, at time.Duration) *Node {
	n.Grant = &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Queued, Reason: "full", Time: t0.Add(at)}
	return n
}

// backdated makes n's request claim it was written in 1970.
func backdated(n *Node) *Node {
	n.Request.RequestedAt = time.Unix(0, 0)
	return n
}

// TestDecideOrderIsTheCoordinators: the queue is in the order coordinators
// saw the requests (their own clock, or the stamp an earlier leader wrote
// into its answer), never in the order the requesters' RequestedAt claims;
// a new leader, which sees every request at once when it starts, keeps the
// stamped order and puts what it finds unstamped behind, by name. The
// limit is 1 and x holds the slot, so each case lists the queue's order.
func TestDecideOrderIsTheCoordinators(t *testing.T) {
	const lead = 10 * time.Minute // when the new leader starts and sees them all
	tests := []struct {
		name  string
		nodes []*Node
		want  []string
	}{
		{name: "a backdated request stays where this coordinator saw it",
			nodes: []*Node{asking("a", time.Second, 0), backdated(asking("b", 2*time.Second, 0))},
			want:  []string{"a", "b"}},
		{name: "after a change of leader: the stamps, not RequestedAt",
			nodes: []*Node{
				stamped(asking("b", lead, 0), 2*time.Second),
				backdated(stamped(asking("a", lead, 0), 3*time.Second)),
				stamped(asking("c", lead, 0), time.Second),
			},
			want: []string{"c", "b", "a"}},
		{name: "after a change of leader: unstamped behind every stamped one, by name, backdated or not",
			nodes: []*Node{
				backdated(asking("a", lead, 0)),
				stamped(asking("z", lead, 0), 5*time.Second),
				asking("b", lead, 0),
			},
			want: []string{"z", "a", "b"}},
		{name: "a stamp that answers an earlier request of the node does not count",
			nodes: func() []*Node {
				old := stamped(asking("a", lead, 0), time.Second)
				old.Grant.ID = "a-0"
				return []*Node{old, stamped(asking("b", lead, 0), 2*time.Second)}
			}(),
			want: []string{"b", "a"}},
		{name: "this coordinator's own earlier sighting of an unanswered request counts",
			nodes: []*Node{stamped(asking("b", 2*time.Second, 0), 2*time.Second), asking("a", time.Second, 0)},
			want:  []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := withLeases(input(lead+time.Second, cluster(1), tt.nodes...), asking("x", 0, lead))
			out := Decide(in)
			if len(out.Grant) != 0 {
				t.Fatalf("granted %v while x holds the only slot", out.Grant)
			}
			// The queue's order is the order of the next grants: free the
			// slot and decide again, as often as there are waiters.
			var order []string
			for range tt.want {
				in := withLeases(input(lead+time.Second, cluster(1), tt.nodes...))
				for _, n := range tt.nodes {
					if slices.Contains(order, n.Name) {
						in.Nodes[n.Name] = idle(n.Name)
					}
				}
				out := Decide(in)
				if len(out.Grant) != 1 {
					t.Fatalf("after %v: granted %v, want one", order, out.Grant)
				}
				order = append(order, out.Grant[0])
			}
			if !slices.Equal(order, tt.want) {
				t.Errorf("served in the order %v, want %v", order, tt.want)
			}
		})
	}
}

// TestDecideRevokedNodeAsksAgainAtTheBack: a node whose slot was taken back
// for a bound asks again with a new ID; it waits behind those queued
// before, also when a new leader decides from the answers on the Nodes.
func TestDecideRevokedNodeAsksAgainAtTheBack(t *testing.T) {
	// n1 held the slot and was silent: revoked at 2 min.
	n1, l1 := holding(asking("n1", 0, 0), 0)
	in := input(2*time.Minute, cluster(1), n1, stamped(asking("n2", 10*time.Second, 0), 10*time.Second))
	in.Leases["n1"] = l1
	if out := Decide(in); !slices.Equal(revoked(out), []string{"n1"}) || !slices.Equal(out.Grant, []string{"n2"}) {
		t.Fatalf("revoked %v, granted %v; want n1 revoked and its slot n2's", revoked(out), out.Grant)
	}
	// n1 asks again, backdated, seen after the revocation; n2 and n3 were
	// queued before it. Then the slot is free.
	again := backdated(asking("n1", 2*time.Minute+time.Second, 0))
	again.Request.ID = "n1-2"
	again.Grant = &Grant{ID: "n1-1", Purpose: PurposeMaintenance, State: Revoked, Reason: "silent"}
	nodes := []*Node{again, stamped(asking("n2", 10*time.Second, 0), 10*time.Second), stamped(asking("n3", 20*time.Second, 0), 20*time.Second)}
	for name, now := range map[string]time.Duration{"this leader": 3 * time.Minute, "a new leader": 10 * time.Minute} {
		t.Run(name, func(t *testing.T) {
			in := input(now, cluster(1), nodes...)
			if name == "a new leader" {
				for _, n := range in.Nodes {
					n.Seen = t0.Add(now)
				}
				defer func() {
					for _, n := range nodes {
						n.Seen = t0.Add(map[string]time.Duration{"n1": 2*time.Minute + time.Second, "n2": 10 * time.Second, "n3": 20 * time.Second}[n.Name])
					}
				}()
			}
			out := Decide(in)
			if !slices.Equal(out.Grant, []string{"n2"}) || !slices.Equal(queued(out), []string{"n3", "n1"}) {
				t.Errorf("granted %v, queued %v; want n2 granted, then n3, then n1 (asked again after its revocation)", out.Grant, queued(out))
			}
		})
	}
}

// TestDecideRefusesAPurposeThatIsOff: while reboots are off in the
// coordinator's configuration, a reboot request is answered Revoked with
// the reason, never granted (a free slot or not) nor queued, and a slot
// held for a reboot is taken back; maintenance goes on.
func TestDecideRefusesAPurposeThatIsOff(t *testing.T) {
	const why = "reboot.enabled is false"
	reboot := func(n *Node) *Node { n.Request.Purpose = PurposeReboot; return n }
	tests := []struct {
		name                      string
		in                        Input
		granted, refused, revoked []string
	}{
		{name: "a free slot: the reboot is refused, the maintenance behind it granted",
			in:      input(time.Minute, cluster(1), reboot(backdated(asking("a", time.Second, 0))), asking("b", 2*time.Second, 0)),
			granted: []string{"b"}, refused: []string{"a"}},
		{name: "a reboot request with a long hold is refused too",
			in: input(time.Minute, cluster(2), func() *Node {
				n := reboot(asking("a", time.Second, 0))
				n.Request.HoldSeconds = 1 << 30
				return n
			}()),
			refused: []string{"a"}},
		{name: "a slot held for a reboot is taken back, and goes to the maintenance",
			in:      withLeases(input(time.Minute, cluster(1), asking("b", 2*time.Second, 0)), reboot(asking("a", 0, time.Minute))),
			granted: []string{"b"}, revoked: []string{"a"}},
		{name: "refused once: the Revoked answer stands, nothing more is written",
			in: func() Input {
				n := reboot(asking("a", time.Second, 0))
				n.Grant = &Grant{ID: n.Request.ID, Purpose: PurposeReboot, State: Revoked, Reason: why}
				return input(time.Minute, cluster(1), n)
			}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Off = map[Purpose]string{PurposeReboot: why}
			out := Decide(tt.in)
			var refused []string
			for _, r := range out.Refuse {
				refused = append(refused, r.Node)
				if r.Reason != why {
					t.Errorf("%s refused saying %q, want %q", r.Node, r.Reason, why)
				}
			}
			if !slices.Equal(out.Grant, tt.granted) || !slices.Equal(refused, tt.refused) || !slices.Equal(revoked(out), tt.revoked) {
				t.Errorf("granted %v, refused %v, revoked %v; want %v, %v, %v", out.Grant, refused, revoked(out), tt.granted, tt.refused, tt.revoked)
			}
			for _, q := range out.Queue {
				if tt.in.Nodes[q.Node].Request.Purpose == PurposeReboot {
					t.Errorf("the reboot request of %s is queued (%s), want it refused", q.Node, q.Reason)
				}
			}
			// With reboots on, the same input serves the reboot.
			tt.in.Off = nil
			if on := Decide(tt.in); len(on.Refuse) != 0 {
				t.Errorf("with reboots on, refused %v", on.Refuse)
			}
		})
	}
}
