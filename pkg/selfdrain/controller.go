package selfdrain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/node-agent/node-agent/pkg/agent"
)

// Controller turns maintenance requests for the agent's own Node into
// drains. Two kinds of request exist: the node-agent.io/maintenance
// annotation and, when NodeMaintenance is set, NodeMaintenance objects that
// name the node. The node is in maintenance while either asks for it; one
// drain serves both, and it ends only when neither asks any longer. What the
// drain did is recorded on the Node, so a restarted agent resumes where the
// last one stopped. The shutdown guard borrows the engine through
// ShutdownDrain and ShutdownCancelled.
type Controller struct {
	Engine *Engine
	Slots  *Slots
	// NodeMaintenance, when not nil, serves NodeMaintenance objects.
	NodeMaintenance *NodeMaintenanceSource

	// queue holds one key, the node's name: every change of the Node or of
	// its NodeMaintenance objects adds it, and a failed step adds it again
	// rate-limited.
	queue workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	active   *activeDrain
	shutdown bool
	// badStatus is the last malformed status value reported, so each one is
	// reported once.
	badStatus string
}

// activeDrain is the maintenance drain running in its own goroutine.
type activeDrain struct {
	trigger Trigger
	cancel  context.CancelFunc
	done    chan struct{}
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
	Engine *Engine
	Slots  *Slots
	// NodeMaintenance, when not nil, serves NodeMaintenance objects.
	NodeMaintenance *NodeMaintenanceSource
}

// NewController returns a controller for o.
func NewController(o ControllerOptions) *Controller {
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryAfterFailure, retryAfterFailureCap)
	return &Controller{Engine: o.Engine, Slots: o.Slots, NodeMaintenance: o.NodeMaintenance,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[string]{
			Name: "selfdrain", Clock: o.Engine.Clock,
		})}
}

// Name implements agent.Component.
func (c *Controller) Name() string { return "selfdrain" }

// enqueue asks for a reconcile of the node.
func (c *Controller) enqueue() { c.queue.Add(c.Engine.NodeName) }

// Run implements agent.Component.
func (c *Controller) Run(ctx context.Context, view agent.NodeView) error {
	if err := view.AddHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueue() },
		UpdateFunc: func(_, _ any) { c.enqueue() },
	}); err != nil {
		return err
	}
	if c.NodeMaintenance != nil {
		go c.NodeMaintenance.Run(ctx, c.enqueue)
	}
	c.enqueue()
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.processNext(ctx, view) {
	}
	c.stopActive()
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
			c.Engine.Logger.Error("Could not end maintenance", "err", err)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// stopActive cancels a running drain and waits for it, leaving the Node as
// it is: the next agent resumes from the status on the Node.
func (c *Controller) stopActive() {
	c.mu.Lock()
	run := c.active
	c.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
}

// request is what asks for maintenance of the node right now.
type request struct {
	annotation string           // the annotation's reason, or ""
	object     *NodeMaintenance // the NodeMaintenance object served, or nil
}

func (r request) wanted() bool { return r.annotation != "" || r.object != nil }

// trigger and reason of a drain started for r: the annotation wins when
// both ask, only because it was the agent's first API; either way one drain
// serves both.
func (r request) trigger() (Trigger, string) {
	if r.annotation != "" {
		return TriggerAnnotation, r.annotation
	}
	return TriggerNodeMaintenance, r.object.requestReason()
}

// endReason says why a maintenance started by trigger ends.
func endReason(t Trigger) string {
	switch t {
	case TriggerNodeMaintenance:
		return "NodeMaintenance object deleted"
	case TriggerShutdown:
		return "node is back after the shutdown drain"
	}
	return "maintenance annotation removed"
}

// reconcile starts or ends the drain as the requests ask. It returns an
// error only when ending the maintenance failed.
func (c *Controller) reconcile(ctx context.Context, view agent.NodeView) error {
	node, err := view.Get()
	if err != nil {
		return nil // the Node's arrival in the cache adds the key again
	}
	e := c.Engine
	req := request{annotation: strings.TrimSpace(node.Annotations[MaintenanceAnnotation])}
	var objs []*NodeMaintenance
	if c.NodeMaintenance != nil {
		if !c.NodeMaintenance.Synced() {
			// Fail closed: until the objects are known, a missing object
			// must not end a maintenance it started. The source adds the
			// key once it has synced.
			return nil
		}
		objs = c.NodeMaintenance.Objects()
		req.object = primaryObject(objs)
	}
	st, perr := ParseStatus(node)
	if perr != nil {
		raw := node.Annotations[StatusAnnotation]
		c.mu.Lock()
		first := c.badStatus != raw
		c.badStatus = raw
		c.mu.Unlock()
		if first {
			e.Logger.Error("Malformed maintenance status; not changing the node because of it", "err", perr)
			e.event(corev1.EventTypeWarning, "MalformedMaintenanceStatus", "%v", perr)
		}
	}
	e.Metrics.observeNode(st, perr)
	if c.NodeMaintenance != nil {
		// Finalizer first: an object the agent drains for is kept until
		// the drain is undone.
		c.NodeMaintenance.apply(ctx, planObjects(objs, st, perr, req.annotation != ""))
	}

	c.mu.Lock()
	if c.shutdown {
		// The shutdown guard owns the engine until the host goes down or
		// the shutdown is cancelled.
		c.mu.Unlock()
		return nil
	}
	switch {
	case req.wanted() && c.active == nil:
		if perr != nil {
			// Starting would overwrite a record we cannot read; the
			// admin must fix or delete it first.
			break
		}
		if st.Active() && st.Trigger != TriggerShutdown && st.Phase == PhaseSucceeded {
			break // drained; maintenance goes on while it is requested
		}
		trigger, reason := req.trigger()
		c.startLocked(ctx, trigger, reason)
	case !req.wanted() && c.active != nil:
		run := c.active
		c.active = nil
		c.mu.Unlock()
		run.cancel()
		<-run.done
		return e.End(ctx, endReason(run.trigger))
	case !req.wanted() && c.active == nil && perr == nil && st.Active():
		// Maintenance ended while no drain ran: the request went away
		// while the agent was down, or the host came back from a shutdown
		// drain. Undo what the agent did.
		c.mu.Unlock()
		return e.End(ctx, endReason(st.Trigger))
	}
	c.mu.Unlock()
	return nil
}

// startLocked starts a drain for a maintenance request. c.mu is held.
func (c *Controller) startLocked(parent context.Context, trigger Trigger, reason string) {
	ctx, cancel := context.WithCancel(parent)
	run := &activeDrain{trigger: trigger, cancel: cancel, done: make(chan struct{})}
	c.active = run
	e := c.Engine
	go func() {
		defer close(run.done)
		defer cancel()
		w := &slotWait{c: c, trigger: trigger, reason: reason}
		release, err := c.Slots.Acquire(ctx, func(err error) { w.report(ctx, err) })
		if err != nil {
			return
		}
		released := false
		defer func() {
			if !released {
				release()
			}
		}()
		st, err := e.Begin(ctx, Request{Trigger: trigger, Reason: reason})
		if err != nil {
			if ctx.Err() == nil {
				e.Logger.Error("Could not start maintenance", "err", err)
				e.event(corev1.EventTypeWarning, "MaintenanceStartFailed", "Could not cordon and taint the node: %v", err)
				c.retryLater()
			}
			return
		}
		req := Request{Trigger: trigger, Reason: reason, KeepTrying: true}
		req.Deadline = e.maintenanceDeadline(st)
		st, err = e.Drain(ctx, st, req)
		release()
		released = true
		if err != nil && ctx.Err() == nil {
			e.Logger.Error("Drain stopped", "err", err)
			c.retryLater()
			return
		}
		_ = st
		c.mu.Lock()
		if c.active == run {
			c.active = nil
		}
		c.mu.Unlock()
	}()
}

// retryLater clears the active run and adds the key again rate-limited, so a
// failure to start is retried without a hot loop.
func (c *Controller) retryLater() {
	c.mu.Lock()
	c.active = nil
	c.mu.Unlock()
	c.queue.AddRateLimited(c.Engine.NodeName)
}

// slotWait reports, while a drain waits for a slot, why it waits: every
// slot is held by other nodes, or a slot cannot be taken at all because of
// an error (a missing drain.leaseNamespace, no permission), which waiting
// will not cure and which the status and a Warning Event then name.
type slotWait struct {
	c       *Controller
	trigger Trigger
	reason  string
	start   *metav1.Time
	errors  int
	lastMsg string
}

func (w *slotWait) report(ctx context.Context, cause error) {
	c, e := w.c, w.c.Engine
	now := e.now()
	if w.start == nil {
		w.start = &now
	}
	msg := fmt.Sprintf("waiting for one of %d drain slots (drain.maxConcurrentNodes)", c.Slots.Max)
	if cause != nil {
		w.errors++
		msg = fmt.Sprintf("cannot take a drain slot: %v; check drain.leaseNamespace (%q): the namespace must exist and the agent must be allowed to create and update Leases in it", cause, c.Slots.Namespace)
	} else {
		w.errors = 0
	}
	if err := w.record(ctx, msg, now); err != nil {
		e.Logger.Warn("Could not record why the drain waits", "err", err)
	}
	if msg == w.lastMsg {
		return
	}
	w.lastMsg = msg
	if err := setCondition(ctx, e.Client, e.NodeName, corev1.ConditionTrue, ReasonWaiting, msg, now); err != nil {
		e.Logger.Warn("Could not set the node condition", "err", err)
	}
	if cause != nil {
		e.Logger.Error("Cannot take a drain slot", "err", cause, "leaseNamespace", c.Slots.Namespace)
		e.event(corev1.EventTypeWarning, "DrainSlotError", "Maintenance requested, but %s", msg)
		return
	}
	e.Logger.Info("Waiting for a drain slot", "maxConcurrentNodes", c.Slots.Max)
	e.event(corev1.EventTypeNormal, "MaintenanceWaiting", "Maintenance requested; waiting for a drain slot (at most %d nodes drain at once)", c.Slots.Max)
}

// record writes phase Waiting with msg. A drain that already began (the
// agent restarted and its slot went to another node, or a Lease request
// failed) keeps its record of what the agent changed, with msg as lastError;
// a Node that cannot be read is not written at all, so that record is never
// lost.
func (w *slotWait) record(ctx context.Context, msg string, now metav1.Time) error {
	e := w.c.Engine
	node, err := e.Client.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", e.NodeName, err)
	}
	prev, perr := ParseStatus(node)
	if perr != nil {
		return perr
	}
	st := &Status{Phase: PhaseWaiting, Trigger: w.trigger, Reason: w.reason, StartTime: w.start, LastUpdate: &now,
		LastError: msg, ErrorOnLeaseCount: w.errors}
	if prev.Active() && prev.Phase != PhaseWaiting {
		kept := *prev
		kept.LastError, kept.ErrorOnLeaseCount, kept.LastUpdate = msg, w.errors, &now
		st = &kept
	}
	return patchStatusAnnotation(ctx, e.Client, e.NodeName, st)
}

// ShutdownDrain drains the node for a host shutdown: it takes the engine over
// from any annotation drain, skips the wait for a drain slot (the host goes
// down either way, which the status records), and returns when the node is
// drained or the deadline has passed.
func (c *Controller) ShutdownDrain(ctx context.Context, deadline time.Time) (*Status, error) {
	c.mu.Lock()
	c.shutdown = true
	run := c.active
	c.active = nil
	c.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
	e := c.Engine
	st, err := e.Begin(ctx, Request{Trigger: TriggerShutdown, Reason: "host is shutting down", SkippedConcurrencyWait: true})
	if err != nil {
		return nil, err
	}
	return e.Drain(ctx, st, Request{Trigger: TriggerShutdown, Reason: "host is shutting down", Deadline: deadline})
}

// ShutdownCancelled undoes a shutdown drain after logind cancelled the
// shutdown, and gives the engine back to the annotation trigger, which
// starts again if maintenance is still requested.
func (c *Controller) ShutdownCancelled(ctx context.Context) error {
	err := c.Engine.End(ctx, "shutdown cancelled")
	c.mu.Lock()
	c.shutdown = false
	c.mu.Unlock()
	c.enqueue()
	if err != nil {
		return errors.Join(errors.New("undoing the shutdown drain"), err)
	}
	return nil
}
