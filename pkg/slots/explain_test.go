package slots

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// TestDecideQueuedAnswerNamesHolders: the head of the queue is told which
// node holds the slot, since when, and its place; the requests further back
// only that they are further back.
func TestDecideQueuedAnswerNamesHolders(t *testing.T) {
	in := withLeases(input(10*time.Minute, cluster(1),
		asking("a", time.Minute, 0), asking("b", 2*time.Minute, 0), asking("c", 3*time.Minute, 0),
		asking("d", 4*time.Minute, 0), asking("e", 5*time.Minute, 0)), asking("h", 0, 9*time.Minute))
	out := Decide(in)
	held := "slots held by h since " + t0.Format(time.RFC3339)
	want := map[string][]string{
		"a": {"pool default: 1 of 1 nodes drain (limit)", held, "place 1 in the queue of pool default"},
		"b": {held, "place 2 in the queue of pool default"},
		"c": {held, "place 3 in the queue of pool default"},
		"d": {"pool default: 1 of 1 nodes drain", "place 4 or later in the queue of pool default"},
		"e": {"place 4 or later in the queue of pool default"},
	}
	reasons := queuedReasons(out)
	for node, parts := range want {
		for _, p := range parts {
			if !strings.Contains(reasons[node], p) {
				t.Errorf("%s is told %q, want it to say %q", node, reasons[node], p)
			}
		}
	}
	for _, node := range []string{"d", "e"} {
		if strings.Contains(reasons[node], "held by") {
			t.Errorf("%s, further back, is told the holders: %q", node, reasons[node])
		}
	}

	// Time passes and nothing else changes: no answer is rewritten.
	answer(in, out)
	in.Now = in.Now.Add(time.Minute)
	in.Nodes["h"].LastBeat = in.Now
	if again := Decide(in); len(again.Queue) != 0 {
		t.Errorf("answers rewritten while nothing changed but the time: %+v", again.Queue)
	}

	// h gives its slot back and a takes it: only the head of the queue
	// is told anew (d moves into it), not e.
	in.Nodes["h"].Request = nil
	out = Decide(in)
	if !slices.Equal(out.Grant, []string{"a"}) {
		t.Fatalf("granted %v, want a", out.Grant)
	}
	reasons = queuedReasons(out)
	if got := slices.Sorted(maps.Keys(reasons)); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("answers rewritten for %v, want b, c and d only: %+v", got, out.Queue)
	}
	heldByA := "slots held by a since " + in.Now.Format(time.RFC3339) + "; place 1 in the queue"
	if !strings.Contains(reasons["b"], heldByA) {
		t.Errorf("b is told %q, want %q", reasons["b"], heldByA)
	}
	if !strings.Contains(reasons["d"], "held by a") || !strings.Contains(reasons["d"], "place 3 in the queue") {
		t.Errorf("d is told %q, want a named and place 3", reasons["d"])
	}
}

// TestDecideQueuedAnswerBoundsHolders: a full pool of many holders names
// NamedHolders of them, the earliest first, and counts the others.
func TestDecideQueuedAnswerBoundsHolders(t *testing.T) {
	nodes := []*Node{asking("w", 0, 0)}
	in := input(time.Minute, cluster(5), nodes...)
	for i, name := range []string{"h5", "h4", "h3", "h2", "h1"} {
		n, l := holding(asking(name, 0, 50*time.Second), 0)
		l.AcquiredAt = t0.Add(time.Duration(5-i) * time.Second)
		in.Nodes[name], in.Leases[name] = n, l
	}
	reason := queuedReasons(Decide(in))["w"]
	want := "slots held by h1 since " + t0.Add(time.Second).Format(time.RFC3339) + ", h2 since " + t0.Add(2*time.Second).Format(time.RFC3339) +
		", h3 since " + t0.Add(3*time.Second).Format(time.RFC3339) + " and 2 more"
	if !strings.Contains(reason, want) {
		t.Errorf("w is told %q, want %q", reason, want)
	}
}

// TestDecideQueuedAnswerNamesThePoolsHolders: a request that waits for a
// pool of its own is told that pool's holders, not the cluster's.
func TestDecideQueuedAnswerNamesThePoolsHolders(t *testing.T) {
	gpu := labels.SelectorFromSet(labels.Set{"gpu": "true"})
	pools := []Pool{{Name: DefaultPool, Limit: 3}, {Name: "gpu", Selector: gpu, Limit: 1}}
	in := withLeases(input(time.Minute, pools, asking("g2", time.Second, 0, "gpu=true")),
		asking("g1", 0, 50*time.Second, "gpu=true"), asking("c1", 0, 50*time.Second))
	reason := queuedReasons(Decide(in))["g2"]
	if !strings.Contains(reason, "pool gpu: 1 of 1") || !strings.Contains(reason, "slots held by g1 since") || !strings.Contains(reason, "place 1 in the queue of pool gpu") {
		t.Errorf("g2 is told %q, want pool gpu, its holder g1 and its place", reason)
	}
	if strings.Contains(reason, "c1") {
		t.Errorf("g2 is told %q, which names c1, a holder of another pool", reason)
	}
}

func queuedReasons(out Output) map[string]string {
	m := map[string]string{}
	for _, q := range out.Queue {
		m[q.Node] = q.Reason
	}
	return m
}

// answer writes out's answers to the Nodes of in, as the coordinator does.
func answer(in Input, out Output) {
	for _, q := range out.Queue {
		n := in.Nodes[q.Node]
		n.Grant = &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Queued, Reason: q.Reason, Time: n.QueuedAt()}
	}
}
