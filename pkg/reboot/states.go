package reboot

// State is the reason of the Node condition the coordinator keeps: one for
// every state a node's reboot can be in.
type State string

const (
	// NotNeeded: neither the sentinel file nor the sentinel command says the
	// host needs a reboot.
	NotNeeded State = "NotNeeded"
	// Pending: a reboot is needed and has not started; Decision.Detail says
	// why it waits.
	Pending State = "Pending"
	// Draining: the node holds a drain slot and is being drained.
	Draining State = "Draining"
	// Rebooting: the drain is over and the host was (or is now to be) asked
	// to reboot.
	Rebooting State = "Rebooting"
	// Done: the node came back from the reboot and needs no other.
	Done State = "Done"
	// DrainFailed: the drain did not finish within drain.timeout and
	// reboot.rebootWithoutDrain is off, so the host was not rebooted: the
	// coordinator withdrew its drain and gave the slot back. The next
	// attempt waits for DrainFailedBackoff, unless an admin asks again
	// (RequestAnnotation). pkg/selfdrain's UnderMaintenance condition
	// names a drain that did not finish the same.
	DrainFailed State = "DrainFailed"
	// RebootLoop: the sentinel was still there after a reboot, and that
	// reboot is less than reboot.loopBound ago; no reboot starts until the
	// bound has passed.
	RebootLoop State = "RebootLoop"
)

// States lists every State, for metric labels and docs.
var States = []State{NotNeeded, Pending, Draining, Rebooting, Done, DrainFailed, RebootLoop}

// Detail says why a Pending reboot waits.
type Detail string

const (
	// OutsideWindow: now is outside reboot.window.
	OutsideWindow Detail = "OutsideWindow"
	// BlockedByPods: pods on this node match reboot.blockingPodSelector.
	BlockedByPods Detail = "BlockedByPods"
	// BlockedByAlerts: alerts matching reboot.blockingAlertRegexp fire, or
	// Prometheus could not be asked.
	BlockedByAlerts Detail = "BlockedByAlerts"
	// BlockedByGates: a PromQL gate of reboot.gates has an answer with a
	// series, or could not be asked.
	BlockedByGates Detail = "BlockedByGates"
	// BlockedByVMs: a KubeVirt VM on the node cannot leave it by live
	// migration, and drain.vmWithoutTarget is wait.
	BlockedByVMs Detail = "BlockedByVMs"
	// WaitingForSlot: every drain slot (slots.limit) is held
	// by another node. Its reason is WaitingForDrainSlot, the one the
	// UnderMaintenance condition gives the same wait.
	WaitingForSlot Detail = "WaitingForDrainSlot"
	// InMaintenance: the node is under a maintenance someone else asked
	// for (the annotation, a NodeMaintenance object); the reboot waits
	// until it ends, so that the two never share a drain or a slot.
	InMaintenance Detail = "InMaintenance"
)

// Phase is how far this node's reboot has gone, as the coordinator recorded
// it. It must survive the reboot: the coordinator keeps it in its Record on
// the Node, not in memory.
type Phase string

const (
	// PhaseIdle: no reboot under way.
	PhaseIdle Phase = ""
	// PhaseWaitingForSlot: a reboot may start, and the coordinator waits
	// for a drain slot. Decide treats it as PhaseIdle: everything that may
	// keep a reboot from starting is checked again while it waits. Its
	// value stays the one earlier agents wrote, not the reason's
	// WaitingForDrainSlot: DecodeRecord refuses a phase it does not know,
	// so an agent downgraded mid-wait would stop at a renamed one.
	PhaseWaitingForSlot Phase = "WaitingForSlot"
	// PhaseDraining: the drain started.
	PhaseDraining Phase = "Draining"
	// PhaseDrained: the drain finished.
	PhaseDrained Phase = "Drained"
	// PhaseDrainTimedOut: the drain did not finish within drain.timeout.
	PhaseDrainTimedOut Phase = "DrainTimedOut"
	// PhaseRebootRequested: logind was asked to reboot, and this boot is
	// still the one before it.
	PhaseRebootRequested Phase = "RebootRequested"
	// PhaseBack: the host booted again after the reboot it was asked for.
	PhaseBack Phase = "Back"
)

// Advance is the phase after what the coordinator saw since its last step:
// the reboot's drain finished or timed out (pkg/selfdrain's record, read
// into m), or the host booted again (booted: the Node reports another boot
// ID than the one recorded when logind was asked). These are facts, not
// decisions; every other change of phase is an Action's.
func (p Phase) Advance(m Maintenance, booted bool) Phase {
	switch p {
	case PhaseDraining:
		switch {
		case m.Drained:
			return PhaseDrained
		case m.TimedOut:
			return PhaseDrainTimedOut
		}
	case PhaseRebootRequested:
		if booted {
			return PhaseBack
		}
	}
	return p
}

// Action is what the coordinator does next to carry a Decision out. Each is
// one named change of the coordinator's slot, its record or the host; the
// record fields an Action sets are listed with it.
type Action string

const (
	// ActNone: nothing to do (wait, or nothing is needed).
	ActNone Action = ""
	// ActTakeSlot: a reboot may start; wait for a drain slot (Phase
	// WaitingForSlot). Taking one leads to ActStartDrain at the next step.
	ActTakeSlot Action = "TakeSlot"
	// ActTakeSlotBack: the record says this node holds a drain slot (the
	// drain asked for, the host rebooting or back) but this process does
	// not: it restarted, or the host rebooted. Take it back; the phase
	// stays.
	ActTakeSlotBack Action = "TakeSlotBack"
	// ActReleaseSlot: stop waiting for a slot and give back the one held
	// (Phase Idle): a reboot that may not start now (the window closed, a
	// blocker appeared) never holds one of the cluster's slots.
	ActReleaseSlot Action = "ReleaseSlot"
	// ActStartDrain: ask pkg/selfdrain for the drain (Phase Draining,
	// Drain, Slot).
	ActStartDrain Action = "StartDrain"
	// ActCancelDrain: the need went away while the node drained: withdraw
	// the drain (Phase Idle, no Drain). The slot is given back once the
	// drain is undone (ActReleaseSlot, at a later step).
	ActCancelDrain Action = "CancelDrain"
	// ActReboot: keep the slot across the reboot and ask logind to reboot
	// the host (Phase RebootRequested, BootID, RequestedAt); also when a
	// host that was asked did not go down within RetryReboot.
	ActReboot Action = "Reboot"
	// ActGiveUp: the drain did not finish within drain.timeout: withdraw
	// the drain and give the slot back at once (Phase Idle, no Drain, the
	// Decision's Failure recorded).
	ActGiveUp Action = "GiveUp"
	// ActUndoDrain: the host is back and Ready: withdraw the drain, so
	// that pkg/selfdrain uncordons the node (no Drain); ActFinish follows
	// once it has.
	ActUndoDrain Action = "UndoDrain"
	// ActFinish: the host is back and the drain undone: give the slot back
	// and end the reboot (Phase Idle, no BootID or RequestedAt, the
	// Decision's Last recorded).
	ActFinish Action = "Finish"
)
