package maintenance

import (
	"context"
	"sync"
	"time"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/shutdown"
)

// OwnReboot tells the shutdown guard that a shutdown is the reboot the
// coordinator asked for. Its zero value is ready; one agent has one, handed
// to both sides (Rebooter and Drainer).
//
// The mark is set just before logind is asked, because logind announces
// the shutdown (PrepareForShutdown) before its Reboot call returns; it is
// cleared when logind refuses (no shutdown starts), and when a shutdown is
// cancelled, so that a later shutdown is drained as any other unless the
// coordinator asks again (it does, after reboot.RetryReboot).
type OwnReboot struct {
	mu  sync.Mutex
	own bool
	// drained says the guard's drain ran for the shutdown under way (it
	// was not the coordinator's own), so a cancellation has something to
	// undo.
	drained bool
}

// OwnRebootMessage is the shutdown guard's result for the coordinator's own
// reboot, for its log.
const OwnRebootMessage = "the reboot controller drained the node before it asked for this reboot"

// Rebooter is r with the mark set while r asks, and kept when it succeeds.
func (o *OwnReboot) Rebooter(r reboot.Rebooter) reboot.Rebooter {
	return rebooterFunc(func(ctx context.Context) error {
		o.set(true)
		if err := r.Reboot(ctx); err != nil {
			o.set(false)
			return err
		}
		return nil
	})
}

// Drainer is d for the shutdown guard, with the coordinator's own reboot let
// go at once: Drain reports it complete without draining. After a cancelled
// shutdown, Undo undoes only a drain d made (the coordinator's drain is the
// coordinator's to undo) and clears the mark.
func (o *OwnReboot) Drainer(d shutdown.Drainer) shutdown.Drainer {
	return shutdown.DrainerFuncs{
		DrainFunc: func(ctx context.Context, deadline time.Time) (shutdown.Result, error) {
			if o.begin() {
				return shutdown.Result{Complete: true, Message: OwnRebootMessage}, nil
			}
			return d.Drain(ctx, deadline)
		},
		UndoFunc: func(ctx context.Context) error {
			if o.cancelled() {
				return d.Undo(ctx)
			}
			return nil
		},
	}
}

func (o *OwnReboot) set(own bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.own = own
}

// begin says whether the shutdown that starts is the coordinator's own;
// when it is not, the guard's drain runs.
func (o *OwnReboot) begin() (own bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.drained = o.drained || !o.own
	return o.own
}

// cancelled ends the shutdown under way: the mark goes, and it says
// whether the guard's drain ran for it.
func (o *OwnReboot) cancelled() (drained bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	drained = o.drained
	o.own, o.drained = false, false
	return drained
}

type rebooterFunc func(ctx context.Context) error

func (f rebooterFunc) Reboot(ctx context.Context) error { return f(ctx) }
