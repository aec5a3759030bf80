package reboot

import (
	"fmt"
	"strings"
	"time"

	"github.com/node-agent/node-agent/pkg/reboot/policy"
	corev1 "k8s.io/api/core/v1"
)

// The values of Decision.BoundExceeded: what was decided once
// reboot.blockerBound ran out.
const (
	BoundWait    = "wait"
	BoundProceed = "proceed"
)

// Decision is the state to report, the condition, and what to do next.
type Decision struct {
	State  State
	Detail Detail // set when State is Pending
	// Blockers are the blockers found; after the drain started they are
	// reported only, except a gate with beforeReboot, which holds a drained
	// node's reboot (see Decide).
	Blockers []Blocker
	Action   Action
	// Message is the condition's message: one line for people.
	Message string
	// Status is the condition's status: True while a reboot is needed or
	// under way, False when none is (NotNeeded, Done), Unknown while the
	// need cannot be found out.
	Status corev1.ConditionStatus
	// Last and Failure are what the record keeps of the last reboot and
	// the last failed attempt after this decision.
	Last    LastReboot
	Failure Failure
	// AnswerRequest: remove the RequestAnnotation, which the reboot made
	// (ActFinish) or the failed attempt (ActGiveUp) answered.
	AnswerRequest bool
	// BlockedSince is what the record keeps of Input.BlockedSince: when
	// the blockers first held this reboot; zero once they are found gone
	// or nothing is needed. It is kept while they are not looked at (an
	// idle node outside its window, a reboot under way), so that a window
	// that closes every night does not start the bound afresh.
	BlockedSince time.Time
	// BoundExceeded is BoundWait or BoundProceed while blockers hold the
	// reboot past reboot.blockerBound; "" otherwise.
	BoundExceeded string
}

// Decide turns what the coordinator knows into the state to report, the
// condition, and the next action. It is pure: the coordinator gathers the
// Input, carries the Action out and records the Decision, as a
// controller-runtime Reconcile returns a Result for the queue to act on.
//
// The order of the checks before a reboot starts is the order of their cost
// to the cluster: the window and the blockers come before the slot, so that
// a node that may not reboot now never holds one of the cluster's slots.
//
// Once the drain started, the window no longer stops the reboot (it bounds
// when a reboot starts, not when it ends), and neither does reboot.blockerBound.
// A pod, an alert or a VM found after the drain started, and a gate without
// beforeReboot, is reported in the Decision but neither undoes the drain nor
// holds the reboot back: the drain itself raises alerts (pods pending
// elsewhere, PodDisruptionBudgets at their limit), so waiting on them would
// leave the node cordoned and the slot held for as long as they fire. The
// one exception is a gate of reboot.gates with beforeReboot, asked again once
// the node is drained: while it holds, the drained node waits, cordoned and
// holding its slot, up to reboot.beforeRebootBound after the drain finished
// (with no bound when that is 0). Past the bound the attempt is given up as
// a drain past drain.timeout is (DrainFailed, ActGiveUp): the drain is
// withdrawn, the slot released and the next attempt waits for
// DrainFailedBackoff.
func Decide(in Input) Decision {
	d := decide(in)
	if !in.idle() {
		d.BlockedSince = in.BlockedSince
	}
	d = takeSlotBack(in, d)
	if d.Status == "" {
		d.Status = corev1.ConditionTrue
		if d.State == NotNeeded || d.State == Done {
			d.Status = corev1.ConditionFalse
		}
	}
	if d.Status == corev1.ConditionFalse {
		d.BlockedSince = time.Time{}
	}
	if d.State == NotNeeded && d.Status == corev1.ConditionFalse && (in.Previous == Done || in.Previous == DrainFailed) && in.PreviousMessage != "" {
		// Nothing is needed now; keep saying how the last attempt ended.
		d.State, d.Message = in.Previous, in.PreviousMessage
	}
	if d.State == Pending && d.Detail == WaitingForSlot && in.SlotQueue != "" {
		d.Message += "; the coordinator's answer: " + in.SlotQueue
	}
	if d.State == Pending && d.Detail == WaitingForSlot && in.SlotErr != nil {
		d.Message += "; cannot take a slot: " + in.SlotErr.Error()
	}
	return d
}

// decide is Decide by phase, before what every phase shares.
func decide(in Input) Decision {
	need, known := in.need()
	// with keeps the record's last reboot and failure as they are.
	with := func(d Decision) Decision {
		d.Last, d.Failure = in.Last, in.Failure
		return d
	}
	switch in.Phase {
	case PhaseIdle, PhaseWaitingForSlot:
		return decideIdle(in, need, known)
	case PhaseDraining:
		if !need.Needed {
			// The sentinel was removed, or the request cancelled: the
			// admin's way to call a reboot off before the host goes down.
			return with(Decision{State: NotNeeded, Action: ActCancelDrain,
				Message: "the host no longer needs a reboot (the sentinel went away, or the request was cancelled) while the node drained; the drain is undone and the slot given back"})
		}
		return with(lateBlockers(Decision{State: Draining, Message: "draining the node before the reboot"}, in.Blockers))
	case PhaseDrained:
		if held := beforeReboot(in.Blockers); len(held) > 0 {
			return heldBeforeReboot(in, held)
		}
		return with(lateBlockers(Decision{State: Rebooting, Action: ActReboot, Message: "drained; rebooting the host"}, in.Blockers))
	case PhaseDrainTimedOut:
		if in.RebootWithoutDrain {
			return with(lateBlockers(Decision{State: Rebooting, Action: ActReboot,
				Message: "the drain did not finish within drain.timeout; rebooting anyway, as reboot.rebootWithoutDrain allows"}, in.Blockers))
		}
		return giveUp(in, func(f Failure) string {
			return fmt.Sprintf("the drain did not finish within drain.timeout, so the host was not rebooted; the drain is withdrawn and the slot released. See the drain's Events and the UnderMaintenance condition; %s, or set reboot.rebootWithoutDrain to reboot anyway",
				retryLine(f))
		})
	case PhaseRebootRequested:
		if !in.RequestedAt.IsZero() && in.RetryReboot > 0 && !in.Now.Before(in.RequestedAt.Add(in.RetryReboot)) {
			// The host did not go down: logind refused, or a shutdown
			// was cancelled. Ask again, as often as RetryReboot.
			return with(Decision{State: Rebooting, Action: ActReboot,
				Message: fmt.Sprintf("the host did not reboot within %s of asking; asking logind again", in.RetryReboot)})
		}
		return with(Decision{State: Rebooting, Message: "waiting for the host to reboot"})
	case PhaseBack:
		if !in.NodeReady {
			return with(Decision{State: Rebooting, Message: "the host rebooted; waiting for the Node to turn Ready before uncordoning it"})
		}
		if in.Maintenance.Active {
			// The drain is undone before the slot goes, so that the
			// next node never drains while this one is still cordoned.
			act := ActNone
			if in.Drain {
				act = ActUndoDrain
			}
			return with(Decision{State: Rebooting, Action: act, Message: "the host rebooted; undoing the drain (uncordon, drain taint) before giving the slot back"})
		}
		d := Decision{State: Done, Action: ActFinish, Message: "the host rebooted and needs no other reboot",
			Last: LastReboot{At: in.Last.At, SentinelSurvived: need.Needed}, Failure: Failure{}}
		if need.Needed {
			back := in.Last.At
			if back.IsZero() {
				back = in.Now
			}
			d.State = RebootLoop
			d.Message = fmt.Sprintf("the host rebooted, but still needs a reboot (%s); no other reboot before %s (reboot.loopBound)",
				need.Why, back.Add(in.LoopBound).UTC().Format(time.RFC3339))
		}
		// The reboot answers the request.
		d.AnswerRequest = in.Request != ""
		return d
	}
	return with(Decision{State: in.Previous, Message: fmt.Sprintf("unknown phase %q", in.Phase)})
}

// giveUp ends a failed attempt: the drain withdrawn, the slot released, the
// failure recorded with its backoff, and the request answered. message
// says why, given the failure.
func giveUp(in Input, message func(Failure) string) Decision {
	n := in.Failure.Count + 1
	f := Failure{At: in.Now, Count: n, RetryAt: in.Now.Add(DrainFailedBackoff(in.CheckInterval, n))}
	d := Decision{State: DrainFailed, Action: ActGiveUp, Last: in.Last, Failure: f, Message: message(f)}
	if in.Request != "" {
		// The failed attempt answers the request: asking again is a
		// new request, and starts at once.
		d.AnswerRequest, d.Failure.Request = true, in.Request
	}
	return d
}

// beforeReboot are the blockers that hold a drained node's reboot.
func beforeReboot(bs []Blocker) []string {
	var out []string
	for _, b := range bs {
		if b.BeforeReboot {
			out = append(out, b.Name)
		}
	}
	return out
}

// heldBeforeReboot decides for a drained node whose gates asked again
// before the reboot hold: it waits, cordoned and holding its slot, up to
// BeforeRebootBound after the drain finished; past it the attempt is given
// up, so that a gate that stays shut never keeps a node out of service and
// the cluster's slot held.
func heldBeforeReboot(in Input, held []string) Decision {
	since := in.DrainedAt
	if since.IsZero() {
		since = in.Now
	}
	gates := strings.Join(held, "; ")
	if in.BeforeRebootBound > 0 && !in.Now.Before(since.Add(in.BeforeRebootBound)) {
		return giveUp(in, func(f Failure) string {
			return fmt.Sprintf("the node drained, but gates asked again before the reboot still held %s later (reboot.beforeRebootBound): %s; the host was not rebooted, the drain is withdrawn and the slot released; %s",
				formatDuration(in.BeforeRebootBound), gates, retryLine(f))
		})
	}
	d := Decision{State: Pending, Detail: BlockedByGates, Last: in.Last, Failure: in.Failure, Blockers: in.Blockers,
		Message: "drained; the reboot waits for gates asked again before it: " + gates}
	if in.BeforeRebootBound > 0 {
		d.Message += fmt.Sprintf("; given up at %s (reboot.beforeRebootBound)", since.Add(in.BeforeRebootBound).UTC().Format(time.RFC3339))
	}
	return d
}

// decideIdle decides before a reboot starts.
func decideIdle(in Input, need Need, known bool) Decision {
	failure := in.Failure
	if in.Request != "" && !in.answered() {
		// A new request asks anew after a failure.
		failure = Failure{}
	}
	d := Decision{Last: in.Last, Failure: failure, Action: release(in), BlockedSince: in.BlockedSince}
	if in.answered() {
		// Still there: its removal did not reach the Node, or the cache
		// is behind. Removing it again changes nothing in the latter case.
		d.AnswerRequest = true
	}
	set := func(s State, detail Detail, msg string) Decision {
		d.State, d.Detail, d.Message = s, detail, msg
		return d
	}
	if !known {
		// The state found last stands; the reason says it is unknown.
		prev := in.Previous
		if prev == "" {
			prev = NotNeeded
		}
		d.Status = corev1.ConditionUnknown
		return set(prev, "", "cannot tell whether the host needs a reboot: "+in.NeedErr.Error())
	}
	if !need.Needed {
		d.BlockedSince = time.Time{}
		return set(NotNeeded, "", "the host needs no reboot")
	}
	if in.LoopBound > 0 && in.Last.SentinelSurvived && !in.Last.At.IsZero() && in.Now.Before(in.Last.At.Add(in.LoopBound)) {
		return set(RebootLoop, "", fmt.Sprintf("the host still needs a reboot (%s) after the reboot at %s; no other reboot before %s (reboot.loopBound). Find what keeps the sentinel",
			need.Why, in.Last.At.UTC().Format(time.RFC3339), in.Last.At.Add(in.LoopBound).UTC().Format(time.RFC3339)))
	}
	if !failure.At.IsZero() {
		failure = failure.bounded(in.Now, in.CheckInterval)
		d.Failure = failure
		if in.Now.Before(failure.RetryAt) {
			return set(DrainFailed, "", fmt.Sprintf("%s; the drain of the last attempt, at %s, did not finish within drain.timeout; %s",
				need.Why, failure.At.UTC().Format(time.RFC3339), retryLine(failure)))
		}
	}
	if !in.Window.Contains(in.Now) {
		next := "none within " + fmt.Sprint(policy.MaxLookAhead/(24*time.Hour)) + " days"
		if at, ok := in.Window.Next(in.Now); ok {
			next = at.UTC().Format(time.RFC3339)
		}
		return set(Pending, OutsideWindow, fmt.Sprintf("%s; outside the reboot window (%s); it opens next at %s", need.Why, in.Window, next))
	}
	// passed says which blockers were passed over, past the bound.
	var passed string
	if len(in.Blockers) > 0 {
		pods, alerts, gates, vms := split(in.Blockers)
		detail := BlockedByGates
		switch {
		case len(pods) > 0:
			detail = BlockedByPods
		case len(alerts) > 0:
			detail = BlockedByAlerts
		case len(vms) > 0:
			detail = BlockedByVMs
		}
		d.Blockers = in.Blockers
		since := in.BlockedSince
		if since.IsZero() || since.After(in.Now) {
			// A time in the future (a clock set back, a hand-written
			// record) counts as now: no value on the Node stretches the
			// bound.
			since = in.Now
		}
		d.BlockedSince = since
		held := need.Why + "; " + blockedBy(pods, alerts, gates, vms)
		if in.BlockerBound <= 0 || in.Now.Before(since.Add(in.BlockerBound)) {
			return set(Pending, detail, held)
		}
		past := fmt.Sprintf("since %s, past reboot.blockerBound (%s)", since.UTC().Format(time.RFC3339), formatDuration(in.BlockerBound))
		if !in.ProceedPastBound {
			d.BoundExceeded = BoundWait
			return set(Pending, detail, held+" "+past+"; the reboot keeps waiting, as reboot.onBlockerBound=wait says: remove what holds it, or set reboot.onBlockerBound to proceed")
		}
		d.BoundExceeded = BoundProceed
		passed = "; " + blockedBy(pods, alerts, gates, vms) + " " + past + ", passed over as reboot.onBlockerBound=proceed says"
	} else {
		d.BlockedSince = time.Time{}
	}
	if in.Maintenance.Other {
		return set(Pending, InMaintenance, fmt.Sprintf("%s; the node is under a maintenance asked for otherwise (annotation or NodeMaintenance); the reboot waits until it ends%s", need.Why, passed))
	}
	if !in.SlotHeld {
		d.Action = ActTakeSlot
		return set(Pending, WaitingForSlot, fmt.Sprintf("%s; waiting for a drain slot (slots.limit)%s", need.Why, passed))
	}
	d.Action = ActStartDrain
	return set(Draining, "", fmt.Sprintf("%s; draining the node before the reboot%s", need.Why, passed))
}

// release is the action of an idle coordinator that may not start a
// reboot now: give back the slot it holds or waits for, but only once the
// drain of a reboot called off is undone; until then the slot stays held,
// so that no other node drains while this one is still cordoned.
func release(in Input) Action {
	switch {
	case in.SlotHeld && in.Maintenance.Active:
		return ActNone
	case in.SlotHeld, in.SlotWaiting, in.Phase == PhaseWaitingForSlot:
		return ActReleaseSlot
	}
	return ActNone
}

// takeSlotBack makes a coordinator whose record holds a slot that this
// process does not hold (the agent restarted, or the host rebooted) take it
// back first: to hold it while the drain runs, to keep it across the reboot
// (ActReboot needs it), and to give it back when the reboot ends rather than
// leave it to expire. Undoing and finishing go on while it is waited for;
// calling the reboot off (ActCancelDrain, ActGiveUp) needs no slot at all.
func takeSlotBack(in Input, d Decision) Decision {
	if in.SlotHeld || in.idle() || d.Action == ActCancelDrain || d.Action == ActGiveUp {
		return d
	}
	switch {
	case !in.SlotWaiting:
		d.Action = ActTakeSlotBack
	case d.Action == ActReboot:
		d.Action = ActNone
	default:
		return d
	}
	d.Message += "; taking back the drain slot this node held before the agent restarted"
	return d
}
