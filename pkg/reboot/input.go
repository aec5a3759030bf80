package reboot

import (
	"fmt"
	"time"

	"github.com/node-agent/node-agent/pkg/gates"
)

// Need says whether the host needs a reboot, and why.
type Need struct {
	Needed bool
	// Why names what said so: "sentinel file /run/reboot-required exists".
	Why string
}

// Blocker is one thing that keeps a reboot from starting: pkg/gates'
// type, which the maintenance gates answer with too.
type Blocker = gates.Blocker

// BlockerKind is what blocks a reboot (gates.BlockerKind).
type BlockerKind = gates.BlockerKind

// The kinds of blocker.
const (
	BlockerPod   = gates.BlockerPod
	BlockerAlert = gates.BlockerAlert
	BlockerGate  = gates.BlockerGate
	BlockerVM    = gates.BlockerVM
)

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
	// waits for one; SlotQueue what the coordinator answered its queued
	// request (the full pool, the holders ahead, its place), and SlotErr
	// why taking one fails meanwhile.
	SlotHeld    bool
	SlotWaiting bool
	SlotQueue   string
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
