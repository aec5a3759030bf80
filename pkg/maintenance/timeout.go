package maintenance

import (
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// What follows a drain that passed drain.timeout is the lifecycle's rule,
// not the engine's: the engine stops evicting and records the blockers;
// the sentence it ends its Event with, and whether the node is undone while
// the maintenance stays requested, come from here.

// afterTimeout says what becomes of the node and its drain slot after a
// drain of trigger timed out, under drain.onTimeout onTimeout.
func afterTimeout(onTimeout string, trigger selfdrain.Trigger) string {
	const again = "it is not drained again until the maintenance is requested anew (another reason, or ended and requested again)."
	switch {
	case trigger == selfdrain.TriggerReboot:
		return "The reboot controller, which holds the drain slot, decides what follows."
	case undoesOnTimeout(onTimeout, trigger):
		return "Its drain slot goes to the next node. The agent undoes its cordon and drain taint (drain.onTimeout uncordon); the maintenance stays requested and Failed, and " + again
	}
	return "Its drain slot goes to the next node. The node stays cordoned and tainted (drain.onTimeout keepCordoned) until the maintenance is ended, and " + again
}

// undoesOnTimeout reports whether a drain of trigger that timed out is
// undone while its maintenance stays requested: drain.onTimeout uncordon,
// except for a reboot's drain, which the reboot controller undoes by
// withdrawing its request.
func undoesOnTimeout(onTimeout string, trigger selfdrain.Trigger) bool {
	return onTimeout == config.OnTimeoutUncordon && trigger != selfdrain.TriggerReboot
}
