package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestSlotsDrainZoneByZone is issue 44's acceptance for failure domains on
// the real control plane: six kwok nodes in three zones (two each), a pool
// of every node with a limit of two nodes and one zone (maxDomains 1), and
// all six asking for a maintenance slot at once, in an order that
// interleaves the zones (a-1, b-1, c-1, a-2, b-2, c-2). The requests are
// written as admin, with the content an agent writes, and kept alive by
// their heartbeat until the test gives each slot back, so that the test
// decides when a zone's maintenance ends. A watch of the slot Leases (the
// coordinator's record of every slot held) checks at each change that no
// two zones hold slots at once; the test checks that each zone had both its
// nodes in maintenance together (the limit of two used), and that the
// zones came one after another, each once.
//
// Each zone's slots are given back one at a time: the test gives the second
// back only once the first's Lease is gone, which the coordinator deletes in
// the decision that counts that slot free, before that decision's grants.
// A coordinator that let a new zone in beside the last holder of a zone
// would so create that zone's Lease before it deletes the second's, which
// the watch sees. Meanwhile a waiting node of another zone is answered that
// it waits for the zone in maintenance (maxDomains).
func TestSlotsDrainZoneByZone(t *testing.T) {
	env := fullEnv(t)
	c := env.Client()
	zoneOf := map[string]string{}
	for _, z := range []string{"a", "b", "c"} {
		addZonedNodes(t, env, zoneOf, "zone-"+z, "zone-"+z+"-1", "zone-"+z+"-2")
	}
	startCoordinator(t, env, "--slots-limit=6", `--slots-pools=[{"name":"zones","selector":"","limit":2,"maxDomains":1}]`)
	leases := watchSlotLeases(t, c)
	leases.check = oneZoneAtATime(zoneOf)

	asked := map[string]*heldRequest{}
	for _, n := range []string{"zone-a-1", "zone-b-1", "zone-c-1", "zone-a-2", "zone-b-2", "zone-c-2"} {
		asked[n] = askForSlot(t, c, n)
	}

	var order []string
	for range 3 {
		var holders []string
		testenv.WaitFor(t, 2*time.Minute, "both nodes of the next zone holding a slot", func() (bool, error) {
			holders = leases.holders()
			return len(holders) == 2, leases.stop()
		})
		z := zoneOf[holders[0]]
		if zoneOf[holders[1]] != z {
			t.Fatalf("slots held by %v, nodes of two zones", holders)
		}
		if slices.Contains(order, z) {
			t.Fatalf("%s holds slots again after %v; each zone asked once", z, order)
		}
		order = append(order, z)
		t.Logf("%s in maintenance: %v", z, holders)
		for _, n := range holders {
			if g := grantOn(t, c, n); g.State != slots.Granted || !g.Answers(asked[n].req) {
				t.Errorf("%s holds slot Lease %s but its Node shows %+v", n, slots.LeaseName(n), g)
			}
		}
		if len(order) == 3 {
			break
		}

		// The first gives its slot back: the other zones still wait,
		// for the zone, not for the limit.
		first, second := holders[0], holders[1]
		asked[first].withdraw(t)
		testenv.WaitFor(t, time.Minute, "the coordinator deciding with "+first+"'s slot free", func() (bool, error) {
			return !slices.Contains(leases.holders(), first), leases.stop()
		})
		testenv.WaitFor(t, time.Minute, "a node of another zone answered that it waits for "+z, func() (bool, error) {
			for n, r := range asked {
				if zoneOf[n] == z || r.withdrawn {
					continue
				}
				g := grantOn(t, c, n)
				if g.Answers(r.req) && g.State == slots.Queued && strings.Contains(g.Reason, "(maxDomains): "+z+";") {
					return true, leases.stop()
				}
			}
			return false, leases.stop()
		})
		if h := leases.holders(); !slices.Equal(h, []string{second}) {
			t.Fatalf("with %s's slot given back, slots are held by %v, want only %s", first, h, second)
		}
		asked[second].withdraw(t)
	}
	if err := leases.err(); err != nil {
		t.Fatal(err)
	}
	if most := leases.mostAtOnce(); most != 2 {
		t.Errorf("at most %d nodes held slots at once, want 2 (the pool's limit)", most)
	}
	t.Logf("zones in maintenance, in turn: %v", order)
}

// TestSafetyStopHoldsNewGrants is issue 44's acceptance for the cluster-wide
// safety stop on the real control plane: a pool of every node with
// maxUnhealthy 0, so that one node cordoned by someone other than
// node-agent stops every new grant. A node cordoned by node-agent's own
// maintenance (its record says cordonedByAgent) does not count: a first
// request is granted beside it. Once an admin cordons another node, a new
// request waits, answered with the safety stop's reason; the node that holds
// a slot keeps it. It gives the slot back, and still nothing is granted
// (the coordinator decided with the slot free: its metrics say so); the
// admin uncordons the node, and the waiting request is granted.
func TestSafetyStopHoldsNewGrants(t *testing.T) {
	env := fullEnv(t)
	ctx := t.Context()
	c := env.Client()
	if err := env.AddNodes(ctx, []string{"stop-1", "stop-2", "stop-own", "stop-admin"}); err != nil {
		t.Fatal(err)
	}
	// stop-own is in maintenance, drained and cordoned by node-agent, as
	// its agent records it.
	own := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, CordonedByAgent: true, TaintedByAgent: true}
	if err := mergePatchNode(t, c, "stop-own", obj{"metadata": obj{"annotations": obj{selfdrain.StatusAnnotation: own.Encode()}},
		"spec": obj{"unschedulable": true}}, false); err != nil {
		t.Fatal(err)
	}
	startCoordinator(t, env, "--slots-limit=3", `--slots-pools=[{"name":"all","selector":"","maxUnhealthy":0}]`)
	leases := watchSlotLeases(t, c)

	first := askForSlot(t, c, "stop-1")
	first.waitGranted(t, c)

	cordon := func(on bool) string {
		t.Helper()
		patch, err := json.Marshal(obj{"spec": obj{"unschedulable": on}})
		if err != nil {
			t.Fatal(err)
		}
		n, err := c.CoreV1().Nodes().Patch(ctx, "stop-admin", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.ResourceVersion
	}
	stoppedAt := cordon(true)
	stopped := func() (bool, error) {
		v := coordinatorMetric(t, env, `node_agent_drain_slot_safety_stop{pool="all"}`)
		return v == 1, nil
	}
	testenv.WaitFor(t, time.Minute, "the safety stop of pool all", stopped)

	second := askForSlot(t, c, "stop-2")
	testenv.WaitFor(t, time.Minute, "stop-2 answered with the safety stop", func() (bool, error) {
		g := grantOn(t, c, "stop-2")
		return g.Answers(second.req) && g.State == slots.Queued && strings.Contains(g.Reason, "safety stop") && strings.Contains(g.Reason, "stop-admin"), nil
	})
	if g := grantOn(t, c, "stop-2"); strings.Contains(g.Reason, "stop-own") {
		t.Errorf("the safety stop counts stop-own, cordoned by node-agent's own maintenance: %q", g.Reason)
	}
	t.Logf("stop-2 waits: %s", grantOn(t, c, "stop-2").Reason)
	// The holder keeps its slot.
	if g := grantOn(t, c, "stop-1"); g.State != slots.Granted || !slices.Contains(leases.holders(), "stop-1") {
		t.Errorf("stop-1 lost its slot to the safety stop: %+v, holders %v", g, leases.holders())
	}

	// The slot is given back; the next decision, with a slot free, still
	// grants nothing while stop-admin is cordoned.
	first.withdraw(t)
	testenv.WaitFor(t, time.Minute, "a decision with stop-1's slot free", func() (bool, error) {
		held := coordinatorMetric(t, env, `node_agent_drain_slot_held{pool="all"}`)
		waiting := coordinatorMetric(t, env, `node_agent_drain_slot_waiting{pool="all"}`)
		return !slices.Contains(leases.holders(), "stop-1") && held == 0 && waiting == 1, leases.stop()
	})
	if h := leases.holders(); len(h) != 0 {
		t.Fatalf("slots held during the safety stop: %v", h)
	}

	resumedAt := cordon(false)
	second.waitGranted(t, c)
	if err := leases.err(); err != nil {
		t.Fatal(err)
	}
	// From the Leases' history: stop-2's slot was created only after the
	// uncordon, never between the cordon and it.
	for _, ch := range leases.changes() {
		if ch.added && ch.node == "stop-2" && ch.rv > parseRV(t, stoppedAt) && ch.rv < parseRV(t, resumedAt) {
			t.Errorf("stop-2 was granted at resourceVersion %d, while stop-admin was cordoned (%s to %s)", ch.rv, stoppedAt, resumedAt)
		}
	}
}

// heldRequest is a slot request written as a node's agent would, kept
// alive by its heartbeat until withdrawn or the test ends.
type heldRequest struct {
	c         kubernetes.Interface
	node      string
	req       *slots.Request
	cancel    context.CancelFunc
	done      chan struct{}
	withdrawn bool
}

// askForSlot writes node's request for a maintenance slot and bumps its
// heartbeat every 10 s (slots.heartbeatBound is 1m), as the agent does,
// until withdraw or the end of the test. Unlike holdSlot it does not wait
// for the grant.
func askForSlot(t *testing.T, c kubernetes.Interface, node string) *heldRequest {
	t.Helper()
	h := &heldRequest{c: c, node: node, req: &slots.Request{Purpose: slots.PurposeMaintenance, ID: "zones-" + node, RequestedAt: time.Now().UTC().Truncate(time.Second)},
		done: make(chan struct{})}
	writeRequest(t, c, node, h.req)
	var ctx context.Context
	ctx, h.cancel = context.WithCancel(context.Background())
	beat := *h.req
	go func() {
		defer close(h.done)
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			beat.Heartbeat++
			patch, err := json.Marshal(obj{"metadata": obj{"annotations": obj{slots.RequestAnnotation: beat.Encode()}}})
			if err == nil {
				_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
			}
			if err != nil && ctx.Err() == nil {
				t.Logf("renewing %s's slot request: %v", node, err)
			}
		}
	}()
	t.Cleanup(func() { h.cancel(); <-h.done })
	return h
}

// withdraw stops the heartbeat and removes the request, which gives the
// slot back.
func (h *heldRequest) withdraw(t *testing.T) {
	t.Helper()
	h.cancel()
	<-h.done
	h.withdrawn = true
	removeRequest(t, h.c, h.node)
}

func (h *heldRequest) waitGranted(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, h.node+" granted a slot", func() (bool, error) {
		g := grantOn(t, c, h.node)
		return g.Answers(h.req) && g.State == slots.Granted, nil
	})
}

// grantOn is node's answer; none reads as the zero Grant.
func grantOn(t *testing.T, c kubernetes.Interface, node string) *slots.Grant {
	t.Helper()
	g, _ := slots.ParseGrant(getNode(t, c, node))
	if g == nil {
		return &slots.Grant{}
	}
	return g
}

// leaseWatch follows the slot Leases of agentNamespace through a watch
// that resumes where it stopped (so no change is missed), and keeps who
// holds a slot after each change.
type leaseWatch struct {
	mu      sync.Mutex
	held    map[string]bool
	history []leaseChange
	most    int
	failed  error
	// check, when set, is asked at every change with the holders.
	check func(holders []string) error
}

type leaseChange struct {
	node  string
	added bool
	rv    int64
}

// addZonedNodes adds kwok nodes labelled with zone as their failure domain
// (config.DefaultTopologyKey), and notes their zone in zoneOf.
func addZonedNodes(t *testing.T, env *testenv.Env, zoneOf map[string]string, zone string, nodes ...string) {
	t.Helper()
	if err := env.AddNodes(t.Context(), nodes, testenv.WithNodeLabels(map[string]string{config.DefaultTopologyKey: zone})); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		zoneOf[n] = zone
	}
}

// oneZoneAtATime is a leaseWatch check: at every change of the holders,
// never nodes of two zones (zoneOf) hold slots at once.
func oneZoneAtATime(zoneOf map[string]string) func(holders []string) error {
	return func(holders []string) error {
		zones := map[string]bool{}
		for _, h := range holders {
			zones[zoneOf[h]] = true
		}
		if len(zones) > 1 {
			return fmt.Errorf("nodes of %d zones hold slots at once: %v", len(zones), holders)
		}
		return nil
	}
}

// watchSlotLeases starts a leaseWatch, from the slot Leases there are now,
// until the test ends.
func watchSlotLeases(t *testing.T, c kubernetes.Interface) *leaseWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	api := c.CoordinationV1().Leases(agentNamespace)
	sel := metav1.ListOptions{LabelSelector: slots.SlotLabel + "=true"}
	list, err := api.List(ctx, sel)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &leaseWatch{held: map[string]bool{}}
	for _, l := range list.Items {
		w.held[ptr.Deref(l.Spec.HolderIdentity, l.Name)] = true
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.LabelSelector
			return api.Watch(ctx, o)
		},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				if !ok {
					w.fail(fmt.Errorf("the watch of the slot Leases ended"))
					return
				}
				l, isLease := ev.Object.(*coordinationv1.Lease)
				if !isLease || (ev.Type != watch.Added && ev.Type != watch.Deleted && ev.Type != watch.Modified) {
					continue
				}
				w.observe(ev.Type, l)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *leaseWatch) observe(typ watch.EventType, l *coordinationv1.Lease) {
	node := ptr.Deref(l.Spec.HolderIdentity, l.Name)
	rv, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch typ {
	case watch.Deleted:
		delete(w.held, node)
	case watch.Added:
		w.held[node] = true
	default:
		return
	}
	w.history = append(w.history, leaseChange{node: node, added: typ == watch.Added, rv: rv})
	w.most = max(w.most, len(w.held))
	if w.check != nil && w.failed == nil {
		if err := w.check(slices.Sorted(maps.Keys(w.held))); err != nil {
			w.failed = fmt.Errorf("at resourceVersion %d (%s %s): %w", rv, typ, l.Name, err)
		}
	}
}

func (w *leaseWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed == nil {
		w.failed = err
	}
}

// holders are the nodes that hold a slot Lease, by name.
func (w *leaseWatch) holders() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.held))
}

// stop is err for a testenv.WaitFor condition: a violation seen, or a
// watch that ended, fails the wait at once.
func (w *leaseWatch) stop() error {
	if err := w.err(); err != nil {
		return testenv.StopPolling(err)
	}
	return nil
}

func (w *leaseWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

func (w *leaseWatch) mostAtOnce() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most
}

func (w *leaseWatch) changes() []leaseChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.history)
}

func parseRV(t *testing.T, rv string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return v
}
