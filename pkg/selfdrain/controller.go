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

	"github.com/node-agent/node-agent/pkg/agent"
)

// Controller turns the maintenance annotation on the agent's own Node into
// drains: a non-empty node-agent.io/maintenance starts one, removing it ends
// maintenance. All it knows is read from the Node, so a restarted agent
// resumes where the last one stopped. The shutdown guard borrows its engine
// through ShutdownDrain and ShutdownCancelled.
type Controller struct {
	Engine *Engine
	Slots  *Slots

	trigger chan struct{}

	mu       sync.Mutex
	active   *drainRun
	shutdown bool
	// badStatus is the last malformed status value reported, so each one is
	// reported once.
	badStatus string
	view      agent.NodeView
}

type drainRun struct {
	trigger Trigger
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewController returns a controller for engine, bounded by slots.
func NewController(engine *Engine, slots *Slots) *Controller {
	return &Controller{Engine: engine, Slots: slots, trigger: make(chan struct{}, 1)}
}

// Name implements agent.Component.
func (c *Controller) Name() string { return "selfdrain" }

func (c *Controller) poke() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Run implements agent.Component.
func (c *Controller) Run(ctx context.Context, view agent.NodeView) error {
	c.mu.Lock()
	c.view = view
	c.mu.Unlock()
	if err := view.AddHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(_, _ any) { c.poke() },
	}); err != nil {
		return err
	}
	c.poke()
	for {
		select {
		case <-ctx.Done():
			c.stopActive()
			return nil
		case <-c.trigger:
			c.reconcile(ctx, view)
		}
	}
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

func (c *Controller) reconcile(ctx context.Context, view agent.NodeView) {
	node, err := view.Get()
	if err != nil {
		return
	}
	e := c.Engine
	reason := strings.TrimSpace(node.Annotations[MaintenanceAnnotation])
	st, perr := ParseStatus(node)
	if perr != nil {
		raw := node.Annotations[StatusAnnotation]
		c.mu.Lock()
		first := c.badStatus != raw
		c.badStatus = raw
		c.mu.Unlock()
		if first {
			e.Logger.Error("Malformed maintenance status; not changing the node because of it", "err", perr)
			e.Recorder.Eventf(e.nodeRef(), corev1.EventTypeWarning, "MalformedMaintenanceStatus", "%v", perr)
		}
	}
	if e.Metrics != nil {
		active := 0.0
		if st.Active() {
			active = 1
		}
		e.Metrics.MaintenanceActive.Set(active)
		if perr == nil {
			e.Metrics.ObserveStatus(st)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shutdown {
		// The shutdown guard owns the engine until the host goes down or
		// the shutdown is cancelled.
		return
	}
	switch {
	case reason != "" && c.active == nil:
		if perr != nil {
			// Starting would overwrite a record we cannot read; the
			// admin must fix or delete it first.
			return
		}
		if st.Active() && st.Trigger == TriggerAnnotation && st.Phase == PhaseSucceeded {
			return // drained; maintenance goes on until the annotation goes
		}
		c.startLocked(ctx, reason)
	case reason == "" && c.active != nil:
		run := c.active
		c.active = nil
		run.cancel()
		go func() {
			<-run.done
			c.end(ctx, "maintenance annotation removed")
		}()
	case reason == "" && c.active == nil && perr == nil && st.Active():
		// Maintenance ended while no drain ran: the annotation went away
		// while the agent was down, or the host came back from a shutdown
		// drain. Undo what the agent did.
		why := "maintenance annotation removed"
		if st.Trigger == TriggerShutdown {
			why = "node is back after the shutdown drain"
		}
		go c.end(ctx, why)
	}
}

func (c *Controller) end(ctx context.Context, why string) {
	if err := c.Engine.End(ctx, why); err != nil && ctx.Err() == nil {
		c.Engine.Logger.Error("Could not end maintenance", "err", err)
		return
	}
	if c.Engine.Metrics != nil {
		c.Engine.Metrics.MaintenanceActive.Set(0)
		c.Engine.Metrics.PendingPods.Set(0)
		c.Engine.Metrics.setBlocked(nil)
	}
}

// startLocked starts an annotation-triggered drain. c.mu is held.
func (c *Controller) startLocked(parent context.Context, reason string) {
	ctx, cancel := context.WithCancel(parent)
	run := &drainRun{trigger: TriggerAnnotation, cancel: cancel, done: make(chan struct{})}
	c.active = run
	e := c.Engine
	go func() {
		defer close(run.done)
		defer cancel()
		release, err := c.Slots.Acquire(ctx, func() {
			e.Logger.Info("Waiting for a drain slot", "maxConcurrentNodes", c.Slots.Max)
			c.markWaiting(ctx, reason)
		})
		if err != nil {
			return
		}
		released := false
		defer func() {
			if !released {
				release()
			}
		}()
		st, err := e.Begin(ctx, Request{Trigger: TriggerAnnotation, Reason: reason})
		if err != nil {
			if ctx.Err() == nil {
				e.Logger.Error("Could not start maintenance", "err", err)
				e.Recorder.Eventf(e.nodeRef(), corev1.EventTypeWarning, "MaintenanceStartFailed", "Could not cordon and taint the node: %v", err)
				c.retryLater(ctx)
			}
			return
		}
		if e.Metrics != nil {
			e.Metrics.MaintenanceActive.Set(1)
		}
		req := Request{Trigger: TriggerAnnotation, Reason: reason, KeepTrying: true}
		if t := e.Config.Timeout.Duration; t > 0 && st.StartTime != nil {
			req.Deadline = st.StartTime.Add(t)
		}
		st, err = e.Drain(ctx, st, req)
		release()
		released = true
		if err != nil && ctx.Err() == nil {
			e.Logger.Error("Drain stopped", "err", err)
			c.retryLater(ctx)
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

// retryLater clears the active run and reconciles again after a pause, so a
// failure to start is retried without a hot loop.
func (c *Controller) retryLater(ctx context.Context) {
	c.mu.Lock()
	c.active = nil
	c.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-c.Engine.Clock.After(5 * time.Second):
			c.poke()
		}
	}()
}

// markWaiting records phase Waiting while the node waits for a drain slot.
func (c *Controller) markWaiting(ctx context.Context, reason string) {
	e := c.Engine
	now := metav1.NewTime(e.Clock.Now())
	st := &Status{Phase: PhaseWaiting, Trigger: TriggerAnnotation, Reason: reason, StartTime: &now, LastUpdate: &now,
		LastError: fmt.Sprintf("waiting for one of %d drain slots (drain.maxConcurrentNodes)", c.Slots.Max)}
	if err := patchStatusAnnotation(ctx, e.Client, e.NodeName, st); err != nil {
		e.Logger.Warn("Could not record phase Waiting", "err", err)
	}
	if err := setCondition(ctx, e.Client, e.NodeName, corev1.ConditionTrue, ReasonWaiting, st.LastError, now); err != nil {
		e.Logger.Warn("Could not set the node condition", "err", err)
	}
	e.Recorder.Eventf(e.nodeRef(), corev1.EventTypeNormal, "MaintenanceWaiting", "Maintenance requested; waiting for a drain slot (at most %d nodes drain at once)", c.Slots.Max)
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
	if e.Metrics != nil {
		e.Metrics.MaintenanceActive.Set(1)
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
	c.poke()
	if err != nil {
		return errors.Join(errors.New("undoing the shutdown drain"), err)
	}
	return nil
}
