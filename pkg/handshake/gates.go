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

// Check is one kind of gate a maintenance waits for: What names it in the
// wait's reason ("maintenance gates", "VMs that cannot leave").
type Check struct {
	What    string
	Checker GateChecker
}

// GatedSlots is slots behind checks (selfdrain → the maintenance gates, the
// VMs that cannot leave the node): a maintenance drain asks for its slot
// only once no check holds, and asks them again every interval until then,
// saying on the Node what holds, with the gate's query and answer or the
// VM and why it cannot leave. The checks are asked before the cordon, so a
// maintenance they hold changes nothing on the node.
func GatedSlots(slots selfdrain.SlotSource, interval time.Duration, clk clock.Clock, checks ...Check) selfdrain.SlotSource {
	return gatedSlots{slots: slots, checks: checks, interval: interval, clock: clk}
}

type gatedSlots struct {
	slots    selfdrain.SlotSource
	checks   []Check
	interval time.Duration
	clock    clock.Clock
}

// gateWait is the drain's reason to wait while a gate holds.
type gateWait struct{ why string }

func (g gateWait) Error() string      { return g.why }
func (g gateWait) WaitReason() string { return g.why }

func (g gatedSlots) Acquire(ctx context.Context, onWait func(error)) (selfdrain.Slot, error) {
	for {
		var why []string
		for _, c := range g.checks {
			held := c.Checker.Blockers(ctx)
			if len(held) == 0 {
				continue
			}
			names := make([]string, len(held))
			for i, b := range held {
				names[i] = b.Name
			}
			why = append(why, "waiting for "+c.What+": "+strings.Join(names, "; "))
		}
		if len(why) == 0 {
			break
		}
		onWait(gateWait{strings.Join(why, "; and ")})
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-g.clock.After(g.interval):
		}
	}
	return g.slots.Acquire(ctx, onWait)
}
