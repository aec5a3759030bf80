package maintenance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/shutdown"
)

// drainer records what the guard asked of the drain it wraps.
type drainer struct{ drains, undos int }

func (d *drainer) Drain(context.Context, time.Time) (shutdown.Result, error) {
	d.drains++
	return shutdown.Result{Complete: true, Message: "drained"}, nil
}

func (d *drainer) Undo(context.Context) error { d.undos++; return nil }

// rebooter answers err, and records whether the mark was set while it was
// asked (logind announces the shutdown before its call returns).
type rebooter struct {
	o          *OwnReboot
	err        error
	markedThen bool
}

func (r *rebooter) Reboot(ctx context.Context) error {
	r.o.mu.Lock()
	r.markedThen = r.o.own
	r.o.mu.Unlock()
	return r.err
}

// Every transition of the own-reboot mark, as the coordinator and the
// shutdown guard go through them.
func TestOwnReboot(t *testing.T) {
	ctx := context.Background()
	type step string
	const (
		rebootOK      step = "the coordinator asks, logind accepts"
		rebootRefused step = "the coordinator asks, logind refuses"
		goDown        step = "a shutdown starts (the guard drains)"
		cancel        step = "the shutdown is cancelled (the guard undoes)"
	)
	tests := []struct {
		name       string
		steps      []step
		wantDrains int // drains the wrapped drainer made
		wantUndos  int
		lastOwn    bool // the last shutdown passed as the coordinator's own
	}{
		{name: "someone else's shutdown is drained", steps: []step{goDown}, wantDrains: 1},
		{name: "the coordinator's reboot passes at once", steps: []step{rebootOK, goDown}, lastOwn: true},
		{name: "a refused reboot leaves no mark", steps: []step{rebootRefused, goDown}, wantDrains: 1},
		{name: "retry after a refusal passes", steps: []step{rebootRefused, rebootOK, goDown}, lastOwn: true},
		{name: "own reboot cancelled: nothing of the guard's to undo", steps: []step{rebootOK, goDown, cancel}, lastOwn: true},
		{name: "own reboot cancelled: the next shutdown is drained", steps: []step{rebootOK, goDown, cancel, goDown}, wantDrains: 1},
		{name: "own reboot cancelled, asked again: passes", steps: []step{rebootOK, goDown, cancel, rebootOK, goDown}, lastOwn: true},
		{name: "someone else's shutdown cancelled: undone", steps: []step{goDown, cancel}, wantDrains: 1, wantUndos: 1},
		{name: "the coordinator asks while another shutdown drains: its undo still runs", steps: []step{goDown, rebootOK, cancel}, wantDrains: 1, wantUndos: 1},
		{name: "cancelled twice: undone once", steps: []step{goDown, cancel, cancel}, wantDrains: 1, wantUndos: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o OwnReboot
			inner := &drainer{}
			d := o.Drainer(inner)
			var last shutdown.Result
			for _, s := range tt.steps {
				switch s {
				case rebootOK, rebootRefused:
					r := &rebooter{o: &o}
					if s == rebootRefused {
						r.err = errors.New("Interactive authentication required")
					}
					err := o.Rebooter(r).Reboot(ctx)
					if !errors.Is(err, r.err) {
						t.Fatalf("%s: Reboot returned %v, want %v", s, err, r.err)
					}
					if !r.markedThen {
						t.Fatalf("%s: the mark was not set while logind was asked", s)
					}
				case goDown:
					res, err := d.Drain(ctx, time.Now().Add(time.Minute))
					if err != nil || !res.Complete {
						t.Fatalf("%s: %+v, %v", s, res, err)
					}
					last = res
				case cancel:
					if err := d.Undo(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if inner.drains != tt.wantDrains || inner.undos != tt.wantUndos {
				t.Errorf("drains %d undos %d, want %d and %d", inner.drains, inner.undos, tt.wantDrains, tt.wantUndos)
			}
			if own := last.Message == OwnRebootMessage; own != tt.lastOwn {
				t.Errorf("last shutdown passed as own: %v, want %v (%q)", own, tt.lastOwn, last.Message)
			}
		})
	}
}
