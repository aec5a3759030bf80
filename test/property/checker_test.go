package property

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// The checker follows every Node, every Lease of slots.namespace and
// every pod of the workload through watches, and checks the properties on
// each change it sees (see the list in property_test.go).
//
// Some properties relate two kinds of object: a pod's eviction and its
// node's grant, a grant and its Lease. They compare resourceVersions across
// kinds, which the API calls opaque; on this test bed (one etcd) a
// resourceVersion is etcd's revision, one order for every kind of object.
// Each watch delivers its kind in that order, so the state of a kind at a
// revision is known once its watch has gone past it: such a check waits
// until then (pending) and is decided in resolve.

// stream is one of the checker's watches.
type stream int

const (
	nodeStream stream = iota
	leaseStream
	podStream
	// nmStream is the first of the NodeMaintenance streams, one per group
	// of maintenance.NodeMaintenanceGroups.
	nmStream
)

var streams = nmStream + stream(len(maintenance.NodeMaintenanceGroups))

func (s stream) String() string {
	if s >= nmStream {
		return "NodeMaintenance objects of " + maintenance.NodeMaintenanceGroups[s-nmStream]
	}
	return [...]string{"Nodes", "Leases", "pods"}[s]
}

// pool is a drain limit as the test configured it.
type pool struct {
	name     string
	selector labels.Selector // nil: every node
	limit    int             // 0: none
	// maxDomains bounds the distinct values of topologyKey among the
	// pool's holders; 0: none.
	maxDomains  int
	topologyKey string
}

func (p pool) has(l map[string]string) bool {
	return p.selector == nil || p.selector.Matches(labels.Set(l))
}

// domains are the failure domains of nodes, p's holders: the values of
// p.topologyKey, and each node without one on its own (as pkg/slots counts
// them).
func (p pool) domains(nodes []string, labelsOf func(string) map[string]string) []string {
	seen := map[string]bool{}
	for _, n := range nodes {
		if z := labelsOf(n)[p.topologyKey]; z != "" {
			seen[z] = true
		} else {
			seen["(node "+n+")"] = true
		}
	}
	return sortedNodes(seen)
}

// checkHolders checks P1 or P2 (what), the limit, and P9 or P10 (domains),
// the failure domains, for the holders of one pool.
func (c *checker) checkHolders(p pool, holders []string, limitRule, domainRule, what string, rv int64) {
	if p.limit > 0 && len(holders) > p.limit {
		c.violate(limitRule, "at resourceVersion %d, %d %s pool %s (%s), its limit is %d",
			rv, len(holders), what, p.name, strings.Join(holders, ", "), p.limit)
	}
	if p.maxDomains == 0 {
		return
	}
	doms := p.domains(holders, func(n string) map[string]string {
		if st := c.nodes[n]; st != nil {
			return st.labels
		}
		return nil
	})
	c.stats.mostDomains[p.name] = max(c.stats.mostDomains[p.name], len(doms))
	if len(doms) > p.maxDomains {
		c.violate(domainRule, "at resourceVersion %d, %s pool %s (%s) are in %d failure domains (%s), its maxDomains is %d",
			rv, what, p.name, strings.Join(holders, ", "), len(doms), strings.Join(doms, ", "), p.maxDomains)
	}
}

// nodeState is what the checker knows of one Node.
type nodeState struct {
	name   string
	labels map[string]string
	rv     int64

	req     *slots.Request
	reqRaw  string
	grant   *slots.Grant
	status  *selfdrain.Status
	statRaw string
	record  *reboot.Record
	// maintenance and rebootRequest are the admin's annotations.
	maintenance, rebootRequest string
	unschedulable, tainted     bool

	// holding: the grant answers the node's current request and says
	// Granted, as the agent reads it (slots.Requester).
	holding bool
	// revoked: the node last stopped holding because the coordinator
	// revoked its grant, not because its agent gave the slot back.
	revoked bool
	// idleRequest is the request whose slot the node holds without using
	// it (P8), "" for none; idleBeats counts its renewals meanwhile.
	idleRequest string
	idleBeat    int64
	idleBeats   int
	// holds is when holding changed, by resourceVersion.
	holds []holdMark
	// requests are the request IDs seen on the node, with the first
	// resourceVersion that showed each.
	requests map[string]int64
	// recent is the node's last few changes, for violation messages.
	recent []string
}

type holdMark struct {
	rv      int64
	holding bool
	grantID string
}

// leaseMark is a slot Lease appearing (present) or going.
type leaseMark struct {
	rv        int64
	present   bool
	requestID string
}

// Pending cross-kind checks, decided in resolve.
type (
	// evictionCheck: a pod of node was being deleted at rv.
	evictionCheck struct {
		node, pod string
		rv        int64
	}
	// grantCheck: node began holding grant (the request id) at rv.
	grantCheck struct {
		node, id, slot string
		rv             int64
	}
	// leaseGoneCheck: node's slot Lease for request id went at rv.
	leaseGoneCheck struct {
		node, id string
		rv       int64
	}
	// leaseNewCheck: a slot Lease for node's request id appeared at rv.
	leaseNewCheck struct {
		node, id string
		rv       int64
	}
	// releaseCheck: node's agent gave its slot back at rv while its drain
	// was recorded Running (trigger); asked says whether the Node itself
	// still asked for it then (the annotation, the reboot's drain).
	releaseCheck struct {
		node    string
		trigger selfdrain.Trigger
		asked   bool
		rv      int64
	}
)

// nmMark is whether a NodeMaintenance object of one group asked for a
// node's maintenance (one that is not being deleted), from rv on.
type nmMark struct {
	rv    int64
	asked bool
}

// stats counts what the run went through.
type stats struct {
	grants, revocations, leaderChanges int
	evictionsChecked, grantsChecked    int
	leasesChecked, statusWrites        int
	releasesChecked                    int
	mostHolding                        map[string]int
	mostLeases                         map[string]int
	// mostDomains is, per pool with maxDomains, the most failure domains
	// seen holding its grants or Leases at once.
	mostDomains map[string]int
}

type checker struct {
	seed  uint64
	pools []pool

	mu      sync.Mutex
	changed chan struct{}
	nodes   map[string]*nodeState
	// leases are the slot Leases by node, leaseHist their history.
	leases    map[string]*coordinationv1.Lease
	leaseHist map[string][]leaseMark
	leader    string
	progress  []int64
	deleting  map[types.UID]bool
	// nmObjects are the NodeMaintenance objects by stream, name; nmHist
	// whether any asked for a node, by stream and node.
	nmObjects map[stream]map[string]*unstructured.Unstructured
	nmHist    map[stream]map[string][]nmMark

	evictions []evictionCheck
	grantsDue []grantCheck
	leaseGone []leaseGoneCheck
	leaseNew  []leaseNewCheck
	releases  []releaseCheck

	violations []string
	stats      stats
	// failed is a watch that ended: the checks are incomplete.
	failed error
}

func newChecker(seed uint64) *checker {
	sel, err := labels.Parse(poolLabel + "=" + poolName)
	if err != nil {
		panic(err)
	}
	return &checker{
		seed: seed,
		pools: []pool{{name: slots.DefaultPool, limit: clusterLimit}, {name: poolName, selector: sel, limit: poolLimit},
			{name: zonePool, maxDomains: zoneMaxDomains, topologyKey: config.DefaultTopologyKey}},
		changed: make(chan struct{}), nodes: map[string]*nodeState{},
		leases: map[string]*coordinationv1.Lease{}, leaseHist: map[string][]leaseMark{}, deleting: map[types.UID]bool{},
		progress: make([]int64, streams), nmObjects: map[stream]map[string]*unstructured.Unstructured{}, nmHist: map[stream]map[string][]nmMark{},
		stats: stats{mostHolding: map[string]int{}, mostLeases: map[string]int{}, mostDomains: map[string]int{}},
	}
}

// follow is how to list and watch one stream.
type follow struct {
	s     stream
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// start lists and watches every stream until ctx ends.
func (c *checker) start(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface) error {
	follows := []follow{
		{nodeStream,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoreV1().Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoreV1().Nodes().Watch(ctx, o)
			}},
		{leaseStream,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoordinationV1().Leases(slotNamespace).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoordinationV1().Leases(slotNamespace).Watch(ctx, o)
			}},
		{podStream,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoreV1().Pods(workNamespace).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoreV1().Pods(workNamespace).Watch(ctx, o)
			}},
	}
	for i, g := range maintenance.NodeMaintenanceGroups {
		r := dyn.Resource(maintenance.NodeMaintenanceGVR(g))
		follows = append(follows, follow{nmStream + stream(i),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return r.List(ctx, o) },
			r.Watch})
	}
	for _, f := range follows {
		list, err := f.list(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing %s: %w", f.s, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		rv, err := meta.NewAccessor().ResourceVersion(list)
		if err != nil {
			return err
		}
		for _, o := range items {
			c.handle(f.s, watch.Added, o)
		}
		c.bookmark(f.s, rv)
		// A RetryWatcher reopens a watch that ends from the last
		// resourceVersion it delivered, so no change is missed; it ends
		// only when that is impossible, which fails the run.
		w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: f.watch})
		if err != nil {
			return err
		}
		go func(s stream) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						c.fail(fmt.Errorf("the watch of %s ended", s))
						return
					}
					if ev.Type == watch.Error {
						c.fail(fmt.Errorf("the watch of %s failed: %v", s, apiStatus(ev.Object)))
						return
					}
					if ev.Type == watch.Bookmark {
						// The watch has sent everything up to here.
						if rv, err := meta.NewAccessor().ResourceVersion(ev.Object); err == nil {
							c.bookmark(s, rv)
						}
						continue
					}
					c.handle(s, ev.Type, ev.Object)
				}
			}
		}(f.s)
	}
	return nil
}

func apiStatus(o runtime.Object) string {
	if s, ok := o.(*metav1.Status); ok {
		return s.Message
	}
	return fmt.Sprintf("%T", o)
}

func (c *checker) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = err
	}
	c.notify()
}

// notify wakes every wait; c.mu is held.
func (c *checker) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *checker) bookmark(s stream, rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.notify()
	c.progress[s] = max(c.progress[s], parseRV(rv))
	c.resolve()
}

func (c *checker) handle(s stream, typ watch.EventType, o runtime.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.notify()
	switch obj := o.(type) {
	case *corev1.Node:
		c.node(typ, obj)
	case *coordinationv1.Lease:
		c.lease(typ, obj)
	case *corev1.Pod:
		c.pod(typ, obj)
	case *unstructured.Unstructured:
		c.nodeMaintenance(s, typ, obj)
	default:
		return
	}
	c.resolve()
}

// nodeMaintenance takes a NodeMaintenance object's change.
func (c *checker) nodeMaintenance(s stream, typ watch.EventType, o *unstructured.Unstructured) {
	rv := parseRV(o.GetResourceVersion())
	c.progress[s] = rv
	node, _, _ := unstructured.NestedString(o.Object, "spec", "nodeName")
	objs := c.nmObjects[s]
	if objs == nil {
		objs = map[string]*unstructured.Unstructured{}
		c.nmObjects[s] = objs
	}
	if typ == watch.Deleted {
		delete(objs, o.GetName())
	} else {
		objs[o.GetName()] = o
	}
	asked := false
	for _, other := range objs {
		n, _, _ := unstructured.NestedString(other.Object, "spec", "nodeName")
		if n == node && other.GetDeletionTimestamp() == nil {
			asked = true
		}
	}
	if c.nmHist[s] == nil {
		c.nmHist[s] = map[string][]nmMark{}
	}
	if h := c.nmHist[s][node]; len(h) == 0 || h[len(h)-1].asked != asked {
		c.nmHist[s][node] = append(h, nmMark{rv: rv, asked: asked})
	}
}

// nmAskedAt says whether a NodeMaintenance object asked for node's
// maintenance at revision rv.
func (c *checker) nmAskedAt(node string, rv int64) bool {
	for s := nmStream; s < streams; s++ {
		h := c.nmHist[s][node]
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].rv <= rv {
				if h[i].asked {
					return true
				}
				break
			}
		}
	}
	return false
}

// nmSeen says whether every NodeMaintenance watch has passed rv.
func (c *checker) nmSeen(rv int64) bool {
	for s := nmStream; s < streams; s++ {
		if c.progress[s] < rv {
			return false
		}
	}
	return true
}

func parseRV(rv string) int64 {
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}

// violate records a broken property.
func (c *checker) violate(property, format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf("seed %d: %s: %s", c.seed, property, fmt.Sprintf(format, args...)))
}

// node takes a Node's change and checks what it alone shows.
func (c *checker) node(typ watch.EventType, n *corev1.Node) {
	rv := parseRV(n.ResourceVersion)
	c.progress[nodeStream] = rv
	if typ == watch.Deleted {
		return // the test deletes no Node
	}
	st := c.nodes[n.Name]
	if st == nil {
		st = &nodeState{name: n.Name, requests: map[string]int64{}, holds: []holdMark{{}}}
		c.nodes[n.Name] = st
	}
	prev := *st
	st.rv, st.labels = rv, n.Labels
	a := n.Annotations
	st.reqRaw = a[slots.RequestAnnotation]
	st.req, _ = slots.ParseRequest(n)
	st.grant, _ = slots.ParseGrant(n)
	st.statRaw = a[selfdrain.StatusAnnotation]
	st.status, _ = selfdrain.ParseStatus(n)
	st.record, _ = reboot.ParseRecord(n)
	st.maintenance, st.rebootRequest = a[selfdrain.MaintenanceAnnotation], a[reboot.RequestAnnotation]
	st.unschedulable, st.tainted = n.Spec.Unschedulable, testenv.HasTaint(n, testenv.DrainTaint)
	st.holding = st.req != nil && st.grant.Answers(st.req) && st.grant.State == slots.Granted
	if st.req != nil {
		if _, ok := st.requests[st.req.ID]; !ok {
			st.requests[st.req.ID] = rv
		}
	}
	if d := st.describe(); len(st.recent) == 0 || d != prev.describe() {
		st.recent = append(st.recent, fmt.Sprintf("rv %d: %s", rv, d))
		if len(st.recent) > 12 {
			st.recent = st.recent[1:]
		}
	}
	if st.grant != nil && st.grant.State == slots.Revoked && (prev.grant == nil || prev.grant.State != slots.Revoked || prev.grant.ID != st.grant.ID) {
		c.stats.revocations++
	}
	if st.holding != prev.holding || (st.holding && st.grant.ID != prev.grant.ID) {
		st.holds = append(st.holds, holdMark{rv: rv, holding: st.holding, grantID: grantID(st)})
		if st.holding {
			c.stats.grants++
			st.revoked = false
			c.grantsDue = append(c.grantsDue, grantCheck{node: n.Name, id: st.grant.ID, slot: st.grant.Slot, rv: rv})
		}
	}
	if prev.holding && !st.holding {
		st.revoked = st.grant != nil && st.grant.ID == prev.grant.ID && st.grant.State == slots.Revoked
		if !st.revoked && st.status.Active() && st.status.Phase == selfdrain.PhaseRunning && !waitsForSlot(st.status) {
			// The agent gave its slot back with its drain recorded
			// Running: allowed only when nothing asks for that drain
			// any longer (decided in resolve, once the NodeMaintenance
			// watches are there too).
			c.releases = append(c.releases, releaseCheck{node: n.Name, trigger: st.status.Trigger, rv: rv,
				asked: st.maintenance != "" || (st.record != nil && st.record.Drain)})
		}
	}

	// P1: grants within every limit.
	for _, p := range c.pools {
		var holders []string
		for _, name := range sortedNodes(c.nodes) {
			if o := c.nodes[name]; o.holding && p.has(o.labels) {
				holders = append(holders, name)
			}
		}
		c.stats.mostHolding[p.name] = max(c.stats.mostHolding[p.name], len(holders))
		c.checkHolders(p, holders, "P1 grants within the limit", "P9 grants within maxDomains", "nodes holding a Granted grant in", rv)
	}
	c.checkIdle(st)
	// P5: a drain runs only in a slot. The drain engine writes phase
	// Running when it begins or resumes (Begin) and while it evicts
	// (progress); a drain that lost its slot keeps its record and says that
	// it waits for one (selfdrain's slotWait), and a maintenance that ended
	// keeps its last phase with an end time.
	if st.statRaw != prev.statRaw && st.status.Active() && st.status.Phase == selfdrain.PhaseRunning {
		c.stats.statusWrites++
		if !st.holding && !waitsForSlot(st.status) {
			c.violate("P5 a drain runs only in a slot", "at resourceVersion %d, %s recorded its drain Running (trigger %s) without holding a drain slot; its last changes:\n  %s",
				rv, n.Name, st.status.Trigger, strings.Join(st.recent, "\n  "))
		}
	}
}

// idleRenewals is how many renewals of a request whose slot is not used
// P8 lets pass. The agent renews every third of slots.heartbeatBound, so
// a holder between its grant and its drain's start, or between the drain's
// end and its release (a few requests' time), sees at most one.
const idleRenewals = 2

// checkIdle is P8: a node holds a slot only to drain or reboot. Counted in
// renewals of the holder's request, the agent's own clock, not in time: a
// holder that renews its slot twice while nothing drains or reboots the
// node keeps other nodes from draining for nothing.
func (c *checker) checkIdle(st *nodeState) {
	if !st.holding || st.busy() {
		st.idleRequest = ""
		return
	}
	if st.idleRequest != st.req.ID {
		st.idleRequest, st.idleBeat, st.idleBeats = st.req.ID, st.req.Heartbeat, 0
		return
	}
	if st.req.Heartbeat == st.idleBeat {
		return
	}
	st.idleBeat = st.req.Heartbeat
	st.idleBeats++
	if st.idleBeats == idleRenewals {
		c.violate("P8 a slot is used", "at resourceVersion %d, %s renewed its %s slot %d times while nothing drained or rebooted the node; its last changes:\n  %s",
			st.rv, st.name, st.req.Purpose, idleRenewals, recent(st))
	}
}

// busy says the node uses its slot: its drain runs (and does not itself
// wait for a slot), or its reboot's drain is over and the host goes down.
func (st *nodeState) busy() bool {
	if s := st.status; s.Active() && s.Phase == selfdrain.PhaseRunning && !waitsForSlot(s) {
		return true
	}
	if st.req.Purpose == slots.PurposeReboot && st.record != nil {
		switch st.record.Phase {
		case reboot.PhaseDrained, reboot.PhaseRebootRequested:
			return true
		case reboot.PhaseDraining:
			// The drain is over and the host goes down: the coordinator
			// keeps its slot across the reboot (holdSeconds, which
			// changes the heartbeat) one write before it records that it
			// asked for the reboot. A renewal between the two writes
			// is no idle renewal.
			return st.req.HoldSeconds > 0
		}
	}
	return false
}

func grantID(st *nodeState) string {
	if st.grant == nil {
		return ""
	}
	return st.grant.ID
}

// waitsForSlot says st is a drain's record kept while it waits for a slot
// again: pkg/selfdrain's slotWait.record writes these two messages.
func waitsForSlot(st *selfdrain.Status) bool {
	return strings.HasPrefix(st.LastError, "waiting for a drain slot") || strings.HasPrefix(st.LastError, "cannot get a drain slot")
}

// describe is the part of the node's state the properties look at.
func (st *nodeState) describe() string {
	var b strings.Builder
	if st.req != nil {
		fmt.Fprintf(&b, "request %s/%s", st.req.Purpose, st.req.ID)
		if st.req.HoldSeconds > 0 {
			fmt.Fprintf(&b, " kept %ds", st.req.HoldSeconds)
		}
	} else {
		b.WriteString("no request")
	}
	if g := st.grant; g != nil {
		fmt.Fprintf(&b, ", grant %s %s/%s", g.State, g.Purpose, g.ID)
		if g.Reason != "" && g.State == slots.Revoked {
			fmt.Fprintf(&b, " (%s)", g.Reason)
		}
	}
	if s := st.status; s != nil {
		fmt.Fprintf(&b, ", drain %s %s", s.Phase, s.Trigger)
		if s.EndTime != nil {
			b.WriteString(" ended")
		}
		if s.LastError != "" {
			fmt.Fprintf(&b, " (%.60s)", s.LastError)
		}
	}
	if r := st.record; r != nil && (r.Phase != "" || r.Drain) {
		fmt.Fprintf(&b, ", reboot %s drain=%v", r.Phase, r.Drain)
	}
	if st.maintenance != "" {
		b.WriteString(", annotation")
	}
	if st.rebootRequest != "" {
		b.WriteString(", reboot asked")
	}
	if st.unschedulable {
		b.WriteString(", cordoned")
	}
	return b.String()
}

// lease takes a Lease's change: the election's or a slot's.
func (c *checker) lease(typ watch.EventType, l *coordinationv1.Lease) {
	rv := parseRV(l.ResourceVersion)
	c.progress[leaseStream] = rv
	if l.Name == "node-agent-coordinator" {
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != c.leader {
			if h != "" {
				c.stats.leaderChanges++
			}
			c.leader = h
		}
		return
	}
	if l.Labels[slots.SlotLabel] != "true" {
		return
	}
	node := ptr.Deref(l.Spec.HolderIdentity, "")
	id := l.Annotations[slots.LeaseRequestID]
	if node == "" || l.Name != slots.LeaseName(node) {
		c.violate("P3 slot Leases name their node", "slot Lease %s at resourceVersion %d is held by %q", l.Name, rv, node)
		return
	}
	switch typ {
	case watch.Deleted:
		delete(c.leases, node)
		c.leaseHist[node] = append(c.leaseHist[node], leaseMark{rv: rv})
		c.leaseGone = append(c.leaseGone, leaseGoneCheck{node: node, id: id, rv: rv})
		return
	case watch.Added:
		c.leaseNew = append(c.leaseNew, leaseNewCheck{node: node, id: id, rv: rv})
	}
	c.leases[node] = l
	c.leaseHist[node] = append(c.leaseHist[node], leaseMark{rv: rv, present: true, requestID: id})
	// P2: slot Leases within every limit.
	for _, p := range c.pools {
		var holders []string
		for _, n := range sortedNodes(c.leases) {
			if st := c.nodes[n]; st != nil && p.has(st.labels) {
				holders = append(holders, n)
			}
		}
		c.stats.mostLeases[p.name] = max(c.stats.mostLeases[p.name], len(holders))
		c.checkHolders(p, holders, "P2 slot Leases within the limit", "P10 slot Leases within maxDomains", "nodes holding a slot Lease in", rv)
	}
}

// pod takes a workload pod's change: the drains are the only ones that
// delete them (an eviction, as the test runs no other deleter).
func (c *checker) pod(typ watch.EventType, p *corev1.Pod) {
	rv := parseRV(p.ResourceVersion)
	c.progress[podStream] = rv
	if (p.DeletionTimestamp == nil && typ != watch.Deleted) || c.deleting[p.UID] || p.Spec.NodeName == "" {
		return
	}
	c.deleting[p.UID] = true
	c.evictions = append(c.evictions, evictionCheck{node: p.Spec.NodeName, pod: p.Name, rv: rv})
}

// resolve decides the pending checks whose revision both watches have
// passed.
func (c *checker) resolve() {
	c.evictions = slices.DeleteFunc(c.evictions, func(e evictionCheck) bool {
		if e.rv > c.progress[nodeStream] {
			return false
		}
		c.stats.evictionsChecked++
		// P4: a pod leaves only a node that holds a slot.
		if st := c.nodes[e.node]; st == nil || !st.holdingAt(e.rv) {
			c.violate("P4 evictions only in a slot", "pod %s/%s on %s was evicted at resourceVersion %d while %s held no drain slot; its last changes:\n  %s",
				workNamespace, e.pod, e.node, e.rv, e.node, recent(st))
		}
		return true
	})
	c.grantsDue = slices.DeleteFunc(c.grantsDue, func(g grantCheck) bool {
		if g.rv > c.progress[leaseStream] {
			return false
		}
		c.stats.grantsChecked++
		// P3: a grant stands on its slot Lease: the coordinator creates
		// the Lease first.
		if m, ok := c.leaseAt(g.node, g.rv); !ok || !m.present || m.requestID != g.id {
			c.violate("P3 a grant has its slot Lease", "%s held grant %s (slot %s) at resourceVersion %d without a slot Lease for that request (Lease then: %+v); its last changes:\n  %s",
				g.node, g.id, g.slot, g.rv, m, recent(c.nodes[g.node]))
		}
		return true
	})
	c.leaseGone = slices.DeleteFunc(c.leaseGone, func(l leaseGoneCheck) bool {
		if l.rv > c.progress[nodeStream] {
			return false
		}
		c.stats.leasesChecked++
		// P3: a slot goes only once its grant no longer stands: the
		// coordinator revokes first, or the request is gone.
		if st := c.nodes[l.node]; st != nil && st.holdingAt(l.rv) && st.grantAt(l.rv) == l.id {
			c.violate("P3 a grant has its slot Lease", "the slot Lease of %s for request %s was deleted at resourceVersion %d while the node still held its grant; its last changes:\n  %s",
				l.node, l.id, l.rv, recent(st))
		}
		return true
	})
	c.releases = slices.DeleteFunc(c.releases, func(r releaseCheck) bool {
		if !c.nmSeen(r.rv) {
			return false
		}
		c.stats.releasesChecked++
		// P7: a drain keeps its slot until it is over or no longer asked
		// for; an agent that stops (a rollout, a crash) leaves it to the
		// next agent, or to the coordinator once the agent has been
		// without a heartbeat for slots.heartbeatBound.
		if r.asked || c.nmAskedAt(r.node, r.rv) {
			c.violate("P7 a drain keeps its slot", "at resourceVersion %d, %s gave its drain slot back while its drain (trigger %s) was recorded Running and still asked for; its last changes:\n  %s",
				r.rv, r.node, r.trigger, recent(c.nodes[r.node]))
		}
		return true
	})
	c.leaseNew = slices.DeleteFunc(c.leaseNew, func(l leaseNewCheck) bool {
		if l.rv > c.progress[nodeStream] {
			return false
		}
		// P6: a slot answers a request the node made: no Lease for a node
		// that never asked, or for a request it never wrote.
		st := c.nodes[l.node]
		if first, ok := st.requestSeen(l.id); !ok || first > l.rv {
			c.violate("P6 a slot answers a request", "slot Lease of %s for request %q appeared at resourceVersion %d, but the node never showed that request before; its last changes:\n  %s",
				l.node, l.id, l.rv, recent(st))
		}
		return true
	})
}

func recent(st *nodeState) string {
	if st == nil {
		return "(unknown node)"
	}
	return strings.Join(st.recent, "\n  ")
}

func (st *nodeState) requestSeen(id string) (int64, bool) {
	if st == nil {
		return 0, false
	}
	rv, ok := st.requests[id]
	return rv, ok
}

// holdingAt says whether the node held a grant just before revision rv.
func (st *nodeState) holdingAt(rv int64) bool {
	for i := len(st.holds) - 1; i >= 0; i-- {
		if st.holds[i].rv < rv {
			return st.holds[i].holding
		}
	}
	return false
}

func (st *nodeState) grantAt(rv int64) string {
	for i := len(st.holds) - 1; i >= 0; i-- {
		if st.holds[i].rv < rv {
			return st.holds[i].grantID
		}
	}
	return ""
}

// leaseAt is the node's slot Lease as of revision rv.
func (c *checker) leaseAt(node string, rv int64) (leaseMark, bool) {
	h := c.leaseHist[node]
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].rv <= rv {
			return h[i], true
		}
	}
	return leaseMark{}, false
}

func sortedNodes[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// waitFor waits until cond, called under the checker's lock on every
// change it sees, holds; it returns cond's last word when ctx ends first.
func (c *checker) waitFor(ctx context.Context, cond func() (bool, string)) error {
	for {
		c.mu.Lock()
		ok, why := cond()
		failed := c.failed
		changed := c.changed
		c.mu.Unlock()
		switch {
		case failed != nil:
			return failed
		case ok:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", context.Cause(ctx), why)
		case <-changed:
		}
	}
}

// seen waits until the watch of s has delivered revision rv (or later).
func (c *checker) seen(ctx context.Context, s stream, rv string) error {
	want := parseRV(rv)
	return c.waitFor(ctx, func() (bool, string) {
		return c.progress[s] >= want, fmt.Sprintf("the watch of %s is at %d, short of %d", s, c.progress[s], want)
	})
}

// leading returns the coordinator that holds the election now, "" for none.
func (c *checker) leading() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// holders lists the nodes that hold a grant now.
func (c *checker) holders() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range sortedNodes(c.nodes) {
		if c.nodes[n].holding {
			out = append(out, n)
		}
	}
	return out
}

// report returns the violations found so far, and whether a watch failed.
func (c *checker) report() ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations), c.failed
}

// unresolved counts the checks still pending.
func (c *checker) unresolved() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.evictions) + len(c.grantsDue) + len(c.leaseGone) + len(c.leaseNew) + len(c.releases)
}
