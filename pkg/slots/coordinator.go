package slots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/events"
	"github.com/node-agent/node-agent/pkg/kube"
)

// FieldManager is the coordinator's field manager on Nodes and Leases.
const FieldManager = "node-agent-coordinator"

// CoordinatorOptions configures a Coordinator.
type CoordinatorOptions struct {
	// Client reads every Node, writes the grant annotation on them, and
	// holds the slot Leases in Namespace.
	Client    kube.Interface
	Namespace string
	Pools     []Pool
	// HeartbeatBound, RebootHoldBound and MaxHold: see Input.
	HeartbeatBound  time.Duration
	RebootHoldBound time.Duration
	MaxHold         map[Purpose]time.Duration
	// MinRebootInterval: see Input. The time of the last reboot grant is
	// kept in the Lease LastRebootLease, so a new leader counts from it.
	MinRebootInterval time.Duration
	// Off: see Input (Off(config) builds it).
	Off map[Purpose]string
	// OwnCordon reports whether a Node's cordon is node-agent's own
	// maintenance's (pkg/selfdrain's CordonedByAgent, wired by
	// internal/runcoordinator), which the pools' safety stop
	// (Pool.MaxUnhealthy) does not count. Nil: no cordon is, so every
	// cordoned node counts.
	OwnCordon func(*corev1.Node) bool
	// Health checks whether a node that gave its slot back in pools with
	// a RecoveryBound (named, in order) is healthy again for them
	// (pkg/recovery's Checker, wired by internal/runcoordinator). Nil:
	// healthy once Ready.
	Health func(ctx context.Context, node *corev1.Node, pools []string) Health
	// LeaseResync is how often the slot Leases are listed again, so that
	// a Lease an admin deleted or changed is seen; the coordinator is
	// their only writer and otherwise keeps them in memory.
	LeaseResync time.Duration
	Clock       clock.WithTicker
	Logger      *slog.Logger
	Recorder    events.Recorder
	Metrics     *Metrics
}

// Coordinator answers every node's request for a drain slot (Decide), and
// alone holds the slot Leases. Run it only while leading: two coordinators
// at once could each grant the last slot.
type Coordinator struct {
	o     CoordinatorOptions
	log   *slog.Logger
	queue workqueue.TypedRateLimitingInterface[string]
	nodes cache.SharedIndexInformer
	// synced: see Synced.
	synced atomic.Bool

	mu sync.Mutex
	// seen holds, by node, when this coordinator first saw its current
	// request and last saw its heartbeat change.
	seen map[string]*observation
	// leases are the slots held, by node: the coordinator is their only
	// writer, so this is kept from its own writes and a periodic list.
	leases map[string]Lease
	// written holds grants written but perhaps not yet in the informer.
	written map[string]writtenGrant
	// relist asks the next reconcile to list the Leases first.
	relist bool
	// lastReboot is when the last reboot slot was granted, as far as this
	// coordinator knows (its grants, and LastRebootLease at start).
	lastReboot time.Time
	// stopped are the pools whose safety stop held at the last decision,
	// so that its start and end are logged once.
	stopped map[string]bool
	// unrecovered: the nodes past their recovery bound, said once each;
	// checked: the last check of each recovering node's health.
	unrecovered map[string]bool
	checked     map[string]healthCheck
}

// LastRebootLease records, in its acquireTime, when the coordinator last
// granted a reboot slot (reboot.minInterval). The coordinator creates it
// whole, as it does slots; the agents' admission policy refuses it to them
// by name.
const LastRebootLease = "node-agent-coordinator-last-reboot"

// lastRebootLabel marks LastRebootLease, so that a list can find it without
// a get (the coordinator may get only its election Lease).
const lastRebootLabel = "node-agent.io/last-reboot"

type observation struct {
	id          string
	heartbeat   int64
	holdSeconds int64
	seen, beat  time.Time
}

type writtenGrant struct {
	grant *Grant // nil: removed
	rv    string // the Node's resourceVersion after the write
	at    time.Time
}

// NewCoordinator returns a coordinator for o.
func NewCoordinator(o CoordinatorOptions) *Coordinator {
	if o.LeaseResync <= 0 {
		o.LeaseResync = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second)
	return &Coordinator{
		o: o, log: o.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[string]{
			Name: "slots", Clock: o.Clock,
		}),
		seen: map[string]*observation{}, leases: map[string]Lease{}, written: map[string]writtenGrant{},
		stopped: map[string]bool{}, unrecovered: map[string]bool{}, checked: map[string]healthCheck{},
	}
}

// key is the one key of the queue: every decision looks at the whole
// cluster.
const key = "slots"

// Run answers requests until ctx ends. It watches every Node (one watch for
// the cluster, in one place) and lists the slot Leases at start and every
// LeaseResync.
func (c *Coordinator) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	defer c.synced.Store(false)
	c.nodes = kube.NodeInformer(c.o.Client, "")
	if _, err := c.nodes.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { c.observe(obj) },
		UpdateFunc: func(_, obj any) { c.observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				c.mu.Lock()
				delete(c.seen, n.Name)
				delete(c.written, n.Name)
				c.mu.Unlock()
			}
			c.queue.Add(key)
		},
	}); err != nil {
		return err
	}
	go c.nodes.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.nodes.HasSynced) {
		return ctx.Err()
	}
	for {
		if err := c.listLeases(ctx); err == nil {
			break
		} else {
			c.log.Error("Cannot list the drain slot Leases; no slot is granted until they can be read", "namespace", c.o.Namespace, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.o.Clock.After(5 * time.Second):
		}
	}
	if c.o.MinRebootInterval > 0 {
		c.readLastReboot(ctx)
	}
	c.synced.Store(true)
	c.log.Info("Coordinating drain slots", "namespace", c.o.Namespace, "pools", len(c.o.Pools), "slotsHeld", len(c.leases))
	go c.resyncLeases(ctx)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	c.queue.Add(key)
	for c.processNext(ctx) {
	}
	return nil
}

// Synced reports whether Run has read what its decisions read: every Node
// (its informer has synced) and the slot Leases (listed once), and has
// tried to read LastRebootLease, whose absence only loosens
// reboot.minInterval. It decides only from then on; before, a request
// waits unanswered. It stays true until Run returns, through a lost watch
// or a failed relist: the coordinator then decides from what it last read,
// as its informer serves the last state it saw.
func (c *Coordinator) Synced() bool { return c.synced.Load() }

func (c *Coordinator) processNext(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit || ctx.Err() != nil {
		return false
	}
	defer c.queue.Done(k)
	next, err := c.reconcile(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("Drain slot decision not fully applied; trying again", "err", err)
			c.queue.AddRateLimited(k)
		}
		return true
	}
	c.queue.Forget(k)
	if next > 0 {
		c.queue.AddAfter(k, next)
	}
	return true
}

// observe notes when a request first appeared and when its heartbeat last
// changed, on the coordinator's clock: no time an agent wrote counts. A
// request there before this coordinator led keeps the place an earlier
// leader stamped into its answer (Node.QueuedAt).
func (c *Coordinator) observe(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := c.o.Clock.Now()
	req, _ := ParseRequest(n)
	c.mu.Lock()
	if w, ok := c.written[n.Name]; ok && (w.rv == n.ResourceVersion || now.Sub(w.at) > 30*time.Second) {
		delete(c.written, n.Name)
	}
	o := c.seen[n.Name]
	switch {
	case req == nil:
		delete(c.seen, n.Name)
	case o == nil || o.id != req.ID:
		c.seen[n.Name] = &observation{id: req.ID, heartbeat: req.Heartbeat, holdSeconds: req.HoldSeconds, seen: now, beat: now}
	case o.heartbeat != req.Heartbeat || o.holdSeconds != req.HoldSeconds:
		o.heartbeat, o.holdSeconds, o.beat = req.Heartbeat, req.HoldSeconds, now
	}
	c.mu.Unlock()
	c.queue.Add(key)
}

// input gathers Decide's input from the informer and the coordinator's
// memory.
func (c *Coordinator) input() Input {
	in := Input{
		Now: c.o.Clock.Now(), Nodes: map[string]*Node{}, Leases: map[string]Lease{}, Pools: c.o.Pools,
		HeartbeatBound: c.o.HeartbeatBound, RebootHoldBound: c.o.RebootHoldBound, MaxHold: c.o.MaxHold,
		MinRebootInterval: c.o.MinRebootInterval, Off: c.o.Off,
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	in.LastReboot = c.lastReboot
	for _, obj := range c.nodes.GetStore().List() {
		node, ok := obj.(*corev1.Node)
		if !ok {
			continue
		}
		n := &Node{Name: node.Name, Labels: node.Labels, Unavailable: node.Spec.Unschedulable || !ready(node), Unhealthy: c.unhealthy(node)}
		if req, err := ParseRequest(node); err == nil && req != nil {
			if o := c.seen[node.Name]; o != nil && o.id == req.ID {
				n.Request, n.Seen, n.LastBeat = req, o.seen, o.beat
			}
		}
		if w, ok := c.written[node.Name]; ok {
			n.Grant = w.grant
		} else if g, err := ParseGrant(node); err == nil {
			n.Grant = g
		}
		in.Nodes[node.Name] = n
	}
	for k, v := range c.leases {
		in.Leases[k] = v
	}
	return in
}

// Writers bounds the writes of one kind that a decision makes at once: the
// slots given back, the grants, the answers (grants and answers go out
// beside each other, so up to twice Writers then). Each node's writes are
// in order; different nodes' go in parallel, so a decision's pace is a
// round trip per phase rather than per node (the client's rate limit still
// applies). It is above the limits clusters commonly set (20 in make
// scale), so that a wave of slots given back, or of grants, goes out in one
// round trip: at 16, a wave of 20 took two.
const Writers = 32

// AnswersPerPass bounds the answers one decision writes (Queue, Refuse and
// Clear together; the removal of released nodes' grants is not counted):
// when more changed (the start of a rolling maintenance asks for many), the rest go
// in the next pass, and a slot given back meanwhile is handed on between
// the two rather than after every waiting node's answer.
const AnswersPerPass = 32

// reconcile decides once and writes what the decision says, in two
// phases. First the slots given back (Release, Revoke) and the grants
// repaired (Repair); then the grants (Grant) and, beside them, the answers:
// Queue (at most AnswersPerPass of them with Refuse and Clear; the rest go
// in the next pass), Refuse, Clear, and the removal of released nodes'
// grants. Different nodes' writes go out in parallel (Writers); each
// node's own writes stay in order. No grant goes out
// while a slot the decision counts as free may still be held: when a
// first-phase write fails, the decision ends there and is made again. It
// returns how long until the next bound passes.
func (c *Coordinator) reconcile(ctx context.Context) (time.Duration, error) {
	c.mu.Lock()
	relist := c.relist
	c.relist = false
	c.mu.Unlock()
	if relist {
		if err := c.listLeases(ctx); err != nil {
			c.log.Warn("Cannot list the drain slot Leases; deciding from the ones this coordinator wrote", "err", err)
		}
	}
	in := c.input()
	c.checkHealth(ctx, in)
	out := Decide(in)
	c.o.Metrics.observe(out)
	c.logStops(out)
	c.sayUnrecovered(out)

	// A released node's grant is cleared beside this decision's grants,
	// not before them: the slot is free once its Lease is gone (the node
	// asks for it no more, so its grant answers nothing), and the next
	// node need not wait for one more write.
	// A node whose new request this decision grants or queues gets that
	// answer instead, which replaces the old grant.
	answered := map[string]bool{}
	for _, node := range out.Grant {
		answered[node] = true
	}
	for _, q := range out.Queue {
		answered[q.Node] = true
	}
	var back, cleared []func() error
	for _, node := range out.Release {
		back = append(back, func() error { return c.release(ctx, in, node) })
		if n := in.Nodes[node]; n != nil && n.Grant != nil && !answered[node] {
			cleared = append(cleared, func() error { return c.writeGrant(ctx, node, nil) })
		}
	}
	for _, r := range out.Revoke {
		back = append(back, func() error { return c.revoke(ctx, in, r) })
	}
	for _, node := range out.Recovering {
		back = append(back, func() error { return c.markRecovering(ctx, in, node) })
	}
	for _, node := range out.Repair {
		n, l := in.Nodes[node], in.Leases[node]
		back = append(back, func() error {
			return c.writeGrant(ctx, node, &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Granted, Slot: l.Name, Time: l.AcquiredAt})
		})
	}
	if err := inParallel(back); err != nil {
		return out.Next, fmt.Errorf("no slot granted until every slot given back is: %w", err)
	}

	var grants []func() error
	for _, node := range out.Grant {
		grants = append(grants, func() error { return c.grant(ctx, in.Nodes[node], in.Now) })
	}

	// The answers go out beside the grants: they are written to other
	// nodes (a node is granted or answered, not both), and this decision
	// ends, so the next one starts, only once both are done, which keeps
	// every node's writes in decision order.
	var answers []func() error
	for _, q := range out.Queue {
		n := in.Nodes[q.Node]
		answers = append(answers, func() error {
			return c.writeGrant(ctx, q.Node, &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Queued, Reason: q.Reason, Time: n.QueuedAt()})
		})
	}
	for _, r := range out.Refuse {
		answers = append(answers, func() error { return c.refuse(ctx, in, r) })
	}
	for _, node := range out.Clear {
		answers = append(answers, func() error { return c.writeGrant(ctx, node, nil) })
	}
	if len(answers) > AnswersPerPass {
		answers = answers[:AnswersPerPass]
		c.queue.Add(key)
	}
	var errGrant, errAnswer error
	var wg sync.WaitGroup
	wg.Go(func() { errGrant = inParallel(grants) })
	wg.Go(func() { errAnswer = inParallel(append(cleared, answers...)) })
	wg.Wait()
	return out.Next, errors.Join(errGrant, errAnswer)
}

// release deletes the slot Lease of a node whose request it no longer
// answers; reconcile clears its grant after the decision's grants.
func (c *Coordinator) release(ctx context.Context, in Input, node string) error {
	if err := c.deleteLease(ctx, node, in.Leases[node].Name); err != nil {
		return err
	}
	if since := in.Leases[node].RecoveringSince; !since.IsZero() {
		c.log.Info("Drain slot released: the node is healthy again", "node", node, "recovered", in.Now.Sub(since).Round(time.Second))
		c.event(node, corev1.EventTypeNormal, "DrainSlotRecovered", "The node is healthy again after %s; its drain slot goes to the next node", in.Now.Sub(since).Round(time.Second))
		return nil
	}
	c.log.Info("Drain slot released", "node", node)
	return nil
}

// revoke tells the node its slot is taken back, then deletes the Lease.
func (c *Coordinator) revoke(ctx context.Context, in Input, r Revocation) error {
	n := in.Nodes[r.Node]
	g := &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Revoked, Reason: r.Reason, Time: in.Now}
	if err := c.writeGrant(ctx, r.Node, g); err != nil {
		return err
	}
	if err := c.deleteLease(ctx, r.Node, in.Leases[r.Node].Name); err != nil {
		return err
	}
	c.o.Metrics.revoked()
	c.log.Warn("Drain slot revoked", "node", r.Node, "reason", r.Reason)
	c.event(r.Node, corev1.EventTypeWarning, "DrainSlotRevoked", "The drain slot was taken back: %s; the next node may drain", r.Reason)
	return nil
}

// refuse answers a request whose purpose is off with Revoked: it never
// holds a slot, and the agent's requester reports the reason.
func (c *Coordinator) refuse(ctx context.Context, in Input, r Revocation) error {
	n := in.Nodes[r.Node]
	g := &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Revoked, Reason: r.Reason, Time: in.Now, Refused: true}
	if err := c.writeGrant(ctx, r.Node, g); err != nil {
		return err
	}
	c.log.Warn("Drain slot request refused", "node", r.Node, "purpose", n.Request.Purpose, "reason", r.Reason)
	c.event(r.Node, corev1.EventTypeWarning, "DrainSlotRefused", "The %s drain slot request was refused: %s", n.Request.Purpose, r.Reason)
	return nil
}

// inParallel runs fns, at most Writers at once, and joins their errors.
func inParallel(fns []func() error) error {
	errs := make([]error, len(fns))
	sem := make(chan struct{}, Writers)
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// grant creates the node's slot Lease, then tells the node. A Lease that
// exists already (written by an earlier leader) is not this request's, and
// the next list shows it.
func (c *Coordinator) grant(ctx context.Context, n *Node, now time.Time) error {
	name := LeaseName(n.Name)
	at := metav1.NewMicroTime(now)
	bound := int32(min(c.o.MaxHold[n.Request.Purpose], 24*365*time.Hour) / time.Second)
	if bound <= 0 {
		bound = int32(c.o.HeartbeatBound / time.Second)
	}
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: c.o.Namespace,
			Labels:      map[string]string{SlotLabel: "true", "app.kubernetes.io/name": "node-agent"},
			Annotations: map[string]string{LeaseRequestID: n.Request.ID, LeasePurpose: string(n.Request.Purpose)},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(n.Name), LeaseDurationSeconds: ptr.To(bound), AcquireTime: &at, RenewTime: &at,
		},
	}
	if _, err := c.o.Client.CoordinationV1().Leases(c.o.Namespace).Create(ctx, l, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Listed by the next decision: a list here, while other
			// grants of this decision are written, could drop theirs.
			c.mu.Lock()
			c.relist = true
			c.mu.Unlock()
			return fmt.Errorf("slot Lease %s/%s exists already; read it again", c.o.Namespace, name)
		}
		return fmt.Errorf("creating slot Lease %s/%s: %w", c.o.Namespace, name, err)
	}
	c.mu.Lock()
	c.leases[n.Name] = Lease{Name: name, Node: n.Name, RequestID: n.Request.ID, Purpose: n.Request.Purpose, AcquiredAt: now}
	if o := c.seen[n.Name]; o != nil {
		// The heartbeat bound starts with the grant: a node that waited
		// long sent no heartbeat while it waited.
		o.beat = now
	}
	c.mu.Unlock()
	if err := c.writeGrant(ctx, n.Name, &Grant{ID: n.Request.ID, Purpose: n.Request.Purpose, State: Granted, Slot: name, Time: now}); err != nil {
		return err
	}
	if n.Request.Purpose == PurposeReboot && c.o.MinRebootInterval > 0 {
		c.recordReboot(ctx, now)
	}
	c.o.Metrics.granted()
	c.log.Info("Drain slot granted", "node", n.Name, "purpose", n.Request.Purpose, "slot", c.o.Namespace+"/"+name,
		"waited", now.Sub(n.QueuedAt()).Round(time.Millisecond))
	return nil
}

// recordReboot remembers now as the last reboot grant, in memory and in
// LastRebootLease (replaced whole: the coordinator creates and deletes
// Leases, and updates only its election Lease). A failed write is logged:
// the memory still spaces the reboots while this coordinator leads.
func (c *Coordinator) recordReboot(ctx context.Context, now time.Time) {
	c.mu.Lock()
	if now.After(c.lastReboot) {
		c.lastReboot = now
	}
	c.mu.Unlock()
	leases := c.o.Client.CoordinationV1().Leases(c.o.Namespace)
	if err := leases.Delete(ctx, LastRebootLease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		c.log.Warn("Cannot replace the record of the last reboot; a new leader may count reboot.minInterval from an older one", "err", err)
		return
	}
	at := metav1.NewMicroTime(now)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LastRebootLease, Namespace: c.o.Namespace,
			Labels: map[string]string{lastRebootLabel: "true", "app.kubernetes.io/name": "node-agent"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(FieldManager), AcquireTime: &at},
	}
	if _, err := leases.Create(ctx, l, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
		c.log.Warn("Cannot record the last reboot; a new leader may count reboot.minInterval from an older one", "err", err)
	}
}

// readLastReboot reads LastRebootLease into memory; without it, the
// interval counts from the reboot slots held.
func (c *Coordinator) readLastReboot(ctx context.Context) {
	list, err := c.o.Client.CoordinationV1().Leases(c.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: lastRebootLabel + "=true"})
	if err != nil {
		c.log.Warn("Cannot read the record of the last reboot; reboot.minInterval counts from the reboot slots held", "err", err)
		return
	}
	for _, l := range list.Items {
		if l.Name == LastRebootLease && l.Spec.AcquireTime != nil {
			c.mu.Lock()
			if l.Spec.AcquireTime.After(c.lastReboot) {
				c.lastReboot = l.Spec.AcquireTime.Time
			}
			c.mu.Unlock()
			c.log.Info("The last reboot slot was granted", "at", l.Spec.AcquireTime.UTC().Format(time.RFC3339), "minInterval", c.o.MinRebootInterval)
		}
	}
}

// deleteLease deletes the Lease name, the slot held by node.
func (c *Coordinator) deleteLease(ctx context.Context, node, name string) error {
	err := c.o.Client.CoordinationV1().Leases(c.o.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting slot Lease %s/%s: %w", c.o.Namespace, name, err)
	}
	c.mu.Lock()
	delete(c.leases, node)
	c.mu.Unlock()
	return nil
}

// writeGrant writes g on node's annotation, or removes it when g is nil.
func (c *Coordinator) writeGrant(ctx context.Context, node string, g *Grant) error {
	var value any
	if g != nil {
		value = g.Encode()
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{GrantAnnotation: value}}})
	if err != nil {
		return err
	}
	written, err := c.o.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the drain slot grant on Node %s: %w", node, err)
	}
	c.mu.Lock()
	c.written[node] = writtenGrant{grant: g, rv: written.ResourceVersion, at: c.o.Clock.Now()}
	c.mu.Unlock()
	return nil
}

// listLeases reads the slot Leases into memory.
func (c *Coordinator) listLeases(ctx context.Context) error {
	list, err := c.o.Client.CoordinationV1().Leases(c.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: SlotLabel + "=true"})
	if err != nil {
		return fmt.Errorf("listing slot Leases in %s: %w", c.o.Namespace, err)
	}
	leases := map[string]Lease{}
	for _, l := range list.Items {
		node := ptr.Deref(l.Spec.HolderIdentity, "")
		if node == "" || l.Name != LeaseName(node) {
			// Not a slot as the coordinator writes them: the rule
			// knows no such holder, so it is released.
			node = l.Name
		}
		var at time.Time
		if l.Spec.AcquireTime != nil {
			at = l.Spec.AcquireTime.Time
		}
		lease := Lease{Name: l.Name, Node: node, RequestID: l.Annotations[LeaseRequestID],
			Purpose: Purpose(l.Annotations[LeasePurpose]), AcquiredAt: at}
		if v, ok := l.Annotations[LeaseRecoveringSince]; ok {
			since, err := time.Parse(time.RFC3339, v)
			if err != nil {
				// Only the coordinator writes it; a bad value counts
				// the bound from now, so the slot is not lost.
				c.log.Warn("Slot Lease with a bad recovery time; its bound counts from now", "lease", l.Name, "value", v, "err", err)
				since = c.o.Clock.Now()
			}
			lease.RecoveringSince = since
		}
		leases[node] = lease
	}
	c.mu.Lock()
	c.leases = leases
	c.mu.Unlock()
	return nil
}

func (c *Coordinator) resyncLeases(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.o.Clock.After(c.o.LeaseResync):
		}
		// Listed by the next reconcile, never while one writes.
		c.mu.Lock()
		c.relist = true
		c.mu.Unlock()
		c.queue.Add(key)
	}
}

func (c *Coordinator) event(node, typ, reason, format string, args ...any) {
	if c.o.Recorder == nil {
		return
	}
	c.o.Recorder.Eventf(kube.NodeReference(node), typ, reason, format, args...)
}

// unhealthy says whether node counts toward its pools' safety stop: not
// Ready, or cordoned other than by node-agent's own maintenance.
func (c *Coordinator) unhealthy(node *corev1.Node) bool {
	if !ready(node) {
		return true
	}
	return node.Spec.Unschedulable && (c.o.OwnCordon == nil || !c.o.OwnCordon(node))
}

// logStops logs when a pool's safety stop starts and ends; the waiting
// nodes' answers say it at every decision, and the metric
// drain_slot_safety_stop shows it.
func (c *Coordinator) logStops(out Output) {
	now := map[string]bool{}
	for _, p := range out.Stopped {
		now[p] = true
		if !c.stopped[p] {
			c.log.Warn("Safety stop: no new drain slot is granted in the pool while too many of its nodes are not Ready or cordoned other than by node-agent",
				"pool", p, "unhealthy", out.Unhealthy[p])
		}
	}
	for p := range c.stopped {
		if !now[p] {
			c.log.Info("Safety stop lifted: drain slots are granted in the pool again", "pool", p, "unhealthy", out.Unhealthy[p])
		}
	}
	c.stopped = now
}

func ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
