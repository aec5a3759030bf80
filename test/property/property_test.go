package property

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// The test's knobs, from the environment.
const (
	// seedEnv replays a run's sequence of events.
	seedEnv = "PROPERTY_SEED"
	// durationEnv is how long events keep coming (a Go duration).
	durationEnv = "PROPERTY_DURATION"
)

const (
	nodeCount       = 8
	defaultDuration = 3 * time.Minute
	// settleWithin bounds the wait for the cluster to come to rest once
	// every request is withdrawn: a guard against a hang, not a measure.
	// It covers the agents' two minutes (slots.Requester.ClaimGrace)
	// before an unclaimed request left by a restart is withdrawn.
	settleWithin = 6 * time.Minute
)

// TestDrainSlotProperties runs a seeded random sequence of maintenance
// requests (the annotation, NodeMaintenance objects), reboot requests (the
// reboot annotation, sentinel files), agents killed (their context
// cancelled, as SIGTERM does) and restarted, and the leading coordinator
// killed and restarted, against kwok nodes with one in-process agent each
// and two coordinators, slots.limit 2, a pool of half the
// nodes limited to 1, and a pool of every node limited to one zone
// (maxDomains 1; the nodes are in three zones, and one has no zone label).
// On every change of a Node, a slot Lease or a workload pod it checks:
//
//	P1 per pool, no more nodes hold a Granted grant than its limit;
//	P2 per pool, no more slot Leases exist than its limit;
//	P3 a node holds a grant only while its slot Lease for that request
//	   exists, and every slot Lease names its node;
//	P4 a pod is evicted only from a node that holds a drain slot;
//	P5 a drain is recorded Running (begun, resumed or evicting) only while
//	   its node holds a slot (a drain that lost its slot keeps its record,
//	   saying that it waits for one);
//	P6 a slot Lease answers a request its node made;
//	P7 an agent gives its slot back only once its drain is over or no
//	   longer asked for (the annotation, a NodeMaintenance object, the
//	   reboot's drain): an agent that stops mid-drain leaves the slot to
//	   the agent that comes next, or to the coordinator once it has been
//	   without a heartbeat for slots.heartbeatBound;
//	P8 a node holds a slot only to use it: its agent renews the request of
//	   a slot at most once while nothing drains or reboots the node;
//	P9 per pool with maxDomains, the nodes that hold a Granted grant are in
//	   no more failure domains than it (a node without the zone label
//	   counts as a domain of its own);
//	P10 per pool with maxDomains, so are the nodes that hold a slot Lease.
//
// At the end every request is withdrawn and everything down restarted;
// then every node must come back uncordoned and untainted, with no request,
// no Granted grant, no slot Lease and no NodeMaintenance object left.
//
// The seed fixes the sequence of events and the pauses between them, not
// how they interleave with what the agents and coordinators do meanwhile.
func TestDrainSlotProperties(t *testing.T) {
	if testing.Short() && os.Getenv(testenv.IntegrationEnv) != "1" {
		t.Skip("starts a control plane and runs for minutes; skipped with -short")
	}
	seed := seedFromEnv(t)
	duration := defaultDuration
	if v := os.Getenv(durationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", durationEnv, v, err)
		}
		duration = d
	}
	t.Logf("seed %d (replay with %s=%d), events for %s", seed, seedEnv, seed, duration)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d; replay the sequence with %s=%d", seed, seedEnv, seed)
		}
	})

	b := newBed(t, nodeCount, seed)
	ctx := t.Context()
	c := newChecker(seed)
	if err := c.start(ctx, b.admin, b.dyn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b.logTails()
		}
	})
	for _, n := range b.nodes {
		b.startAgent(n)
	}
	for _, id := range coordinatorIDs {
		b.startCoordinator(id)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.waitFor(waitCtx, func() (bool, string) { return c.leader != "", "no coordinator leads" }); err != nil {
		t.Fatal(err)
	}

	s := newSequence(seed, b.nodes)
	began := time.Now()
	for i := 1; time.Since(began) < duration; i++ {
		ev := s.next()
		what, rv, err := b.apply(ctx, c, ev)
		if err != nil {
			t.Errorf("seed %d: event %d (%s): %v", seed, i, ev, err)
			break
		}
		t.Logf("event %d at %s: %s", i, time.Since(began).Round(100*time.Millisecond), what)
		if rv != "" {
			// Checked once the checker has seen the event's own write.
			seenCtx, cancel := context.WithTimeout(ctx, time.Minute)
			err := c.seen(seenCtx, nodeStream, rv)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
		if v, err := c.report(); len(v) > 0 || err != nil {
			t.Errorf("seed %d: after event %d (%s): %d violations, watch error %v", seed, i, ev, len(v), err)
			break
		}
		time.Sleep(ev.gap)
	}

	settle(t, b, c)
	v, err := c.report()
	for _, msg := range v {
		t.Error(msg)
	}
	if err != nil {
		t.Errorf("seed %d: the checks are incomplete: %v", seed, err)
	}
	c.mu.Lock()
	st := c.stats
	c.mu.Unlock()
	t.Logf("seed %d: %d events; %d grants (%d revoked), %d reboots, %d leader changes; checked %d evictions, %d grants against their Leases, %d Leases gone, %d Running records, %d slots given back; most nodes holding a grant at once: %v (limits %s %d, %s %d); most slot Leases at once: %v; most zones holding slots at once: %v (maxDomains %d)",
		seed, s.count, st.grants, st.revocations, b.rebootCount(), st.leaderChanges, st.evictionsChecked, st.grantsChecked, st.leasesChecked, st.statusWrites, st.releasesChecked,
		st.mostHolding, slots.DefaultPool, clusterLimit, poolName, poolLimit, st.mostLeases, st.mostDomains, zoneMaxDomains)
}

func seedFromEnv(t *testing.T) uint64 {
	if v := os.Getenv(seedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, v, err)
		}
		return s
	}
	return rand.Uint64()
}

// apply carries an event out and says what it did; rv is the Node's
// resourceVersion after the event's write, "" when it wrote none.
func (b *bed) apply(ctx context.Context, c *checker, e event) (what, rv string, err error) {
	what = e.String()
	switch e.kind {
	case maintenanceToggle:
		var v *string
		if e.on {
			v = ptr.To("property test")
		}
		rv, err = b.annotate(ctx, e.node, selfdrain.MaintenanceAnnotation, v)
	case nodeMaintenanceCreate:
		err = b.createNodeMaintenance(ctx, e.group, e.name, e.node)
	case nodeMaintenanceDelete:
		if e.name != "" {
			err = b.deleteNodeMaintenance(ctx, e.group, e.name)
		}
	case rebootRequest:
		rv, err = b.annotate(ctx, e.node, reboot.RequestAnnotation, ptr.To("property test"))
	case rebootWithdraw:
		rv, err = b.annotate(ctx, e.node, reboot.RequestAnnotation, nil)
	case sentinelCreate:
		err = os.WriteFile(b.sentinel[e.node], nil, 0o644)
	case agentKill:
		if !b.killAgent(e.node) {
			what += ": not running"
		}
	case holderKill:
		holders := c.holders()
		if len(holders) == 0 {
			return what + ": none holds one", "", nil
		}
		node := holders[e.pick%len(holders)]
		what += ": " + node
		if !b.killAgent(node) {
			what += ", not running"
		}
	case agentRestart:
		if !b.startAgent(e.node) {
			what += ": running already (or its host reboots)"
		}
	case leaderKill:
		leader := c.leading()
		switch {
		case leader == "":
			what += ": none leads"
		case b.stopCoordinator(leader):
			what += ": " + leader
		default:
			what += ": " + leader + " is stopped already, its lease not yet released"
		}
	case coordinatorRestart:
		if !b.startCoordinator(e.coordinator) {
			what += ": running already"
		}
	}
	return what, rv, err
}

func (b *bed) rebootCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reboots
}

// settle withdraws every request, restarts what is down, and waits until
// the cluster is at rest: every node uncordoned, no request, no grant
// Granted, no slot Lease. It then makes sure the checker has decided every
// check it had pending.
func settle(t *testing.T, b *bed, c *checker) {
	t.Helper()
	ctx := t.Context()
	agents, coords := b.down()
	b.withdrawAll(ctx)
	for _, id := range coords {
		b.startCoordinator(id)
	}
	for _, n := range agents {
		b.startAgent(n)
	}
	t.Logf("every request withdrawn; restarted coordinators %v and agents %v; waiting for the cluster to come to rest", coords, agents)
	began := time.Now()
	atRest := func() (bool, string) {
		var busy []string
		for _, name := range sortedNodes(c.nodes) {
			st := c.nodes[name]
			if !st.atRest() {
				busy = append(busy, name+": "+st.describe())
			}
		}
		for _, n := range sortedNodes(c.leases) {
			busy = append(busy, "slot Lease of "+n)
		}
		return len(busy) == 0, "not at rest:\n  " + strings.Join(busy, "\n  ")
	}
	c.mu.Lock()
	_, busy := atRest()
	c.mu.Unlock()
	t.Log(busy)
	waitCtx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	err := c.waitFor(waitCtx, atRest)
	if err != nil {
		t.Errorf("seed %d: the cluster did not come to rest: %v", c.seed, err)
	} else {
		t.Logf("at rest after %s", time.Since(began).Round(100*time.Millisecond))
	}
	testenv.WaitFor(t, time.Minute, "every NodeMaintenance object gone", func() (bool, error) {
		left, err := b.nodeMaintenanceLeft(ctx)
		if len(left) > 0 {
			return false, fmt.Errorf("left: %v", left)
		}
		return err == nil, err
	})
	if err := b.fence(ctx, c); err != nil {
		t.Error(err)
	}
	if n := c.unresolved(); n > 0 {
		t.Errorf("seed %d: %d checks still pending after the fences", c.seed, n)
	}
}

// atRest: no request of any kind, no Granted grant, nothing left of a
// maintenance or a reboot on the node.
func (st *nodeState) atRest() bool {
	idle := st.record == nil || (st.record.Phase == reboot.PhaseIdle && !st.record.Drain)
	return st.reqRaw == "" && (st.grant == nil || st.grant.State != slots.Granted) &&
		!st.unschedulable && !st.tainted && !st.status.Active() && idle &&
		st.maintenance == "" && st.rebootRequest == ""
}

// fence writes an object of each watched kind that decides nothing and
// waits until the checker has seen it, so that every check pending on a
// watch's progress is decided.
func (b *bed) fence(ctx context.Context, c *checker) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rv, err := b.annotate(ctx, b.nodes[0], fenceAnnotation, ptr.To(time.Now().UTC().Format(time.RFC3339Nano)))
	if err != nil {
		return err
	}
	if err := c.seen(ctx, nodeStream, rv); err != nil {
		return err
	}
	l, err := b.admin.CoordinationV1().Leases(slotNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "property-fence-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if err := c.seen(ctx, leaseStream, l.ResourceVersion); err != nil {
		return err
	}
	for i, g := range maintenance.NodeMaintenanceGroups {
		// For a node that does not exist: no agent serves it.
		nm, err := maintenance.RequestNodeMaintenance(ctx, b.dyn, g, fmt.Sprintf("property-fence-%d", time.Now().UnixNano()), "no-such-node", "fence")
		if err != nil {
			return err
		}
		if err := c.seen(ctx, nmStream+stream(i), nm.ResourceVersion); err != nil {
			return err
		}
	}
	return nil
}

// logTails prints the end of every agent's and coordinator's log.
func (b *bed) logTails() {
	for _, name := range append(append([]string{}, coordinatorIDs...), b.nodes...) {
		f := b.logs[name]
		lines := 25
		if strings.HasPrefix(name, "coordinator") {
			lines = 60
		}
		b.t.Logf("--- last lines of %s ---\n%s", f.Name(), testenv.TailFile(f.Name(), lines))
	}
}
