package maintenance

import (
	"context"
	"errors"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/shutdown"
)

// ShutdownDrain is the drain's side of a shutdown: *Controller.
type ShutdownDrain interface {
	DrainForShutdown(ctx context.Context, deadline time.Time) (selfdrain.ShutdownResult, error)
	ShutdownCancelled(ctx context.Context) error
}

// ShutdownDrainer hands the shutdown guard the drain: the guard's shutdown
// goes to DrainForShutdown, and a cancelled one to ShutdownCancelled, which
// gives the node back. Wrap it in OwnReboot.Drainer so that the agent's own
// reboot passes at once.
func ShutdownDrainer(d ShutdownDrain) shutdown.Drainer {
	return shutdown.DrainerFuncs{
		DrainFunc: func(ctx context.Context, deadline time.Time) (shutdown.Result, error) {
			r, err := d.DrainForShutdown(ctx, deadline)
			return shutdown.Result{Complete: r.Complete, Message: r.Message}, err
		},
		UndoFunc: d.ShutdownCancelled,
	}
}

// DrainForShutdown is the shutdown guard's one way in; the wiring hands it
// to the guard, and this package knows nothing of logind. It takes the
// engine from any maintenance drain, which stops, and starts none until
// ShutdownCancelled; marks the node NodeShuttingDown; drains it without
// waiting for a drain slot (the host goes down either way, which the status
// records), so that the final status is written before deadline; and
// records whether the drain was complete.
func (c *Controller) DrainForShutdown(ctx context.Context, deadline time.Time) (selfdrain.ShutdownResult, error) {
	c.setShutdown(true)
	e := c.engine
	e.AnnounceShutdown(ctx, deadline)
	c.takeActive().stop()
	st, err := e.BeginAndDrain(ctx, selfdrain.Request{Trigger: selfdrain.TriggerShutdown, Reason: "host is shutting down",
		Deadline: deadline.Add(-selfdrain.StatusReserve), SkippedConcurrencyWait: true, NotATimeout: true})
	if st == nil {
		return selfdrain.ShutdownResult{}, err
	}
	res := e.RecordShutdownDrain(ctx, st)
	if err != nil && ctx.Err() == nil {
		return res, err
	}
	return res, nil
}

// ShutdownCancelled undoes a shutdown drain after logind cancelled the
// shutdown, and gives the engine back to the maintenance requests, whose
// drain starts again if maintenance is still requested.
func (c *Controller) ShutdownCancelled(ctx context.Context) error {
	err := c.engine.End(ctx, "shutdown cancelled")
	c.setShutdown(false)
	c.enqueue()
	if err != nil {
		return errors.Join(errors.New("undoing the shutdown drain"), err)
	}
	return nil
}

// setShutdown says whether the shutdown guard owns the engine; while it
// does, reconcile starts no drain.
func (c *Controller) setShutdown(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shutdown = on
}
