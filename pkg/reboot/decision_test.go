package reboot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func mustWindow(t *testing.T, days []string, start, end, tz string) Window {
	t.Helper()
	w, err := ParseWindow(days, start, end, tz)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestDecide(t *testing.T) {
	// Tuesday 2026-11-24, 03:00 UTC; the window is 02:00-04:00 every day.
	now := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	night := mustWindow(t, nil, "02:00", "04:00", "UTC")
	weekend := mustWindow(t, []string{"sat", "sun"}, "02:00", "04:00", "UTC")
	need := Need{Needed: true, Why: "sentinel file /run/reboot-required exists"}
	pod := Blocker{Kind: BlockerPod, Name: "db/postgres-0"}
	alert := Blocker{Kind: BlockerAlert, Name: "EtcdMembersDown"}
	down := Blocker{Kind: BlockerAlert, Name: "prometheus unreachable: connection refused"}

	base := Input{Now: now, Need: need, Window: night, LoopBound: 24 * time.Hour, CheckInterval: time.Minute, NodeReady: true}
	with := func(f func(*Input)) Input { in := base; f(&in); return in }

	// at is an input in a phase past the start: the record asks for the
	// drain and this process holds the slot.
	at := func(phase Phase, f func(*Input)) Input {
		in := base
		in.Phase, in.Drain, in.SlotHeld = phase, true, true
		if f != nil {
			f(&in)
		}
		return in
	}
	requested := now.Add(-time.Minute)

	tests := []struct {
		name        string
		in          Input
		state       State
		detail      Detail
		action      Action
		status      corev1.ConditionStatus // "" means True
		answer      bool                   // AnswerRequest
		msgContains []string
	}{
		{name: "not needed", in: with(func(in *Input) { in.Need = Need{} }), state: NotNeeded, status: corev1.ConditionFalse},
		{name: "not needed gives back a slot it holds", in: with(func(in *Input) { in.Need = Need{}; in.SlotHeld = true }), state: NotNeeded, action: ActReleaseSlot, status: corev1.ConditionFalse},
		{name: "not needed stops waiting for a slot", in: with(func(in *Input) { in.Need = Need{}; in.SlotWaiting = true; in.Phase = PhaseWaitingForSlot }), state: NotNeeded, action: ActReleaseSlot, status: corev1.ConditionFalse},
		{name: "not needed after a reboot: say how it ended", in: with(func(in *Input) { in.Need = Need{}; in.Previous, in.PreviousMessage = Done, "the host rebooted" }), state: Done, status: corev1.ConditionFalse, msgContains: []string{"the host rebooted"}},
		{name: "called off, drain not undone yet: the slot stays", in: with(func(in *Input) { in.Need = Need{}; in.SlotHeld = true; in.Maintenance = Maintenance{Active: true} }), state: NotNeeded, status: corev1.ConditionFalse},
		{name: "called off, drain undone: the slot goes", in: with(func(in *Input) { in.Need = Need{}; in.SlotHeld = true }), state: NotNeeded, action: ActReleaseSlot, status: corev1.ConditionFalse},
		{name: "needed, clear, no slot: take one", in: base, state: Pending, detail: WaitingForSlot, action: ActTakeSlot, msgContains: []string{"/run/reboot-required", "drain slot"}},
		{name: "waiting for a slot says what the coordinator answered", in: with(func(in *Input) {
			in.SlotWaiting = true
			in.SlotQueue = "pool default: 1 of 1 nodes drain (limit); slots held by node-1 since 2026-11-29T02:23:33Z; place 1 in the queue of pool default"
		}), state: Pending, detail: WaitingForSlot, action: ActTakeSlot, msgContains: []string{"waiting for a drain slot (slots.limit)", "the coordinator's answer: pool default: 1 of 1 nodes drain (limit); slots held by node-1 since"}},
		{name: "waiting for a slot says why it cannot take one", in: with(func(in *Input) { in.SlotWaiting = true; in.SlotErr = errors.New("namespace node-agent not found") }), state: Pending, detail: WaitingForSlot, action: ActTakeSlot, msgContains: []string{"cannot take a slot: namespace node-agent not found"}},
		{name: "needed, clear, slot held: drain", in: with(func(in *Input) { in.SlotHeld = true }), state: Draining, action: ActStartDrain},
		{name: "outside the window", in: with(func(in *Input) { in.Window = weekend }), state: Pending, detail: OutsideWindow, msgContains: []string{"sat,sun 02:00-04:00 UTC"}},
		{name: "outside the window gives the slot back", in: with(func(in *Input) { in.Window = weekend; in.SlotHeld = true }), state: Pending, detail: OutsideWindow, action: ActReleaseSlot},
		{name: "window before blockers", in: with(func(in *Input) { in.Window = weekend; in.Blockers = []Blocker{pod} }), state: Pending, detail: OutsideWindow},
		{name: "blocked by a pod", in: with(func(in *Input) { in.Blockers = []Blocker{pod} }), state: Pending, detail: BlockedByPods, msgContains: []string{"blocked by pods db/postgres-0"}},
		{name: "blocked by an alert", in: with(func(in *Input) { in.Blockers = []Blocker{alert} }), state: Pending, detail: BlockedByAlerts, msgContains: []string{"blocked by alerts EtcdMembersDown"}},
		{name: "blocked by both: pods first, both named", in: with(func(in *Input) { in.Blockers = []Blocker{alert, pod} }), state: Pending, detail: BlockedByPods, msgContains: []string{"pods db/postgres-0 and alerts EtcdMembersDown"}},
		{name: "blocked by a gate", in: with(func(in *Input) {
			in.Blockers = []Blocker{{Kind: BlockerGate, Name: `ceph-healthy (ceph_health_status > 0) has 1 series: {} 1`}}
		}), state: Pending, detail: BlockedByGates, msgContains: []string{"blocked by gates ceph-healthy (ceph_health_status > 0) has 1 series"}},
		{name: "an alert and a gate: the alert names the reason", in: with(func(in *Input) {
			in.Blockers = []Blocker{alert, {Kind: BlockerGate, Name: "g (q) has 1 series: {} 1"}}
		}), state: Pending, detail: BlockedByAlerts, msgContains: []string{"blocked by alerts EtcdMembersDown and gates g (q)"}},
		{name: "blocked by a VM that cannot leave", in: with(func(in *Input) {
			in.Blockers = []Blocker{{Kind: BlockerVM, Name: "vms/db (no-target: no other schedulable node has x=true)"}}
		}), state: Pending, detail: BlockedByVMs, msgContains: []string{"blocked by VMs that cannot leave by live migration vms/db (no-target"}},
		{name: "prometheus unreachable blocks", in: with(func(in *Input) { in.Blockers = []Blocker{down} }), state: Pending, detail: BlockedByAlerts, msgContains: []string{"prometheus unreachable"}},
		{name: "blocked with a slot gives it back", in: with(func(in *Input) { in.Blockers = []Blocker{pod}; in.SlotHeld = true }), state: Pending, detail: BlockedByPods, action: ActReleaseSlot},
		{name: "blockers before the slot", in: with(func(in *Input) { in.Blockers = []Blocker{pod} }), state: Pending, detail: BlockedByPods},

		// The need: the sentinel, a request, or unknown.
		{name: "request without a sentinel", in: with(func(in *Input) { in.Need = Need{}; in.Request = "kernel 6.12" }), state: Pending, detail: WaitingForSlot, action: ActTakeSlot, msgContains: []string{"reboot requested (node-agent.io/reboot: kernel 6.12)"}},
		{name: "request wins over an unknown need", in: with(func(in *Input) { in.NeedErr = errors.New("no bus"); in.Request = "kernel 6.12" }), state: Pending, detail: WaitingForSlot, action: ActTakeSlot},
		{name: "need unknown: the last state stands, status Unknown", in: with(func(in *Input) { in.NeedErr = errors.New("no bus"); in.Previous = Pending }), state: Pending, status: corev1.ConditionUnknown, msgContains: []string{"cannot tell", "no bus"}},
		{name: "need unknown gives the slot back", in: with(func(in *Input) { in.NeedErr = errors.New("no bus"); in.SlotHeld = true }), state: NotNeeded, action: ActReleaseSlot, status: corev1.ConditionUnknown},
		{name: "need unknown while draining: the drain goes on", in: at(PhaseDraining, func(in *Input) { in.NeedErr = errors.New("no bus") }), state: Draining},

		// A refused request (node-agent.io/reboot=false) changes nothing:
		// it neither starts a reboot nor calls one off.
		{name: "refused request asks for nothing", in: with(func(in *Input) { in.Need = Need{}; in.RequestRefused = true }), state: NotNeeded, status: corev1.ConditionFalse},
		{name: "refused request beside the sentinel: the sentinel asks", in: with(func(in *Input) { in.RequestRefused = true }), state: Pending, detail: WaitingForSlot, action: ActTakeSlot, msgContains: []string{"/run/reboot-required"}},
		{name: "refused request while draining: the drain goes on", in: at(PhaseDraining, func(in *Input) { in.Need = Need{}; in.RequestRefused = true }), state: Draining},
		{name: "refused request after the reboot: done", in: at(PhaseBack, func(in *Input) { in.Need = Need{}; in.RequestRefused = true }), state: Done, action: ActFinish, status: corev1.ConditionFalse},

		// Once the drain started, it finishes.
		{name: "draining", in: at(PhaseDraining, nil), state: Draining},
		{name: "need gone while draining: call it off", in: at(PhaseDraining, func(in *Input) { in.Need = Need{} }), state: NotNeeded, action: ActCancelDrain, status: corev1.ConditionFalse, msgContains: []string{"undone"}},
		{name: "draining outside the window goes on", in: at(PhaseDraining, func(in *Input) { in.Window = weekend }), state: Draining},
		{name: "draining with a late blocker goes on and says so", in: at(PhaseDraining, func(in *Input) { in.Blockers = []Blocker{alert} }), state: Draining, msgContains: []string{"alerts EtcdMembersDown since the drain started"}},
		{name: "drained: reboot", in: at(PhaseDrained, nil), state: Rebooting, action: ActReboot},
		{name: "drained outside the window: reboot", in: at(PhaseDrained, func(in *Input) { in.Window = weekend }), state: Rebooting, action: ActReboot},
		{name: "drained with a late blocker: reboot", in: at(PhaseDrained, func(in *Input) { in.Blockers = []Blocker{pod} }), state: Rebooting, action: ActReboot, msgContains: []string{"pods db/postgres-0"}},
		{name: "drained, a gate asked again before the reboot holds: wait", in: at(PhaseDrained, func(in *Input) {
			in.DrainedAt, in.BeforeRebootBound = now.Add(-time.Minute), 15*time.Minute
			in.Blockers = []Blocker{{Kind: BlockerGate, Name: "etcd-quorum (q) has 1 series: {} 1", BeforeReboot: true}}
		}), state: Pending, detail: BlockedByGates, msgContains: []string{"drained; the reboot waits for gates asked again before it: etcd-quorum (q)", "given up at 2026-11-24T03:14:00Z"}},
		{name: "drained, a gate asked again holds past reboot.beforeRebootBound: give up", in: at(PhaseDrained, func(in *Input) {
			in.DrainedAt, in.BeforeRebootBound, in.Request = now.Add(-15*time.Minute), 15*time.Minute, "kernel 6.12"
			in.Blockers = []Blocker{{Kind: BlockerGate, Name: "etcd-quorum (q) has 1 series: {} 1", BeforeReboot: true}}
		}), state: DrainFailed, action: ActGiveUp, answer: true, msgContains: []string{"still held 15m later (reboot.beforeRebootBound): etcd-quorum (q)", "slot released"}},
		{name: "drained, a gate not asked again holds: reboot", in: at(PhaseDrained, func(in *Input) {
			in.Blockers = []Blocker{{Kind: BlockerGate, Name: "g (q) has 1 series: {} 1"}}
		}), state: Rebooting, action: ActReboot, msgContains: []string{"gates g (q)"}},
		{name: "drained, need gone: reboot all the same", in: at(PhaseDrained, func(in *Input) { in.Need = Need{} }), state: Rebooting, action: ActReboot},
		{name: "drain timed out: failed, no reboot", in: at(PhaseDrainTimedOut, nil), state: DrainFailed, action: ActGiveUp, msgContains: []string{"drain.timeout", "rebootWithoutDrain"}},
		{name: "drain timed out answers the request", in: at(PhaseDrainTimedOut, func(in *Input) { in.Request = "kernel 6.12" }), state: DrainFailed, action: ActGiveUp, answer: true},
		{name: "drain timed out, admin opted in: reboot", in: at(PhaseDrainTimedOut, func(in *Input) { in.RebootWithoutDrain = true }), state: Rebooting, action: ActReboot, msgContains: []string{"anyway"}},
		{name: "reboot requested", in: at(PhaseRebootRequested, func(in *Input) { in.RequestedAt = requested; in.RetryReboot = 5 * time.Minute }), state: Rebooting},
		{name: "reboot requested, host still up after RetryReboot: ask again", in: at(PhaseRebootRequested, func(in *Input) { in.RequestedAt = now.Add(-5 * time.Minute); in.RetryReboot = 5 * time.Minute }), state: Rebooting, action: ActReboot, msgContains: []string{"asking logind again"}},
		{name: "back, not Ready yet: wait", in: at(PhaseBack, func(in *Input) { in.Need = Need{}; in.NodeReady = false; in.Maintenance = Maintenance{Active: true} }), state: Rebooting, msgContains: []string{"Ready"}},
		{name: "back, Ready: undo the drain first", in: at(PhaseBack, func(in *Input) { in.Need = Need{}; in.Maintenance = Maintenance{Active: true} }), state: Rebooting, action: ActUndoDrain, msgContains: []string{"uncordon"}},
		{name: "back, drain withdrawn, not undone yet: wait", in: at(PhaseBack, func(in *Input) { in.Need = Need{}; in.Drain = false; in.Maintenance = Maintenance{Active: true} }), state: Rebooting},
		{name: "back, sentinel gone: done", in: at(PhaseBack, func(in *Input) { in.Need = Need{} }), state: Done, action: ActFinish, status: corev1.ConditionFalse},
		{name: "back, done: the request is answered", in: at(PhaseBack, func(in *Input) { in.Need = Need{}; in.Request = "kernel 6.12" }), state: Done, action: ActFinish, status: corev1.ConditionFalse, answer: true},
		{name: "back, sentinel survived: loop, but finish", in: at(PhaseBack, func(in *Input) { in.Last = LastReboot{At: now} }), state: RebootLoop, action: ActFinish, msgContains: []string{"2026-11-25T03:00:00Z"}},

		// A slot the record holds and this process does not is taken back.
		{name: "draining after a restart: take the slot back", in: at(PhaseDraining, func(in *Input) { in.SlotHeld = false }), state: Draining, action: ActTakeSlotBack, msgContains: []string{"taking back"}},
		{name: "draining, taking the slot back: wait", in: at(PhaseDraining, func(in *Input) { in.SlotHeld, in.SlotWaiting = false, true }), state: Draining},
		{name: "drained without the slot: take it back before rebooting", in: at(PhaseDrained, func(in *Input) { in.SlotHeld = false }), state: Rebooting, action: ActTakeSlotBack},
		{name: "drained, slot on its way: no reboot yet", in: at(PhaseDrained, func(in *Input) { in.SlotHeld, in.SlotWaiting = false, true }), state: Rebooting},
		{name: "back after the reboot: take the slot back", in: at(PhaseBack, func(in *Input) { in.SlotHeld = false; in.NodeReady = false }), state: Rebooting, action: ActTakeSlotBack},
		{name: "back, slot on its way: finish all the same", in: at(PhaseBack, func(in *Input) { in.SlotHeld, in.SlotWaiting = false, true; in.Need = Need{} }), state: Done, action: ActFinish, status: corev1.ConditionFalse},
		{name: "timed out without the slot: give up without it", in: at(PhaseDrainTimedOut, func(in *Input) { in.SlotHeld = false }), state: DrainFailed, action: ActGiveUp},
		{name: "need gone without the slot: call off without it", in: at(PhaseDraining, func(in *Input) { in.SlotHeld = false; in.Need = Need{} }), state: NotNeeded, action: ActCancelDrain, status: corev1.ConditionFalse},

		// Waiting for a slot is checked like idle.
		{name: "waiting for a slot, window closes: stop waiting", in: with(func(in *Input) { in.Phase = PhaseWaitingForSlot; in.SlotWaiting = true; in.Window = weekend }), state: Pending, detail: OutsideWindow, action: ActReleaseSlot},
		{name: "waiting for a slot, got it: drain", in: with(func(in *Input) { in.Phase = PhaseWaitingForSlot; in.SlotHeld = true }), state: Draining, action: ActStartDrain},
		{name: "other maintenance: wait for its end", in: with(func(in *Input) { in.Maintenance = Maintenance{Other: true} }), state: Pending, detail: InMaintenance, msgContains: []string{"maintenance"}},
		{name: "other maintenance before the slot, after the blockers", in: with(func(in *Input) { in.Maintenance = Maintenance{Other: true}; in.Blockers = []Blocker{pod} }), state: Pending, detail: BlockedByPods},

		// A failed attempt is retried after its backoff.
		{name: "drain failed: no retry before the backoff", in: with(func(in *Input) {
			in.Failure = Failure{At: now.Add(-30 * time.Second), Count: 1, RetryAt: now.Add(30 * time.Second)}
		}), state: DrainFailed, msgContains: []string{"failed once", "no new attempt before 2026-11-24T03:00:30Z", "up to 24h", "node-agent reboot request"}},
		{name: "drain failed three times: says so", in: with(func(in *Input) {
			in.Failure = Failure{At: now.Add(-time.Minute), Count: 3, RetryAt: now.Add(3 * time.Minute)}
		}), state: DrainFailed, msgContains: []string{"3 times in a row"}},
		{name: "drain failed, backoff passed: retry", in: with(func(in *Input) {
			in.Failure = Failure{At: now.Add(-time.Hour), Count: 5, RetryAt: now}
		}), state: Pending, detail: WaitingForSlot, action: ActTakeSlot},
		{name: "drain failed, record without retryAt: the first wait", in: with(func(in *Input) { in.Failure = Failure{At: now.Add(-30 * time.Second)} }), state: DrainFailed, msgContains: []string{"2026-11-24T03:00:30Z"}},
		{name: "drain failed, a retryAt past the cap: bounded", in: with(func(in *Input) {
			in.Failure = Failure{At: now.Add(-25 * time.Hour), Count: 1, RetryAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
		}), state: Pending, detail: WaitingForSlot, action: ActTakeSlot},
		{name: "drain failed in the future: counts as now", in: with(func(in *Input) {
			in.Failure = Failure{At: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), Count: 1, RetryAt: time.Date(9999, 1, 1, 0, 1, 0, 0, time.UTC)}
		}), state: DrainFailed, msgContains: []string{"2026-11-25T03:00:00Z"}},
		{name: "drain failed, backoff running, outside the window: the failure is named", in: with(func(in *Input) {
			in.Failure = Failure{At: now, Count: 1, RetryAt: now.Add(time.Minute)}
			in.Window = weekend
		}), state: DrainFailed},
		{name: "failed, asked anew: retry at once", in: with(func(in *Input) {
			in.Failure = Failure{At: now.Add(-time.Hour), Request: "kernel 6.12"}
			in.Request = "try again"
		}), state: Pending, detail: WaitingForSlot, action: ActTakeSlot},
		{name: "failed, the answered request still shows: remove it, no retry", in: with(func(in *Input) {
			in.Need = Need{}
			in.Failure = Failure{At: now.Add(-time.Hour), Request: "kernel 6.12"}
			in.Request = "kernel 6.12"
			in.Previous, in.PreviousMessage = DrainFailed, "the drain did not finish"
		}), state: DrainFailed, status: corev1.ConditionFalse, answer: true},

		// The loop guard.
		{name: "sentinel survived a reboot within the bound", in: with(func(in *Input) {
			in.Last = LastReboot{At: now.Add(-23 * time.Hour), SentinelSurvived: true}
		}), state: RebootLoop, msgContains: []string{"2026-11-24T04:00:00Z"}},
		{name: "loop guard wins over a free slot it holds", in: with(func(in *Input) {
			in.Last = LastReboot{At: now.Add(-time.Hour), SentinelSurvived: true}
			in.SlotHeld = true
		}), state: RebootLoop, action: ActReleaseSlot},
		{name: "sentinel survived, bound passed: pending again", in: with(func(in *Input) {
			in.Last = LastReboot{At: now.Add(-24 * time.Hour), SentinelSurvived: true}
		}), state: Pending, detail: WaitingForSlot, action: ActTakeSlot},
		{name: "recent reboot that cleared the sentinel: a new need proceeds", in: with(func(in *Input) {
			in.Last = LastReboot{At: now.Add(-time.Hour)}
		}), state: Pending, detail: WaitingForSlot, action: ActTakeSlot},
		{name: "loop guard off", in: with(func(in *Input) {
			in.Last = LastReboot{At: now.Add(-time.Minute), SentinelSurvived: true}
			in.LoopBound = 0
		}), state: Pending, detail: WaitingForSlot, action: ActTakeSlot},
		{name: "loop guard before the window", in: with(func(in *Input) {
			in.Last = LastReboot{At: now.Add(-time.Hour), SentinelSurvived: true}
			in.Window = weekend
		}), state: RebootLoop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.State != tt.state || d.Detail != tt.detail || d.Action != tt.action {
				t.Errorf("Decide = %s/%s action %q, want %s/%s action %q (%s)", d.State, d.Detail, d.Action, tt.state, tt.detail, tt.action, d.Message)
			}
			status := tt.status
			if status == "" {
				status = corev1.ConditionTrue
			}
			if d.Status != status || d.AnswerRequest != tt.answer {
				t.Errorf("status %s answer %v, want %s %v", d.Status, d.AnswerRequest, status, tt.answer)
			}
			if d.Message == "" || strings.Contains(d.Message, "\n") {
				t.Errorf("message %q: want one line", d.Message)
			}
			for _, s := range tt.msgContains {
				if !strings.Contains(d.Message, s) {
					t.Errorf("message %q lacks %q", d.Message, s)
				}
			}
		})
	}
}

// What Decide records of the last reboot and the last failure.
func TestDecideRecords(t *testing.T) {
	now := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	w := mustWindow(t, nil, "00:00", "00:00", "UTC")
	back := now.Add(-time.Minute)
	failed := Failure{At: now.Add(-48 * time.Hour), Request: "old"}

	d := Decide(Input{Now: now, Phase: PhaseBack, Drain: true, SlotHeld: true, NodeReady: true, Window: w,
		Need: Need{Needed: true, Why: "x"}, Last: LastReboot{At: back}, Failure: failed})
	if d.Last != (LastReboot{At: back, SentinelSurvived: true}) || d.Failure != (Failure{}) {
		t.Errorf("finish with the sentinel there: last %+v failure %+v; want it survived, the failure forgotten", d.Last, d.Failure)
	}
	d = Decide(Input{Now: now, Phase: PhaseDrainTimedOut, Drain: true, SlotHeld: true, Window: w, Request: "kernel",
		Need: Need{Needed: true, Why: "x"}, Last: LastReboot{At: back}, CheckInterval: time.Minute})
	if d.Failure != (Failure{At: now, Count: 1, RetryAt: now.Add(time.Minute), Request: "kernel"}) || d.Last.At != back {
		t.Errorf("give up: failure %+v last %+v", d.Failure, d.Last)
	}
	d = Decide(Input{Now: now, Phase: PhaseDrainTimedOut, Drain: true, SlotHeld: true, Window: w,
		Need: Need{Needed: true, Why: "x"}, Failure: Failure{At: now.Add(-time.Hour), Count: 3, RetryAt: now.Add(-time.Hour)}, CheckInterval: time.Minute})
	if d.Failure != (Failure{At: now, Count: 4, RetryAt: now.Add(8 * time.Minute)}) {
		t.Errorf("give up the fourth time: failure %+v, want a wait of 8m", d.Failure)
	}
	d = Decide(Input{Now: now, Window: w, Request: "try again", Need: Need{Needed: true, Why: "x"}, Failure: failed})
	if d.Failure != (Failure{}) {
		t.Errorf("asked anew: failure %+v, want it forgotten", d.Failure)
	}
	d = Decide(Input{Now: now, Window: w, Need: Need{Needed: true, Why: "x"}, Failure: failed, CheckInterval: time.Minute})
	if want := (Failure{At: failed.At, RetryAt: failed.At.Add(time.Minute), Request: "old"}); d.Failure != want {
		t.Errorf("idle: failure %+v, want %+v: kept, with the retry time a record from before the backoff lacks", d.Failure, want)
	}
}

func TestDrainFailedBackoff(t *testing.T) {
	tests := []struct {
		base time.Duration
		n    int
		want time.Duration
	}{
		{time.Minute, 0, time.Minute},
		{time.Minute, 1, time.Minute},
		{time.Minute, 2, 2 * time.Minute},
		{time.Minute, 4, 8 * time.Minute},
		{time.Minute, 11, 1024 * time.Minute},
		{time.Minute, 12, DrainFailedBackoffCap},
		{time.Minute, 1 << 30, DrainFailedBackoffCap}, // a count someone wrote: no overflow, no spin
		{0, 1, time.Minute},
		{48 * time.Hour, 1, DrainFailedBackoffCap},
	}
	for _, tt := range tests {
		if got := DrainFailedBackoff(tt.base, tt.n); got != tt.want {
			t.Errorf("DrainFailedBackoff(%s, %d) = %s, want %s", tt.base, tt.n, got, tt.want)
		}
	}
}

func TestPhaseAdvance(t *testing.T) {
	tests := []struct {
		from   Phase
		m      Maintenance
		booted bool
		want   Phase
	}{
		{from: PhaseDraining, m: Maintenance{Active: true}, want: PhaseDraining},
		{from: PhaseDraining, m: Maintenance{Active: true, Drained: true}, want: PhaseDrained},
		{from: PhaseDraining, m: Maintenance{Active: true, TimedOut: true}, want: PhaseDrainTimedOut},
		{from: PhaseDrained, m: Maintenance{Active: true, TimedOut: true}, want: PhaseDrained},
		{from: PhaseRebootRequested, want: PhaseRebootRequested},
		{from: PhaseRebootRequested, booted: true, want: PhaseBack},
		{from: PhaseIdle, booted: true, m: Maintenance{Drained: true}, want: PhaseIdle},
		{from: PhaseBack, booted: true, want: PhaseBack},
	}
	for _, tt := range tests {
		if got := tt.from.Advance(tt.m, tt.booted); got != tt.want {
			t.Errorf("%q.Advance(%+v, booted %v) = %q, want %q", tt.from, tt.m, tt.booted, got, tt.want)
		}
	}
}

func TestInputWantsBlockers(t *testing.T) {
	needed := Need{Needed: true}
	tests := []struct {
		in   Input
		want bool
	}{
		{Input{Need: needed}, true},
		{Input{Need: needed, Phase: PhaseWaitingForSlot}, true},
		{Input{Need: needed, Phase: PhaseDraining}, true},
		{Input{Request: "r"}, true},
		{Input{}, false},
		{Input{Need: needed, Phase: PhaseDrained}, true}, // gates asked again before the reboot
		{Input{Phase: PhaseDrained}, false},
		{Input{Need: needed, Phase: PhaseRebootRequested}, false},
		{Input{NeedErr: errors.New("no bus")}, false},
	}
	for _, tt := range tests {
		if got := tt.in.WantsBlockers(); got != tt.want {
			t.Errorf("%+v: WantsBlockers = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestDecideBoundsNames(t *testing.T) {
	var bs []Blocker
	for i := range 8 {
		bs = append(bs, Blocker{Kind: BlockerPod, Name: fmt.Sprintf("ns/p%d", i)})
	}
	d := Decide(Input{Now: time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC), Need: Need{Needed: true, Why: "x"},
		Window: mustWindow(t, nil, "00:00", "00:00", "UTC"), Blockers: bs})
	if !strings.Contains(d.Message, "ns/p4 and 3 more") || strings.Contains(d.Message, "ns/p5") {
		t.Errorf("message %q: want five names and a count", d.Message)
	}
	if len(d.Blockers) != 8 {
		t.Errorf("Blockers has %d, want all 8 (only the message is bounded)", len(d.Blockers))
	}
}

// Every State is reachable, so that the condition's reasons, the metric's
// label values and the docs list no state the code never reports.
func TestEveryStateIsReachable(t *testing.T) {
	now := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	w := mustWindow(t, nil, "00:00", "00:00", "UTC")
	seen := map[State]bool{}
	for _, phase := range []Phase{PhaseIdle, PhaseWaitingForSlot, PhaseDraining, PhaseDrained, PhaseDrainTimedOut, PhaseRebootRequested, PhaseBack} {
		for _, needed := range []bool{false, true} {
			for _, survived := range []bool{false, true} {
				for _, held := range []bool{false, true} {
					d := Decide(Input{Now: now, Need: Need{Needed: needed}, Window: w, Phase: phase, LoopBound: time.Hour, NodeReady: true,
						SlotHeld: held, Last: LastReboot{At: now, SentinelSurvived: survived}})
					seen[d.State] = true
				}
			}
		}
	}
	for _, s := range States {
		if !seen[s] {
			t.Errorf("state %s is never decided", s)
		}
	}
	if len(seen) != len(States) {
		t.Errorf("decided %v, States lists %v", seen, States)
	}
}
