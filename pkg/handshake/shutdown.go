package handshake

import (
	"context"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/shutdown"
)

// ShutdownDrain is the drain's side of a shutdown: *selfdrain.Controller.
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
