package maintenance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/shutdown"
)

type shutdownDrain struct {
	deadline time.Time
	res      selfdrain.ShutdownResult
	err      error
	undos    int
}

func (s *shutdownDrain) DrainForShutdown(_ context.Context, deadline time.Time) (selfdrain.ShutdownResult, error) {
	s.deadline = deadline
	return s.res, s.err
}

func (s *shutdownDrain) ShutdownCancelled(context.Context) error { s.undos++; return nil }

// The guard's deadline reaches the drain, and the drain's result and error
// reach the guard unchanged.
func TestShutdownDrainer(t *testing.T) {
	deadline := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	incomplete := errors.New("evictions refused")
	d := &shutdownDrain{res: selfdrain.ShutdownResult{Message: "2 of 5 pods still on the node"}, err: incomplete}
	res, err := ShutdownDrainer(d).Drain(context.Background(), deadline)
	if !d.deadline.Equal(deadline) || res != (shutdown.Result{Message: "2 of 5 pods still on the node"}) || !errors.Is(err, incomplete) {
		t.Errorf("deadline %s result %+v err %v", d.deadline, res, err)
	}
	if err := ShutdownDrainer(d).Undo(context.Background()); err != nil || d.undos != 1 {
		t.Errorf("undo: %v, %d", err, d.undos)
	}
}
