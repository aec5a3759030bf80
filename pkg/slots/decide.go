package slots

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Pool is a group of nodes with a limit of its own. A node takes a slot
// only when every pool it belongs to has room.
type Pool struct {
	// Name names the pool in reasons, Events and metrics; "default" is the
	// whole cluster (slots.limit).
	Name string
	// Selector picks the pool's nodes by their labels; nil picks every
	// node.
	Selector labels.Selector
	// Limit is how many of the pool's nodes may hold a slot at once; 0
	// sets no such limit.
	Limit int
	// MaxUnavailable, when set, is how many of the pool's nodes may be
	// unavailable at once, as a count or a percentage of the pool's nodes
	// (rounded down, and at least 1): nodes holding a slot, and nodes that
	// are not Ready or are cordoned for any other reason. A pool already
	// short of nodes then lets no other node drain.
	MaxUnavailable *intstr.IntOrString
	// MaxUnhealthy, when set, is the safety stop: no new slot is granted
	// in the pool while more than this many of its nodes are unhealthy
	// (Node.Unhealthy), as a count or a percentage of the pool's nodes
	// (rounded down, so a small pool stops at its first unhealthy node).
	// Holders never count, nor does the node asking: a node an admin
	// cordoned before asking for maintenance is not kept out by its own
	// cordon. Holders keep their slots; only new grants stop.
	MaxUnhealthy *intstr.IntOrString
	// MaxDomains, when above 0, is how many distinct failure domains (the
	// values of the label TopologyKey) may hold the pool's slots at once.
	// A node of a domain that holds one already may take a slot when the
	// other limits let it; a node of another domain waits while MaxDomains
	// domains hold slots. A node without the label (or with an empty
	// value) is a domain of its own (domainOf).
	MaxDomains int
	// TopologyKey is the label whose values are the failure domains
	// MaxDomains counts.
	TopologyKey string
	// RecoveryBound, when above 0, keeps the slot of a node of the pool
	// that gave it back until the node is healthy again (Node.Health):
	// the node still holds it, and counts in its pools, while it
	// recovers. Past the bound the node keeps the slot and the pool
	// grants no new one (Output.RecoveryStopped) until the node recovers
	// or an admin deletes its slot Lease.
	RecoveryBound time.Duration
}

func (p Pool) has(n *Node) bool {
	return p.Selector == nil || p.Selector.Matches(labels.Set(n.Labels))
}

// Node is what the coordinator knows of one Node.
type Node struct {
	Name   string
	Labels map[string]string
	// Unavailable: not Ready, or unschedulable (cordoned).
	Unavailable bool
	// Unhealthy: not Ready, or unschedulable for a reason that is not
	// node-agent's own maintenance (the coordinator's OwnCordon says
	// which). Pools' MaxUnhealthy counts these nodes, holders aside.
	Unhealthy bool
	// Request is the node's valid request, nil when it has none (or a
	// malformed one, which counts as none).
	Request *Request
	// Grant is the answer on the Node as last written, nil when none.
	Grant *Grant
	// Seen is when this coordinator first saw this request, on its own
	// clock. With the Time of a Queued Grant, what an earlier leader
	// stamped, it makes the queue's order (QueuedAt); Request.RequestedAt,
	// the requester's word, never counts.
	Seen time.Time
	// LastBeat is when the coordinator last saw the request's heartbeat
	// change (or first saw the request), on its own clock.
	LastBeat time.Time
	// Health is whether the node is healthy again after the maintenance
	// or reboot its slot served (pkg/recovery), as the coordinator checked
	// it for a node whose slot answers no request any more in a pool with
	// a RecoveryBound. Nil: not checked, which reads as not healthy.
	Health *Health
}

// QueuedAt is n's place in the queue: the earlier of when this coordinator
// first saw the request and the Time a coordinator stamped into its Queued
// answer to this request. Both are coordinators' clocks, so no requester
// chooses its place; the stamp keeps the order across a change of leader,
// which sees every request only when it starts to lead. A request with no
// stamp (never answered) goes behind every stamped one a new leader finds.
func (n *Node) QueuedAt() time.Time {
	if g := n.Grant; g.Answers(n.Request) && g.State == Queued && !g.Time.IsZero() && (n.Seen.IsZero() || g.Time.Before(n.Seen)) {
		return g.Time
	}
	return n.Seen
}

// Lease is a slot held, as its Lease says.
type Lease struct {
	Name      string
	Node      string
	RequestID string
	Purpose   Purpose
	// AcquiredAt is when the slot was granted.
	AcquiredAt time.Time
	// RecoveringSince is when its holder gave it back and began to
	// recover (Pool.RecoveryBound), as recorded on the Lease
	// (LeaseRecoveringSince); zero while it serves a request.
	RecoveringSince time.Time
}

// serves reports whether l answers n's current request: the same request
// (ID) for the same purpose. A Lease that serves none is released, or kept
// while its node recovers (Pool.RecoveryBound).
func (l Lease) serves(n *Node) bool {
	return n.Request != nil && n.Request.ID == l.RequestID && n.Request.Purpose == l.Purpose
}

// Input is everything Decide looks at.
type Input struct {
	Now time.Time
	// Nodes by name: every Node of the cluster.
	Nodes map[string]*Node
	// Leases by node name: the slots held.
	Leases map[string]Lease
	// Pools are the limits; a node takes a slot only when each pool it is
	// in has room.
	Pools []Pool
	// HeartbeatBound is how long a holder may go without a heartbeat
	// change seen before its slot is revoked.
	HeartbeatBound time.Duration
	// RebootHoldBound caps Request.HoldSeconds: how long a rebooting
	// host's agent may go without a heartbeat.
	RebootHoldBound time.Duration
	// MaxHold is, per purpose, how long a slot may be held in all,
	// heartbeat or not; 0 sets no bound.
	MaxHold map[Purpose]time.Duration
	// MinRebootInterval is the least time between the grants of two reboot
	// slots in the cluster (reboot.minInterval); 0 sets none.
	MinRebootInterval time.Duration
	// LastReboot is when the last reboot slot was granted, as the
	// coordinator recorded it; the slots held count too.
	LastReboot time.Time
	// Off names, per purpose, why the coordinator's configuration does not
	// serve it (reboot.enabled false): such a request is refused, and a
	// slot held for it is taken back.
	Off map[Purpose]string
}

// Revocation takes node's slot back, saying why.
type Revocation struct {
	Node   string
	Reason string
}

// Queueing tells node that its request waits, and why.
type Queueing struct {
	Node   string
	Reason string
}

// Output is what the coordinator writes, in two phases
// (Coordinator.reconcile): first Release, Revoke and Repair; once all of
// them are written, Grant, and beside it Queue, Refuse and Clear.
type Output struct {
	// Release: the slot's Lease answers no current request (the request
	// was withdrawn or replaced, or the Node is gone): delete it, and the
	// grant with it.
	Release []string
	// Revoke: take the slot back (write Revoked, then delete the Lease).
	Revoke []Revocation
	// Refuse: write Revoked to a request whose purpose is off (Input.Off);
	// it holds no slot and is never served.
	Refuse []Revocation
	// Repair: the Lease is held but the Node does not show the grant:
	// write it.
	Repair []string
	// Grant: create the Lease, then write Granted.
	Grant []string
	// Queue: write Queued with the reason (only where it changed).
	Queue []Queueing
	// Clear: remove a grant that answers no request.
	Clear []string
	// Next is how long until a holder's bound passes, so the coordinator
	// looks again then; 0 when no bound is pending.
	Next time.Duration
	// Held and Waiting count, per pool, the nodes holding a slot and those
	// waiting, after this decision.
	Held, Waiting map[string]int
	// Unhealthy counts, per pool, the unhealthy nodes that hold no slot
	// (Node.Unhealthy), after this decision.
	Unhealthy map[string]int
	// Stopped names the pools whose safety stop (Pool.MaxUnhealthy) holds
	// after this decision: more of their nodes are unhealthy than it
	// allows, so only a node that is itself one of them could be granted.
	Stopped []string
	// Recovering: the node gave its slot back but is not healthy yet
	// (Pool.RecoveryBound), and its Lease does not say since when: record
	// it there (Lease.RecoveringSince, Input.Now), so that a new leader
	// counts the bound from the same time.
	Recovering []string
	// Unrecovered are the nodes past their RecoveryBound; RecoveryStopped
	// names the pools they stop.
	Unrecovered     []Unrecovered
	RecoveryStopped []string
}

// Decide applies the rule: holders that lost their claim give their slot
// back, requests for a purpose that is off are refused, then waiting
// requests are served in the order coordinators saw them (Node.QueuedAt),
// each when every pool it belongs to has room. A request that cannot
// be served blocks the pools that are full for the requests behind it, and
// only those: a later node of another pool goes on. A request that waits
// for a failure domain (Pool.MaxDomains) blocks no pool: a later node of a
// domain that holds a slot goes on, so a zone drains its nodes together.
// A holder that gave its slot back in a pool with a RecoveryBound keeps it
// until it is healthy again (recover), and past the bound stops its pools.
func Decide(in Input) Output {
	d := &decision{in: in, out: Output{Held: map[string]int{}, Waiting: map[string]int{}, Unhealthy: map[string]int{}}, holding: map[string]bool{},
		recovering: map[string]string{}, unrecovered: map[string]bool{}}
	for _, node := range sortedKeys(in.Leases) {
		d.judgeHolder(node)
	}
	d.countPools()
	waiting := d.waiting()
	d.lastReboot = d.lastRebootGrant()
	for _, n := range waiting {
		d.serve(n)
	}
	for _, p := range d.pools {
		d.out.Held[p.Name] = p.held
		if len(p.stuck) > 0 {
			d.out.RecoveryStopped = append(d.out.RecoveryStopped, p.Name)
		}
		if p.MaxUnhealthy != nil {
			d.out.Unhealthy[p.Name] = len(p.unhealthy)
			if len(p.unhealthy) > p.maxUnhealthy() {
				d.out.Stopped = append(d.out.Stopped, p.Name)
			}
		}
	}
	if !d.next.IsZero() {
		d.out.Next = max(d.next.Sub(in.Now), time.Second)
	}
	return d.out
}

// decision is one Decide: its input, what it learned so far, and its
// output. Its methods are Decide's steps, in order.
type decision struct {
	in  Input
	out Output
	// holding: the nodes that keep their slot.
	holding map[string]bool
	// recovering: the holders that gave their slot back and are not
	// healthy yet, with why.
	recovering map[string]string
	// unrecovered: the recovering holders past their RecoveryBound.
	unrecovered map[string]bool
	pools       []poolState
	// next is when the earliest bound passes; zero for none.
	next time.Time
	// lastReboot is when the last reboot slot was granted, this
	// decision's grants included.
	lastReboot time.Time
}

// judgeHolder decides whether node keeps the slot it holds: its Lease is
// released when it answers no current request, and revoked when its
// purpose is off or the holder passed a bound. A holder that keeps it gets
// its grant written again when the Node does not show it.
func (d *decision) judgeHolder(node string) {
	in := d.in
	l := in.Leases[node]
	n := in.Nodes[node]
	switch {
	case n == nil:
		d.out.Release = append(d.out.Release, node)
		return
	case !l.serves(n):
		if !d.recover(n, l) {
			d.out.Release = append(d.out.Release, node)
		}
		return
	}
	if why, off := in.Off[l.Purpose]; off {
		d.out.Revoke = append(d.out.Revoke, Revocation{Node: node, Reason: why})
		return
	}
	if bound, why := in.heartbeatBound(n.Request); in.Now.Sub(n.LastBeat) > bound {
		d.out.Revoke = append(d.out.Revoke, Revocation{Node: node, Reason: fmt.Sprintf(
			"no heartbeat for %s, longer than %s", in.Now.Sub(n.LastBeat).Round(time.Second), why)})
		return
	} else {
		d.next = earliest(d.next, n.LastBeat.Add(bound+time.Second))
	}
	if maxHold := in.MaxHold[l.Purpose]; maxHold > 0 {
		if held := in.Now.Sub(l.AcquiredAt); held > maxHold {
			d.out.Revoke = append(d.out.Revoke, Revocation{Node: node, Reason: fmt.Sprintf(
				"held for %s, longer than the %s bound of %s", held.Round(time.Second), l.Purpose, maxHold)})
			return
		}
		d.next = earliest(d.next, l.AcquiredAt.Add(maxHold+time.Second))
	}
	d.holding[node] = true
	if g := n.Grant; !g.Answers(n.Request) || g.State != Granted || g.Slot != l.Name {
		d.out.Repair = append(d.out.Repair, node)
	}
}

// countPools counts each pool's nodes, those holding a slot (and their
// failure domains) and the others that are unavailable or unhealthy.
func (d *decision) countPools() {
	d.pools = make([]poolState, len(d.in.Pools))
	for i, p := range d.in.Pools {
		d.pools[i] = poolState{Pool: p, domains: map[string]int{}}
	}
	for _, name := range sortedKeys(d.in.Nodes) {
		n := d.in.Nodes[name]
		for i := range d.pools {
			if !d.pools[i].has(n) {
				continue
			}
			d.pools[i].size++
			if d.holding[name] {
				d.pools[i].take(n, d.in.Leases[name].AcquiredAt)
				if d.unrecovered[name] && d.pools[i].RecoveryBound > 0 {
					if len(d.pools[i].stuck) == 0 {
						d.pools[i].stuckWhy = d.recovering[name]
					}
					d.pools[i].stuck = append(d.pools[i].stuck, name)
				}
				continue
			}
			if n.Unavailable {
				d.pools[i].down++
			}
			if n.Unhealthy {
				d.pools[i].unhealthy = append(d.pools[i].unhealthy, name)
			}
		}
	}
}

// waiting returns the requests to serve, in queue order. On the way it
// clears the grants that answer no request and refuses the requests whose
// purpose is off.
func (d *decision) waiting() []*Node {
	in := d.in
	var waiting []*Node
	for _, name := range sortedKeys(in.Nodes) {
		n := in.Nodes[name]
		switch {
		case n.Request == nil:
			if n.Grant != nil {
				if _, held := in.Leases[name]; !held {
					d.out.Clear = append(d.out.Clear, name)
				}
			}
		case d.holding[name]:
			if why, ok := d.recovering[name]; ok {
				// A new request of a node that has not recovered
				// from its last: it waits for that, and blocks no
				// pool.
				d.queue(n, fmt.Sprintf("this node keeps the slot of its last maintenance until it is healthy again: %s", why))
			}
		case n.Grant.Answers(n.Request) && n.Grant.State == Revoked:
			// Not served again; a new request is.
		default:
			if l, ok := in.Leases[name]; ok && l.RequestID == n.Request.ID {
				// Revoked or released this round: not served again now.
				continue
			}
			if why, off := in.Off[n.Request.Purpose]; off {
				d.out.Refuse = append(d.out.Refuse, Revocation{Node: name, Reason: why})
				continue
			}
			waiting = append(waiting, n)
		}
	}
	slices.SortStableFunc(waiting, func(a, b *Node) int {
		return cmp.Or(a.QueuedAt().Compare(b.QueuedAt()), cmp.Compare(a.Name, b.Name))
	})
	return waiting
}

// lastRebootGrant is when the last reboot slot was granted: as recorded,
// or the reboot slots still held.
func (d *decision) lastRebootGrant() time.Time {
	last := d.in.LastReboot
	for _, l := range d.in.Leases {
		if l.Purpose == PurposeReboot && d.holding[l.Node] && l.AcquiredAt.After(last) {
			last = l.AcquiredAt
		}
	}
	return last
}

// serve grants n's request when reboot.minInterval and every pool of n let
// it, and otherwise tells n why it waits.
func (d *decision) serve(n *Node) {
	// reboot.minInterval spaces the reboots out, whatever room the
	// pools have; a reboot that waits for it blocks no pool, so the
	// requests behind it go on.
	if reason := d.rebootTooSoon(n); reason != "" {
		d.queue(n, reason)
		return
	}
	if reason := d.blockedBy(n); reason != "" {
		d.queue(n, reason)
		return
	}
	for i := range d.pools {
		p := &d.pools[i]
		if p.has(n) {
			p.take(n, d.in.Now)
			if n.Unavailable {
				p.down--
			}
			if n.Unhealthy {
				p.unhealthy = slices.DeleteFunc(p.unhealthy, func(s string) bool { return s == n.Name })
			}
		}
	}
	d.out.Grant = append(d.out.Grant, n.Name)
	if n.Request.Purpose == PurposeReboot {
		d.lastReboot = d.in.Now
	}
}

// rebootTooSoon says why n's reboot must wait for reboot.minInterval, or
// "".
func (d *decision) rebootTooSoon(n *Node) string {
	in := d.in
	if n.Request.Purpose != PurposeReboot || in.MinRebootInterval <= 0 || d.lastReboot.IsZero() {
		return ""
	}
	from := d.lastReboot.Add(in.MinRebootInterval)
	if !in.Now.Before(from) {
		return ""
	}
	d.next = earliest(d.next, from)
	return fmt.Sprintf("reboot.minInterval: the last reboot began at %s; the next may begin at %s",
		d.lastReboot.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
}

// blockedBy says why n's pools have no room for it, or "": the first pool
// that has none, with its holders and n's place in its queue (explain). A
// full pool stays blocked for the requests behind n, which count n in its
// queue. A pool whose failure domains are all taken (MaxDomains) is not
// blocked by it: a later node of a domain that holds a slot may still go
// on, so a zone drains its nodes together; n, of a new domain, waits, and
// so does every node of a new domain behind it, until the domains that
// hold slots give them all back. The first of them in the queue then goes
// first.
func (d *decision) blockedBy(n *Node) string {
	reason := ""
	// A pool stopped by a node that did not recover is named first: it
	// holds n past any slot given back.
	stopped := false
	waits := make([]bool, len(d.pools))
	for i := range d.pools {
		p := &d.pools[i]
		if !p.has(n) {
			continue
		}
		if why := p.full(n); why != "" {
			p.blocked = true
			if reason == "" || len(p.stuck) > 0 && !stopped {
				reason, stopped = why+p.explain(true), len(p.stuck) > 0
			}
		} else if p.blocked {
			if reason == "" {
				reason = fmt.Sprintf("pool %s: earlier requests wait first", p.Name) + p.explain(false)
			}
		} else if why := p.noDomain(n); why != "" {
			waits[i] = true
			if reason == "" {
				reason = why + p.explain(true)
			}
		}
	}
	for i := range d.pools {
		if d.pools[i].has(n) && (d.pools[i].blocked || waits[i]) {
			d.pools[i].queued++
		}
	}
	return reason
}

// queue counts n as waiting in each of its pools and answers it Queued
// with reason, unless the Node shows that answer already.
func (d *decision) queue(n *Node, reason string) {
	for i := range d.pools {
		if d.pools[i].has(n) {
			d.out.Waiting[d.pools[i].Name]++
		}
	}
	if g := n.Grant; !g.Answers(n.Request) || g.State != Queued || g.Reason != reason || !g.Time.Equal(n.QueuedAt()) {
		d.out.Queue = append(d.out.Queue, Queueing{Node: n.Name, Reason: reason})
	}
}

// heartbeatBound is how long the holder of req may go without a heartbeat,
// and how to say it.
func (in Input) heartbeatBound(req *Request) (time.Duration, string) {
	if req.HoldSeconds > 0 {
		d := min(time.Duration(req.HoldSeconds)*time.Second, in.RebootHoldBound)
		if d > in.HeartbeatBound {
			return d, fmt.Sprintf("the %s its host may take to reboot (reboot.slotHoldBound)", d)
		}
	}
	return in.HeartbeatBound, fmt.Sprintf("slots.heartbeatBound (%s)", in.HeartbeatBound)
}

type poolState struct {
	Pool
	size, held, down int
	blocked          bool
	// holders hold the pool's slots, this decision's grants included.
	holders []holder
	// domains counts the holders of each failure domain (domainOf).
	domains map[string]int
	// unhealthy names the pool's unhealthy nodes that hold no slot.
	unhealthy []string
	// queued counts the requests this decision left waiting for the
	// pool: the place in its queue of the next one.
	queued int
	// stuck names the pool's holders past its RecoveryBound; stuckWhy
	// says what is not healthy in the first of them.
	stuck    []string
	stuckWhy string
}

// take counts n as holding one of p's slots since since.
func (p *poolState) take(n *Node, since time.Time) {
	p.held++
	p.holders = append(p.holders, holder{node: n.Name, since: since})
	p.domains[p.domainOf(n)]++
}

// full says why the pool has no room for one more node, n, or "".
func (p *poolState) full(n *Node) string {
	if len(p.stuck) > 0 {
		return fmt.Sprintf("pool %s: %s did not come back healthy within recoveryBound (%s) and keeps its slot (%s); no new slot until it is healthy, or an admin deletes its slot Lease",
			p.Name, nameSome(p.stuck), p.RecoveryBound, p.stuckWhy)
	}
	if why := p.stopped(n); why != "" {
		return why
	}
	if p.Limit > 0 && p.held >= p.Limit {
		return fmt.Sprintf("pool %s: %d of %d nodes drain (limit)", p.Name, p.held, p.Limit)
	}
	if p.MaxUnavailable != nil {
		limit := p.maxUnavailable()
		if p.held+p.down >= limit {
			return fmt.Sprintf("pool %s: %d of %d nodes unavailable (%d draining, %d not Ready or cordoned; maxUnavailable %s)",
				p.Name, p.held+p.down, p.size, p.held, p.down, p.MaxUnavailable.String())
		}
	}
	return ""
}

// stopped says why the pool's safety stop keeps n from a slot, or "": more
// of the pool's nodes than MaxUnhealthy are unhealthy, n aside.
func (p *poolState) stopped(n *Node) string {
	if p.MaxUnhealthy == nil {
		return ""
	}
	// n, waiting, holds no slot: when unhealthy, it is in p.unhealthy.
	others := len(p.unhealthy)
	if n.Unhealthy {
		others--
	}
	limit := p.maxUnhealthy()
	if others <= limit {
		return ""
	}
	// The answer names a few of them (nameSome), so that it changes, and
	// is written again to every waiting node, only when those or the count
	// change.
	var named []string
	for _, name := range p.unhealthy {
		if name != n.Name && len(named) < NamedHolders {
			named = append(named, name)
		}
	}
	names := strings.Join(named, ", ")
	if more := others - len(named); more > 0 {
		names += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("pool %s: safety stop: %d of %d nodes are not Ready or cordoned other than by node-agent (%s), more than maxUnhealthy %s allows (%d); no new slot until they recover, and holders keep theirs",
		p.Name, others, p.size, names, p.MaxUnhealthy.String(), limit)
}

func (p *poolState) maxUnhealthy() int {
	v, err := intstr.GetScaledValueFromIntOrPercent(p.MaxUnhealthy, p.size, false)
	if err != nil {
		// Validated when the configuration was read; stop at the
		// first unhealthy node.
		return 0
	}
	return max(v, 0)
}

// noDomain says why n must wait for a failure domain (MaxDomains), or "":
// MaxDomains domains hold slots and n's is not one of them.
func (p *poolState) noDomain(n *Node) string {
	if p.MaxDomains <= 0 {
		return ""
	}
	mine := p.domainOf(n)
	if p.domains[mine] > 0 || len(p.domains) < p.MaxDomains {
		return ""
	}
	names := make([]string, 0, len(p.domains))
	for dom := range p.domains {
		names = append(names, p.showDomain(dom))
	}
	slices.Sort(names)
	return fmt.Sprintf("pool %s: %d of %d %s domains in maintenance (maxDomains): %s; this node's, %s, waits until one of them ends",
		p.Name, len(p.domains), p.MaxDomains, p.TopologyKey, nameSome(names), p.showDomain(mine))
}

// domainOf is n's failure domain: the value of its TopologyKey label. A
// node without the label, or with an empty value, is a domain of its own,
// named after the node: its real domain is unknown, so it may be any, and
// counting it as a domain of its own never counts fewer domains than are
// really in maintenance. Counting every unlabelled node as one domain ""
// could let two of them in two zones drain together under maxDomains 1;
// refusing them a slot would keep their maintenance waiting for ever.
func (p *poolState) domainOf(n *Node) string {
	if v := n.Labels[p.TopologyKey]; v != "" {
		return "=" + v
	}
	return "node/" + n.Name
}

// showDomain says a domain as domainOf makes it.
func (p *poolState) showDomain(dom string) string {
	if v, ok := strings.CutPrefix(dom, "="); ok {
		return v
	}
	return fmt.Sprintf("node %s (no %s label)", strings.TrimPrefix(dom, "node/"), p.TopologyKey)
}

// nameSome names at most NamedHolders of names, in their order, and how
// many more there are.
func nameSome(names []string) string {
	s := strings.Join(names[:min(len(names), NamedHolders)], ", ")
	if more := len(names) - NamedHolders; more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

func (p *poolState) maxUnavailable() int {
	v, err := intstr.GetScaledValueFromIntOrPercent(p.MaxUnavailable, p.size, false)
	if err != nil {
		// Validated when the configuration was read.
		return 1
	}
	return max(v, 1)
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
