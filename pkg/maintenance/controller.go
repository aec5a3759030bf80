package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/reasontext"
)

// Controller turns maintenance requests for the agent's own Node into
// drains. Four kinds of requester exist: the node-agent.io/maintenance
// annotation, the owners' annotations (requesters.go), NodeMaintenance
// objects that name the node (when NodeMaintenance is set), and the reboot
// controller's drain request (when RebootDrain is set). The node is in
// maintenance while any of them asks for it; one drain serves them all, and
// it ends only when none asks any longer. Who asks is listed beside the
// record (syncRequesters).
// What the drain did is recorded on the Node, so a restarted agent resumes
// where the last one stopped. The shutdown guard borrows the engine through
// DrainForShutdown and gives it back through ShutdownCancelled
// (shutdown.go).
type Controller struct {
	engine *selfdrain.Engine
	slots  Slots
	// gates hold a drain before it asks for its slot; nil holds nothing.
	gates *Gates
	// hooks, when not nil, are the lifecycle's hooks (hooks.go); preDrain
	// is their wait before the gates, made in Run where the Node is read.
	hooks    *Hooks
	preDrain *Gates
	// postDrainMsg is what the post-drain hooks did when last told, so
	// that each is told once.
	postDrainMsg string
	// preDrainSeen wakes preDrain when the pre-drain hooks change.
	preDrainSeen hookWatch
	// nodeMaintenance, when not nil, serves NodeMaintenance objects.
	nodeMaintenance *NodeMaintenanceSource
	// rebootDrain, when not nil, reads the reboot controller's request.
	rebootDrain func(*corev1.Node) string
	metrics     *selfdrain.Metrics
	node        string
	log         *slog.Logger

	// queue holds one key, the node's name: every change of the Node or of
	// its NodeMaintenance objects adds it, and a failed step adds it again
	// rate-limited.
	queue workqueue.TypedRateLimitingInterface[string]
	// badStatus is the last malformed status value reported, so each one is
	// reported once. Only reconcile touches it, and one worker runs that.
	badStatus string
	// badRequest is, the same way, the last refused value of the
	// maintenance annotation reported; "" once the value is accepted again.
	badRequest string
	// badOwners is the same for each owner annotation, by key.
	badOwners map[string]string
	// sent is the requesters list the controller last wrote, and sentOver
	// the value the Node showed before that write: while the cache still
	// shows sentOver, sent is the list (requesters_sync.go).
	sent, sentOver string

	mu sync.Mutex
	// active is the drain running now, if any.
	active *maintenanceRun
	// shutdown is true while the shutdown guard owns the engine.
	shutdown bool
}

// Retries of a failed reconcile or drain start: the first after
// retryAfterFailure, the same pause the controller has always waited,
// doubling up to retryAfterFailureCap while the failures go on.
const (
	retryAfterFailure    = 5 * time.Second
	retryAfterFailureCap = 5 * time.Minute
)

// ControllerOptions configures a Controller. Engine and Slots are required.
type ControllerOptions struct {
	Engine *selfdrain.Engine
	// Slots is the node's drain slots: a maintenance drain asks for one of
	// its own (slots.PurposeMaintenance); a reboot's drain follows the
	// reboot controller's (slots.PurposeReboot).
	Slots Slots
	// Gates, when not nil, hold a maintenance drain before it asks for
	// its slot. A reboot's drain passed the reboot controller's own
	// blockers before it was asked for.
	Gates *Gates
	// Hooks, when not nil, hold a maintenance's or a reboot's drain
	// before the cordon (pre-drain), and a drained maintenance before it
	// is reported done (post-drain).
	Hooks *Hooks
	// NodeMaintenance, when not nil, serves NodeMaintenance objects.
	NodeMaintenance *NodeMaintenanceSource
	// RebootDrain, when not nil, says whether the reboot controller asks
	// for a drain of node, with the reason ("" when it does not). The
	// coordinator keeps that request on the Node, so it survives the
	// reboot; DrainRequest reads it there.
	RebootDrain func(node *corev1.Node) string
}

// NewController returns a controller for o.
func NewController(o ControllerOptions) *Controller {
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryAfterFailure, retryAfterFailureCap)
	e := o.Engine
	return &Controller{engine: e, slots: o.Slots, gates: o.Gates, hooks: o.Hooks, nodeMaintenance: o.NodeMaintenance, rebootDrain: o.RebootDrain,
		metrics: e.Metrics, node: e.NodeName, log: e.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[string]{
			Name: "selfdrain", Clock: e.Clock,
		})}
}

// Name implements agent.Component.
func (c *Controller) Name() string { return "selfdrain" }

// enqueue asks for a reconcile of the node.
func (c *Controller) enqueue() { c.queue.Add(c.node) }

// observe takes a copy of the Node the informer delivers: it may show the
// engine's last write (OwnCopy), and asks for a reconcile.
func (c *Controller) observe(obj any) {
	if node, ok := obj.(*corev1.Node); ok {
		c.engine.OwnCopy(node)
		c.preDrainSeen.observe(node)
	}
	c.enqueue()
}

// Run implements agent.Component.
func (c *Controller) Run(ctx context.Context, view agent.NodeView) error {
	c.engine.UseNodeCache(view.Get)
	c.preDrain = c.hooks.preDrainStage(view.Get, c.preDrainSeen.wake())
	if err := view.AddHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(obj) },
		UpdateFunc: func(_, obj any) { c.observe(obj) },
	}); err != nil {
		return err
	}
	if c.nodeMaintenance != nil {
		go c.nodeMaintenance.Run(ctx, c.enqueue)
	}
	c.enqueue()
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.processNext(ctx, view) {
	}
	// The drain stops and leaves the Node as it is: the next agent resumes
	// from the status on the Node.
	c.takeActive().stop()
	return nil
}

// processNext reconciles once for the next key; it reports false when the
// controller stops.
func (c *Controller) processNext(ctx context.Context, view agent.NodeView) bool {
	key, quit := c.queue.Get()
	if quit || ctx.Err() != nil {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, view); err != nil {
		if ctx.Err() == nil {
			c.log.Error("Could not end or undo maintenance", "err", err)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// reconcile starts or ends the drain as the requests ask. It returns an
// error only when ending or undoing the maintenance failed.
func (c *Controller) reconcile(ctx context.Context, view agent.NodeView) error {
	// Taken before the read: the copies the handler passes after it may
	// be newer than the one read (ownwrite.go).
	mark := c.engine.OwnMark()
	node, err := view.Get()
	if err != nil {
		return nil // the Node's arrival in the cache adds the key again
	}
	annotation, refusal := selfdrain.ParseMaintenanceRequest(node)
	req := Requests{Annotation: annotation}
	if c.rebootDrain != nil {
		req.Reboot = c.rebootDrain(node)
	}
	var objs []*NodeMaintenance
	if c.nodeMaintenance != nil {
		if !c.nodeMaintenance.Synced() {
			// Fail closed: until the objects are known, a missing object
			// must not end a maintenance it started. The source adds the
			// key once it has synced.
			return nil
		}
		objs = c.nodeMaintenance.Objects()
		req.Object, req.Objects = primaryObject(objs), objs
	}
	// The record as the engine last wrote it, until the cache shows that
	// write (ownwrite.go): a drain that just finished is not resumed.
	st, perr := c.readStatus(c.engine.OwnView(node, mark))
	recorded := c.recordedRequesters(node)
	if refusal != nil {
		req.Annotation = c.refuse(refusal, st, perr, recorded)
	} else {
		c.badRequest = ""
	}
	req.Owners = c.owners(node, recorded)
	mirrored := c.watchPostDrain(node, st, perr)
	if c.nodeMaintenance != nil {
		// Finalizer first: an object the agent drains for is kept until
		// the drain is undone.
		c.nodeMaintenance.apply(ctx, planObjects(objs, mirrored, perr, req.Annotation != "" || len(req.Owners) > 0))
	}
	d, run := c.decide(ctx, req, recorded, st, perr)
	switch d.Action {
	case StartDrain:
		go run.run()
	case StopDrain, End:
		run.stop()
		if err := c.engine.End(ctx, endReason(d.Trigger)); err != nil {
			return err
		}
	case UndoAfterTimeout:
		if err := c.engine.UndoAfterTimeout(ctx); err != nil {
			return err
		}
	case HandOver:
		run.stop()
		if err := c.engine.HandOver(ctx, selfdrain.TriggerReboot, d.Trigger, d.Reason, slotWaitMessage); err != nil {
			return err
		}
	}
	return c.syncRequesters(ctx, node, req, recorded)
}

// readStatus reads the maintenance record on node and mirrors it in the
// metrics. A malformed record is reported once for each value it takes.
func (c *Controller) readStatus(node *corev1.Node) (*selfdrain.Status, error) {
	st, perr := selfdrain.ParseStatus(node)
	c.metrics.ObserveNode(st, perr)
	if raw := node.Annotations[selfdrain.StatusAnnotation]; perr != nil && raw != c.badStatus {
		c.badStatus = raw
		c.log.Error("Malformed maintenance status; not changing the node because of it", "err", perr)
		c.engine.Event(corev1.EventTypeWarning, "MalformedMaintenanceStatus", "%v", perr)
	}
	return st, perr
}

// refuse answers a maintenance annotation whose value is refused
// (reasontext.ParseRequest: it reads as no, such as "false"): it changes
// nothing on the node. A maintenance the annotation asked for before goes on
// as recorded, until the annotation is removed: "false" is not how it ends,
// and ending it would uncordon the node on a value the agent does not
// accept. None starts. Each refused value is reported once, with a Warning
// Event on the Node that says what is accepted. It returns the reason the
// annotation stands for now: the earlier one, or "".
func (c *Controller) refuse(refusal error, st *selfdrain.Status, perr error, recorded []Requester) string {
	held := c.heldAnnotation(st, perr, recorded)
	var re *reasontext.RefusedError
	if !errors.As(refusal, &re) || re.Value == c.badRequest {
		return held
	}
	c.badRequest = re.Value
	then := "no maintenance starts"
	if held != "" {
		then = fmt.Sprintf("the maintenance asked for before (reason %q) goes on", held)
	}
	c.log.Warn("Maintenance request refused; nothing on the node changes", "err", refusal, "heldReason", held)
	c.engine.Event(corev1.EventTypeWarning, "MaintenanceRequestRefused", "%v. Nothing on the node changed: %s", refusal, then)
	return held
}

// heldAnnotation is the reason of the maintenance the annotation asked for
// before it took a refused value: the one recorded in force, or the one a
// drain waiting for its slot serves; "" when there is none. Where the
// requesters are listed beside the record, the list says whether the
// annotation was one of them: a record of the annotation trigger may be an
// owner's request.
func (c *Controller) heldAnnotation(st *selfdrain.Status, perr error, recorded []Requester) string {
	if len(recorded) > 0 {
		i := slices.IndexFunc(recorded, func(r Requester) bool { return r.Kind == KindAnnotation })
		switch {
		case i < 0:
			return ""
		case perr == nil && st.Active() && st.Trigger == selfdrain.TriggerAnnotation && shownReason(st.Reason) == recorded[i].Reason:
			return st.Reason // the list shows reasons cut shorter
		}
		return recorded[i].Reason
	}
	if perr == nil && st.Active() && st.Trigger == selfdrain.TriggerAnnotation {
		return st.Reason
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active != nil && c.active.trigger == selfdrain.TriggerAnnotation {
		return c.active.reason
	}
	return ""
}

// decide runs Decide on what is requested (req), the record on the Node
// (st, or perr when it cannot be read) and the drain running now, and makes
// the change of the active drain that goes with its decision under c.mu, so
// a shutdown drain that takes the engine at the same moment sees one state
// or the other. The run it returns is the one to start or to stop.
func (c *Controller) decide(ctx context.Context, req Requests, recorded []Requester, st *selfdrain.Status, perr error) (Decision, *maintenanceRun) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := Input{Requests: req, Record: st, RecordErr: perr, Recorded: recorded, Shutdown: c.shutdown, OnTimeout: c.engine.Config.OnTimeout}
	if c.active != nil {
		in.Running = &Running{Trigger: c.active.trigger, Reason: c.active.reason}
	}
	d := Decide(in)
	var run *maintenanceRun
	switch d.Action {
	case StartDrain:
		c.active = c.newRun(ctx, d.Trigger, d.Reason)
		run = c.active
	case StopDrain:
		run, c.active = c.active, nil
	case HandOver:
		if d.StopRunning {
			run, c.active = c.active, nil
		}
	}
	return d, run
}

// takeActive removes the running drain, if any, from its place and returns
// it for the caller to stop; no other drain starts in its place until the
// next reconcile.
func (c *Controller) takeActive() *maintenanceRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	run := c.active
	c.active = nil
	return run
}

// maintenanceRun is one drain the controller runs for a maintenance
// request, in a goroutine of its own so that reconcile can stop it when the
// request goes away. Its steps: take a drain slot, begin (cordon, taint,
// record), drain, and finish (give up its place, retry a failure).
type maintenanceRun struct {
	c       *Controller
	trigger selfdrain.Trigger
	reason  string
	// ctx ends when the run is stopped.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *Controller) newRun(parent context.Context, trigger selfdrain.Trigger, reason string) *maintenanceRun {
	ctx, cancel := context.WithCancel(parent)
	return &maintenanceRun{c: c, trigger: trigger, reason: reason, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// run does the steps in order.
func (r *maintenanceRun) run() {
	defer close(r.done)
	defer r.cancel()
	r.finish(r.drainInSlot())
}

// stop cancels the run and waits for it. The Node stays as the run left it.
func (r *maintenanceRun) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

// drainInSlot takes a slot, begins and drains, and gives the slot back
// before the run finishes: a run that the queue starts next must not find
// the slot still held, because releasing it then would release that run's
// slot too (both hold it as the node). A drain that passed drain.timeout
// returns too, so its slot goes to the next node.
func (r *maintenanceRun) drainInSlot() error {
	slot, err := r.takeSlot()
	if err != nil {
		return err
	}
	defer slot.Release()
	// A slot taken back by the coordinator (held past its bound) ends
	// the drain: the next node's turn has come. The run is retried, and
	// asks for a slot anew.
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	go func() {
		select {
		case <-slot.Lost():
			r.c.log.Warn("Drain stopped: the drain slot was taken back", "reason", slot.LostReason())
			r.c.engine.Event(corev1.EventTypeWarning, "DrainSlotLost", "Drain stopped: %s; the drain asks for a slot again", slot.LostReason())
			cancel()
		case <-ctx.Done():
		}
	}()
	st, err := r.begin(ctx)
	if err != nil {
		return err
	}
	if err := r.drain(ctx, st); err != nil {
		return err
	}
	if ctx.Err() != nil && r.ctx.Err() == nil {
		return fmt.Errorf("the drain slot was taken back: %s", slot.LostReason())
	}
	return nil
}

// takeSlot passes the gates and waits for a cluster-wide drain slot,
// saying on the Node why the drain waits meanwhile. It fails only when the
// run is stopped. A reboot's drain takes no slot of its own: the reboot
// coordinator takes the slot before it asks for the drain, and holds it
// until the node is back from the reboot. The drain waits for that slot all
// the same (Slots.Await): the record that asks for the drain outlives the
// slot, which node-agent-coordinator takes back from an agent silent for
// longer than slots.heartbeatBound, and a restarted agent resumed the
// drain and evicted before the reboot controller had its slot again.
func (r *maintenanceRun) takeSlot() (slots.Slot, error) {
	onWait := waitReporter(r.ctx, r.c.engine, r.trigger, r.reason)
	// The pre-drain hooks first, for a reboot's drain too: an outside
	// controller's hold is on the node, whoever asks for its drain.
	if err := r.c.preDrain.Wait(r.ctx, onWait); err != nil {
		return nil, err
	}
	if r.trigger == selfdrain.TriggerReboot {
		return r.c.slots.Await(r.ctx, slots.PurposeReboot, onWait)
	}
	if err := r.c.gates.Wait(r.ctx, onWait); err != nil {
		return nil, err
	}
	return r.c.slots.Acquire(r.ctx, slots.PurposeMaintenance, onWait)
}

// begin cordons and taints the node and records the start, or resumes the
// record a previous agent left.
func (r *maintenanceRun) begin(ctx context.Context) (*selfdrain.Status, error) {
	e := r.c.engine
	st, err := e.Begin(ctx, selfdrain.Request{Trigger: r.trigger, Reason: r.reason})
	if err != nil && ctx.Err() == nil {
		r.c.log.Error("Could not start maintenance", "err", err)
		e.Event(corev1.EventTypeWarning, "MaintenanceStartFailed", "Could not cordon and taint the node: %v", err)
	}
	return st, err
}

// drain evicts the pods until none is left, the run is stopped, or
// drain.timeout passes: then it asks for no more evictions, the status turns
// Failed (timeout.go), and it returns.
func (r *maintenanceRun) drain(ctx context.Context, st *selfdrain.Status) error {
	e := r.c.engine
	_, err := e.Drain(ctx, st, selfdrain.Request{Trigger: r.trigger, Reason: r.reason, Deadline: e.MaintenanceDeadline(st),
		AfterTimeout: afterTimeout(e.Config.OnTimeout, r.trigger)})
	if err != nil && ctx.Err() == nil {
		r.c.log.Error("Drain stopped", "err", err)
	}
	return err
}

// finish gives up the run's place and asks for a reconcile, which decides
// what follows the drain now that no run holds the place: nothing after a
// success, or after a timeout while the request stays but for the undo of
// drain.onTimeout uncordon; a new run for a request that changed meanwhile. A failure is retried through the rate-limited
// queue rather than in a hot loop. A run that was stopped lost its place to
// whoever stopped it, and its error is only the stop.
func (r *maintenanceRun) finish(err error) {
	c := r.c
	c.mu.Lock()
	if c.active == r {
		c.active = nil
	}
	c.mu.Unlock()
	switch {
	case r.ctx.Err() != nil:
	case err != nil:
		c.queue.AddRateLimited(c.node)
	default:
		c.enqueue()
	}
}
