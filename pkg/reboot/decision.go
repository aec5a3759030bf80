package reboot

import (
	"fmt"
	"strings"
	"time"

	"github.com/node-agent/node-agent/pkg/reboot/policy"
	corev1 "k8s.io/api/core/v1"
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

// DrainFailedBackoffCap bounds the wait after failed drains: a day, as
// reboot.loopBound's default, so that a node whose drain never finishes (a
// PodDisruptionBudget that allows nothing, a VM that cannot migrate) tries
// at most once a day, and each try costs the cluster one drain.timeout of a
// slot.
const DrainFailedBackoffCap = 24 * time.Hour

// DrainFailedBackoff is how long after the n-th failed drain in a row the
// next attempt waits: base (reboot.checkInterval) doubled n-1 times, at most
// DrainFailedBackoffCap. With the default minute: 1m, 2m, 4m, ... 17h04m,
// then a day. The count is kept on the Node (Record.DrainFailures), so a
// restart does not shorten the wait; it starts again from base after a
// reboot that was made, or when an admin asks again.
func DrainFailedBackoff(base time.Duration, n int) time.Duration {
	if base <= 0 {
		base = time.Minute
	}
	d := base
	for i := 1; i < n && d < DrainFailedBackoffCap; i++ {
		d *= 2
	}
	return min(d, DrainFailedBackoffCap)
}

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
	BlockerGate  BlockerKind = "gate"
	// BlockerVM: a KubeVirt VM on the node cannot leave it by live
	// migration (drain.vmWithoutTarget wait); its name says which and why.
	BlockerVM BlockerKind = "vm"
)

// Blocker is one thing that keeps a reboot from starting.
type Blocker struct {
	Kind BlockerKind
	// Name is namespace/name for a pod, the alertname for an alert, or
	// what failed ("prometheus unreachable: ...").
	Name string
	// BeforeReboot marks a gate's blocker that holds the reboot after the
	// drain too (reboot.gates' beforeReboot): the drained node waits for
	// it, up to Input.BeforeRebootBound.
	BeforeReboot bool
}

// LastReboot is the reboot this node made most recently.
type LastReboot struct {
	// At is when the host came back; zero when there was none.
	At time.Time
	// SentinelSurvived says the need was still there after it.
	SentinelSurvived bool
}

// Failure is the last attempt that failed: its drain did not finish within
// drain.timeout.
type Failure struct {
	// At is when it failed; zero when none did.
	At time.Time
	// Count is the number of attempts in a row that failed so.
	Count int
	// RetryAt is when the next attempt may start (DrainFailedBackoff).
	RetryAt time.Time
	// Request is the RequestAnnotation value the failed attempt answered
	// (and removed); the same value seen again is that request, not a new
	// one.
	Request string
}

// Input is everything Decide looks at: the record as the coordinator
// observed it (Phase, Drain, ...), what the world says now (the need, the
// blockers, the slot, the drain), and the settings.
type Input struct {
	Now time.Time
	// Need is what the sentinel says. NeedErr, when not nil, says it
	// could not be found out; Need is then not looked at.
	Need    Need
	NeedErr error
	// Request is the RequestAnnotation's reason (ParseRequest); "" when
	// none, or when its value is refused: RequestRefused then.
	Request        string
	RequestRefused bool
	Window         Window
	// Blockers are those found now (pods and alerts); see
	// Input.WantsBlockers.
	Blockers []Blocker
	// SlotHeld says this process holds a drain slot; SlotWaiting that it
	// waits for one; SlotErr why taking one fails meanwhile.
	SlotHeld    bool
	SlotWaiting bool
	SlotErr     error

	// Phase is how far the reboot has gone, Drain whether the record asks
	// for the drain, RequestedAt when logind was asked (zero: not asked).
	Phase       Phase
	Drain       bool
	RequestedAt time.Time
	Last        LastReboot
	Failure     Failure
	// Previous and PreviousMessage are the state and message the record
	// reports now: how the last attempt ended, while nothing is needed.
	Previous        State
	PreviousMessage string

	// Maintenance is what pkg/selfdrain's record on the Node says.
	Maintenance Maintenance
	// NodeReady says the kubelet reports the Node Ready.
	NodeReady bool

	// LoopBound is reboot.loopBound; 0 turns the loop guard off.
	LoopBound time.Duration
	// RebootWithoutDrain is reboot.rebootWithoutDrain.
	RebootWithoutDrain bool
	// RetryReboot is how long after asking logind a host that has not
	// rebooted is asked again.
	RetryReboot time.Duration
	// CheckInterval is reboot.checkInterval, the first wait after a failed
	// drain (DrainFailedBackoff).
	CheckInterval time.Duration
	// DrainedAt is when the drain finished (PhaseDrained); zero otherwise.
	DrainedAt time.Time
	// BeforeRebootBound is reboot.beforeRebootBound: how long a drained
	// node waits for the gates asked again before the reboot; past it the
	// attempt is given up as a drain past drain.timeout is.
	BeforeRebootBound time.Duration
	// BlockedSince is when the blockers first held this reboot (the
	// record's); zero when they do not hold it now.
	BlockedSince time.Time
	// BlockerBound is reboot.blockerBound: how long blockers may hold a
	// needed reboot from BlockedSince; 0 holds it as long as they do.
	// ProceedPastBound is reboot.onBlockerBound=proceed: past the bound
	// the blockers are passed over; otherwise the reboot keeps waiting and
	// says so.
	BlockerBound     time.Duration
	ProceedPastBound bool
}

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
	// reported only (see Decide).
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

// WantsBlockers says whether the blockers are looked for: only while they
// can hold a reboot back or are reported (before the reboot, and while
// draining). Asking Prometheus or the apiserver at other times costs them
// and tells nobody anything.
func (in Input) WantsBlockers() bool {
	need, _ := in.need()
	switch in.Phase {
	case PhaseIdle, PhaseWaitingForSlot, PhaseDraining, PhaseDrained:
		return need.Needed
	}
	return false
}

// idle says no reboot is under way: nothing is asked of selfdrain or the
// host. WaitingForSlot is idle: everything that may keep a reboot from
// starting is checked again while it waits.
func (in Input) idle() bool { return in.Phase == PhaseIdle || in.Phase == PhaseWaitingForSlot }

// answered says the request is the one the last failed attempt answered.
func (in Input) answered() bool { return in.Request != "" && in.Request == in.Failure.Request }

// need is the need Decide goes by, and whether it is known. A request
// counts until the reboot it asked for happened (PhaseBack: after it only
// the sentinel counts, or the request would count as a sentinel that
// survived the reboot). Past the start, a need that cannot be checked is
// taken as still there: only a need seen gone calls a reboot off. So is a
// request whose value is refused: it changes nothing, neither starting a
// reboot nor calling one off ("false" is not how a request is withdrawn).
func (in Input) need() (Need, bool) {
	if in.Request != "" && !in.answered() && in.Phase != PhaseBack {
		return Need{Needed: true, Why: fmt.Sprintf("reboot requested (%s: %s)", RequestAnnotation, in.Request)}, true
	}
	sentinel := in.NeedErr == nil && in.Need.Needed
	if in.RequestRefused && !in.idle() && in.Phase != PhaseBack && !sentinel {
		return Need{Needed: true, Why: fmt.Sprintf("the reboot under way goes on: the value of %s is refused, and changes nothing; remove the annotation to call the reboot off", RequestAnnotation)}, true
	}
	if in.NeedErr == nil {
		return in.Need, true
	}
	if in.idle() {
		return Need{}, false
	}
	return Need{Needed: true, Why: "the need cannot be checked now (" + in.NeedErr.Error() + ")"}, true
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
// Once the drain started, the window and the blockers no longer stop it: a
// reboot under way finishes (the window bounds when a reboot starts, not
// when it ends), and a blocker found after the drain started is reported in
// the Decision but neither undoes the drain nor holds the reboot back. The drain itself raises alerts
// (pods pending elsewhere, PodDisruptionBudgets at their limit), so waiting
// on them would leave the node cordoned and the slot held for as long as
// they fire.
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
		return set(Pending, WaitingForSlot, fmt.Sprintf("%s; waiting for a drain slot (drain.maxConcurrentNodes)%s", need.Why, passed))
	}
	d.Action = ActStartDrain
	return set(Draining, "", fmt.Sprintf("%s; draining the node before the reboot%s", need.Why, passed))
}

// bounded is f with a RetryAt that DrainFailedBackoff allows: a record
// from before the backoff gets one, a failure recorded in the future (a
// clock set back, a hand-written record) counts as now, and no RetryAt lies
// more than DrainFailedBackoffCap after the failure. No value on the Node
// holds a reboot back for longer than the cap.
func (f Failure) bounded(now time.Time, base time.Duration) Failure {
	f.At = minTime(f.At, now)
	latest := f.At.Add(DrainFailedBackoffCap)
	if f.RetryAt.IsZero() {
		f.RetryAt = f.At.Add(DrainFailedBackoff(base, max(f.Count, 1)))
	}
	f.RetryAt = minTime(f.RetryAt, latest)
	return f
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// retryLine says when the attempt after failure starts.
func retryLine(f Failure) string {
	times := "once"
	if f.Count > 1 {
		times = fmt.Sprintf("%d times in a row", f.Count)
	}
	return fmt.Sprintf("the drain failed %s; no new attempt before %s (the wait doubles from reboot.checkInterval up to %s) unless one is asked for (node-agent reboot request)",
		times, f.RetryAt.UTC().Format(time.RFC3339), formatDuration(DrainFailedBackoffCap))
}

// formatDuration is d without the zero units time.Duration prints (24h,
// not 24h0m0s).
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
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

// lateBlockers reports blockers found after the drain started, without
// changing the decision.
func lateBlockers(d Decision, bs []Blocker) Decision {
	if len(bs) == 0 {
		return d
	}
	d.Blockers = bs
	pods, alerts, gates, vms := split(bs)
	d.Message += "; " + blockedBy(pods, alerts, gates, vms) + " since the drain started, which does not stop it"
	return d
}

func split(bs []Blocker) (pods, alerts, gates, vms []string) {
	for _, b := range bs {
		switch b.Kind {
		case BlockerPod:
			pods = append(pods, b.Name)
		case BlockerGate:
			gates = append(gates, b.Name)
		case BlockerVM:
			vms = append(vms, b.Name)
		default:
			alerts = append(alerts, b.Name)
		}
	}
	return pods, alerts, gates, vms
}

func blockedBy(pods, alerts, gates, vms []string) string {
	var parts []string
	if len(pods) > 0 {
		parts = append(parts, "pods "+names(pods))
	}
	if len(alerts) > 0 {
		parts = append(parts, "alerts "+names(alerts))
	}
	if len(gates) > 0 {
		parts = append(parts, "gates "+strings.Join(gates, "; "))
	}
	if len(vms) > 0 {
		parts = append(parts, "VMs that cannot leave by live migration "+strings.Join(vms, "; "))
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
