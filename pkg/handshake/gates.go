package handshake

import (
	"context"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// GateChecker asks the maintenance gates (maintenance.gates): the texts of
// those that hold, none when the maintenance may go on. reboot.GateBlockers
// is one.
type GateChecker interface {
	Blockers(ctx context.Context) []reboot.Blocker
}

// GatedSlots is slots behind maintenance gates (selfdrain → the reboot's
// gates): a maintenance drain asks for its slot only once no gate holds,
// and asks the gates again every interval until then, saying on the Node
// which gate holds, with its query and answer. The gates are asked before
// the cordon, so a maintenance they hold changes nothing on the node.
func GatedSlots(slots selfdrain.SlotSource, gates GateChecker, interval time.Duration, clk clock.Clock) selfdrain.SlotSource {
	return gatedSlots{slots: slots, gates: gates, interval: interval, clock: clk}
}

type gatedSlots struct {
	slots    selfdrain.SlotSource
	gates    GateChecker
	interval time.Duration
	clock    clock.Clock
}

// gateWait is the drain's reason to wait while a gate holds.
type gateWait struct{ why string }

func (g gateWait) Error() string      { return g.why }
func (g gateWait) WaitReason() string { return g.why }

func (g gatedSlots) Acquire(ctx context.Context, onWait func(error)) (selfdrain.Slot, error) {
	for {
		held := g.gates.Blockers(ctx)
		if len(held) == 0 {
			break
		}
		names := make([]string, len(held))
		for i, b := range held {
			names[i] = b.Name
		}
		onWait(gateWait{"waiting for maintenance gates: " + strings.Join(names, "; ")})
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-g.clock.After(g.interval):
		}
	}
	return g.slots.Acquire(ctx, onWait)
}
