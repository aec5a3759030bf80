package reboot

import (
	"fmt"
	"strings"
	"time"
)

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
	// Failed: the drain did not finish within drain.timeout and
	// reboot.rebootWithoutDrain is off, so the host was not rebooted; the
	// drain was undone. No other attempt starts before reboot.loopBound has
	// passed, unless an admin asks again (RequestAnnotation).
	Failed State = "Failed"
	// RebootLoop: the sentinel was still there after a reboot, and that
	// reboot is less than reboot.loopBound ago; no reboot starts until the
	// bound has passed.
	RebootLoop State = "RebootLoop"
)

// States lists every State, for metric labels and docs.
var States = []State{NotNeeded, Pending, Draining, Rebooting, Done, Failed, RebootLoop}

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
	// WaitingForSlot: every drain slot (drain.maxConcurrentNodes) is held
	// by another node. Its reason is WaitingForDrainSlot, the one the
	// UnderMaintenance condition gives the same wait.
	WaitingForSlot Detail = "WaitingForDrainSlot"
	// InMaintenance: the node is under a maintenance someone else asked
	// for (the annotation, a NodeMaintenance object); the reboot waits
	// until it ends, so that the two never share a drain or a slot.
	InMaintenance Detail = "InMaintenance"
)

// Phase is how far this node's reboot has gone, as the coordinator recorded
// it. It must survive the reboot: the caller keeps it on the Node or its
// Lease, not in memory.
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

// Action is what the caller does next to carry the decision out.
type Action string

const (
	// ActNone: nothing to do (wait, or nothing is needed).
	ActNone Action = ""
	// ActTakeSlot: try to take a drain slot; taking one leads to StartDrain
	// at the next decision.
	ActTakeSlot Action = "TakeSlot"
	// ActReleaseSlot: give back a slot taken for a reboot that may not
	// start now (the window closed, or a blocker appeared, before the drain
	// began), or whose drain failed; a slot is never held while waiting.
	ActReleaseSlot Action = "ReleaseSlot"
	// ActStartDrain: drain the node.
	ActStartDrain Action = "StartDrain"
	// ActReboot: ask logind to reboot the host.
	ActReboot Action = "Reboot"
	// ActFinish: the node is back: uncordon it (if the agent cordoned it)
	// and release the slot.
	ActFinish Action = "Finish"
)

// Need says whether the host needs a reboot, and why.
type Need struct {
	Needed bool
	// Why names what said so: "sentinel file /run/reboot-required exists".
	Why string
}

// BlockerKind is what blocks a reboot.
type BlockerKind string

const (
	BlockerPod   BlockerKind = "pod"
	BlockerAlert BlockerKind = "alert"
)

// Blocker is one thing that keeps a reboot from starting.
type Blocker struct {
	Kind BlockerKind
	// Name is namespace/name for a pod, the alertname for an alert, or
	// what failed ("prometheus unreachable: ...").
	Name string
}

// LastReboot is the reboot this node made most recently.
type LastReboot struct {
	// At is when the host came back; zero when there was none.
	At time.Time
	// SentinelSurvived says the need was still there after it.
	SentinelSurvived bool
}

// Input is everything Decide looks at.
type Input struct {
	Now    time.Time
	Need   Need
	Window Window
	// Blockers are those found now (pods and alerts).
	Blockers []Blocker
	// SlotHeld says this node holds a drain slot.
	SlotHeld bool
	Phase    Phase
	Last     LastReboot
	// LoopBound is reboot.loopBound; 0 turns the loop guard off.
	LoopBound time.Duration
	// FailedAt is when the last attempt failed; zero when it did not.
	FailedAt time.Time
	// InMaintenance says the node is under a maintenance that is not this
	// reboot's.
	InMaintenance bool
	// NodeReady says the kubelet reports the Node Ready.
	NodeReady bool
	// RebootWithoutDrain is reboot.rebootWithoutDrain.
	RebootWithoutDrain bool
}

// Decision is the state to report and what to do next.
type Decision struct {
	State  State
	Detail Detail // set when State is Pending
	// Blockers are the blockers found; after the drain started they are
	// reported only (see Decide).
	Blockers []Blocker
	Action   Action
	// Message is the condition's message: one line for people.
	Message string
}

// Decide turns what the coordinator knows into the state to report and the
// next action. It is pure: the caller gathers Input and carries out the
// Action.
//
// The order of the checks before a reboot starts is the order of their cost
// to the cluster: the window and the blockers come before the slot, so that
// a node that may not reboot now never holds one of the cluster's slots.
//
// Once the drain started, the window and the blockers no longer stop it: a
// reboot under way finishes (the rule for the window), and a blocker
// found after the drain started is reported in the Decision but neither
// undoes the drain nor holds the reboot back. The drain itself raises alerts
// (pods pending elsewhere, PodDisruptionBudgets at their limit), so waiting
// on them would leave the node cordoned and the slot held for as long as
// they fire.
func Decide(in Input) Decision {
	switch in.Phase {
	case PhaseIdle, PhaseWaitingForSlot:
	case PhaseDraining:
		if !in.Need.Needed {
			// The sentinel was removed, or the request cancelled: the
			// admin's way to call a reboot off before the host goes down.
			return Decision{State: NotNeeded, Action: ActReleaseSlot,
				Message: "the host no longer needs a reboot (the sentinel went away, or the request was cancelled) while the node drained; the drain is undone and the slot given back"}
		}
		return lateBlockers(Decision{State: Draining, Message: "draining the node before the reboot"}, in.Blockers)
	case PhaseDrained:
		return lateBlockers(Decision{State: Rebooting, Action: ActReboot, Message: "drained; rebooting the host"}, in.Blockers)
	case PhaseDrainTimedOut:
		if in.RebootWithoutDrain {
			return lateBlockers(Decision{State: Rebooting, Action: ActReboot,
				Message: "the drain did not finish within drain.timeout; rebooting anyway, as reboot.rebootWithoutDrain allows"}, in.Blockers)
		}
		return Decision{State: Failed, Action: ActReleaseSlot,
			Message: fmt.Sprintf("the drain did not finish within drain.timeout, so the host was not rebooted; the drain is undone and the slot released. See the drain's Events; no new attempt before %s (reboot.loopBound) unless one is asked for (node-agent reboot request), or set reboot.rebootWithoutDrain to reboot anyway",
				in.Now.Add(in.LoopBound).UTC().Format(time.RFC3339))}
	case PhaseRebootRequested:
		return Decision{State: Rebooting, Message: "waiting for the host to reboot"}
	case PhaseBack:
		if !in.NodeReady {
			return Decision{State: Rebooting, Message: "the host rebooted; waiting for the Node to turn Ready before uncordoning it"}
		}
		if in.Need.Needed {
			back := in.Last.At
			if back.IsZero() {
				back = in.Now
			}
			return Decision{State: RebootLoop, Action: ActFinish,
				Message: fmt.Sprintf("the host rebooted, but still needs a reboot (%s); no other reboot before %s (reboot.loopBound)",
					in.Need.Why, back.Add(in.LoopBound).UTC().Format(time.RFC3339))}
		}
		return Decision{State: Done, Action: ActFinish, Message: "the host rebooted and needs no other reboot"}
	}

	// PhaseIdle: no reboot under way.
	release := ActNone
	if in.SlotHeld {
		release = ActReleaseSlot
	}
	if !in.Need.Needed {
		return Decision{State: NotNeeded, Action: release, Message: "the host needs no reboot"}
	}
	if in.LoopBound > 0 && in.Last.SentinelSurvived && !in.Last.At.IsZero() && in.Now.Before(in.Last.At.Add(in.LoopBound)) {
		return Decision{State: RebootLoop, Action: release,
			Message: fmt.Sprintf("the host still needs a reboot (%s) after the reboot at %s; no other reboot before %s (reboot.loopBound). Find what keeps the sentinel",
				in.Need.Why, in.Last.At.UTC().Format(time.RFC3339), in.Last.At.Add(in.LoopBound).UTC().Format(time.RFC3339))}
	}
	if !in.FailedAt.IsZero() && in.Now.Before(in.FailedAt.Add(in.LoopBound)) {
		return Decision{State: Failed, Action: release,
			Message: fmt.Sprintf("%s; the last attempt at %s failed (its drain did not finish within drain.timeout); no new attempt before %s (reboot.loopBound) unless one is asked for (node-agent reboot request)",
				in.Need.Why, in.FailedAt.UTC().Format(time.RFC3339), in.FailedAt.Add(in.LoopBound).UTC().Format(time.RFC3339))}
	}
	if !in.Window.Contains(in.Now) {
		return Decision{State: Pending, Detail: OutsideWindow, Action: release,
			Message: fmt.Sprintf("%s; outside the reboot window (%s)", in.Need.Why, in.Window)}
	}
	if len(in.Blockers) > 0 {
		d := Decision{State: Pending, Detail: BlockedByAlerts, Blockers: in.Blockers, Action: release}
		pods, alerts := split(in.Blockers)
		if len(pods) > 0 {
			d.Detail = BlockedByPods
		}
		d.Message = in.Need.Why + "; " + blockedBy(pods, alerts)
		return d
	}
	if in.InMaintenance {
		return Decision{State: Pending, Detail: InMaintenance, Action: release,
			Message: fmt.Sprintf("%s; the node is under a maintenance asked for otherwise (annotation or NodeMaintenance); the reboot waits until it ends", in.Need.Why)}
	}
	if !in.SlotHeld {
		return Decision{State: Pending, Detail: WaitingForSlot, Action: ActTakeSlot,
			Message: fmt.Sprintf("%s; waiting for a drain slot (drain.maxConcurrentNodes)", in.Need.Why)}
	}
	return Decision{State: Draining, Action: ActStartDrain, Message: fmt.Sprintf("%s; draining the node before the reboot", in.Need.Why)}
}

// lateBlockers reports blockers found after the drain started, without
// changing the decision.
func lateBlockers(d Decision, bs []Blocker) Decision {
	if len(bs) == 0 {
		return d
	}
	d.Blockers = bs
	pods, alerts := split(bs)
	d.Message += "; " + blockedBy(pods, alerts) + " since the drain started, which does not stop it"
	return d
}

func split(bs []Blocker) (pods, alerts []string) {
	for _, b := range bs {
		if b.Kind == BlockerPod {
			pods = append(pods, b.Name)
		} else {
			alerts = append(alerts, b.Name)
		}
	}
	return pods, alerts
}

func blockedBy(pods, alerts []string) string {
	var parts []string
	if len(pods) > 0 {
		parts = append(parts, "pods "+names(pods))
	}
	if len(alerts) > 0 {
		parts = append(parts, "alerts "+names(alerts))
	}
	return "blocked by " + strings.Join(parts, " and ")
}

// maxNames bounds the names in a condition message, which people read and
// the apiserver stores on every change.
const maxNames = 5

func names(ns []string) string {
	if len(ns) <= maxNames {
		return strings.Join(ns, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ns[:maxNames], ", "), len(ns)-maxNames)
}
