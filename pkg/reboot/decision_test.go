package reboot

import (
	"fmt"
	"strings"
	"testing"
	"time"
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

	base := Input{Now: now, Need: need, Window: night, LoopBound: 24 * time.Hour, NodeReady: true}
	with := func(f func(*Input)) Input { in := base; f(&in); return in }

	tests := []struct {
		name        string
		in          Input
		state       State
		detail      Detail
		action      Action
		msgContains []string
	}{
		{name: "not needed", in: with(func(in *Input) { in.Need = Need{} }), state: NotNeeded},
		{name: "not needed gives back a slot it holds", in: with(func(in *Input) { in.Need = Need{}; in.SlotHeld = true }), state: NotNeeded, action: ActReleaseSlot},
		{name: "needed, clear, no slot: take one", in: base, state: Pending, detail: WaitingForSlot, action: ActTakeSlot, msgContains: []string{"/run/reboot-required", "drain slot"}},
		{name: "needed, clear, slot held: drain", in: with(func(in *Input) { in.SlotHeld = true }), state: Draining, action: ActStartDrain},
		{name: "outside the window", in: with(func(in *Input) { in.Window = weekend }), state: Pending, detail: OutsideWindow, msgContains: []string{"sat,sun 02:00-04:00 UTC"}},
		{name: "outside the window gives the slot back", in: with(func(in *Input) { in.Window = weekend; in.SlotHeld = true }), state: Pending, detail: OutsideWindow, action: ActReleaseSlot},
		{name: "window before blockers", in: with(func(in *Input) { in.Window = weekend; in.Blockers = []Blocker{pod} }), state: Pending, detail: OutsideWindow},
		{name: "blocked by a pod", in: with(func(in *Input) { in.Blockers = []Blocker{pod} }), state: Pending, detail: BlockedByPods, msgContains: []string{"blocked by pods db/postgres-0"}},
		{name: "blocked by an alert", in: with(func(in *Input) { in.Blockers = []Blocker{alert} }), state: Pending, detail: BlockedByAlerts, msgContains: []string{"blocked by alerts EtcdMembersDown"}},
		{name: "blocked by both: pods first, both named", in: with(func(in *Input) { in.Blockers = []Blocker{alert, pod} }), state: Pending, detail: BlockedByPods, msgContains: []string{"pods db/postgres-0 and alerts EtcdMembersDown"}},
		{name: "prometheus unreachable blocks", in: with(func(in *Input) { in.Blockers = []Blocker{down} }), state: Pending, detail: BlockedByAlerts, msgContains: []string{"prometheus unreachable"}},
		{name: "blocked with a slot gives it back", in: with(func(in *Input) { in.Blockers = []Blocker{pod}; in.SlotHeld = true }), state: Pending, detail: BlockedByPods, action: ActReleaseSlot},
		{name: "blockers before the slot", in: with(func(in *Input) { in.Blockers = []Blocker{pod} }), state: Pending, detail: BlockedByPods},

		// Once the drain started, it finishes.
		{name: "draining", in: with(func(in *Input) { in.Phase = PhaseDraining; in.SlotHeld = true }), state: Draining},
		{name: "need gone while draining: call it off", in: with(func(in *Input) { in.Phase = PhaseDraining; in.Need = Need{} }), state: NotNeeded, action: ActReleaseSlot, msgContains: []string{"undone"}},
		{name: "draining outside the window goes on", in: with(func(in *Input) { in.Phase = PhaseDraining; in.Window = weekend }), state: Draining},
		{name: "draining with a late blocker goes on and says so", in: with(func(in *Input) { in.Phase = PhaseDraining; in.Blockers = []Blocker{alert} }), state: Draining, msgContains: []string{"alerts EtcdMembersDown since the drain started"}},
		{name: "drained: reboot", in: with(func(in *Input) { in.Phase = PhaseDrained }), state: Rebooting, action: ActReboot},
		{name: "drained outside the window: reboot", in: with(func(in *Input) { in.Phase = PhaseDrained; in.Window = weekend }), state: Rebooting, action: ActReboot},
		{name: "drained with a late blocker: reboot", in: with(func(in *Input) { in.Phase = PhaseDrained; in.Blockers = []Blocker{pod} }), state: Rebooting, action: ActReboot, msgContains: []string{"pods db/postgres-0"}},
		{name: "drain timed out: failed, no reboot", in: with(func(in *Input) { in.Phase = PhaseDrainTimedOut }), state: Failed, action: ActReleaseSlot, msgContains: []string{"drain.timeout", "rebootWithoutDrain"}},
		{name: "drain timed out, admin opted in: reboot", in: with(func(in *Input) { in.Phase = PhaseDrainTimedOut; in.RebootWithoutDrain = true }), state: Rebooting, action: ActReboot, msgContains: []string{"anyway"}},
		{name: "reboot requested", in: with(func(in *Input) { in.Phase = PhaseRebootRequested }), state: Rebooting},
		{name: "back, not Ready yet: wait", in: with(func(in *Input) { in.Phase = PhaseBack; in.Need = Need{}; in.NodeReady = false }), state: Rebooting, msgContains: []string{"Ready"}},
		{name: "back, sentinel gone: done", in: with(func(in *Input) { in.Phase = PhaseBack; in.Need = Need{} }), state: Done, action: ActFinish},
		{name: "back, sentinel survived: loop, but finish", in: with(func(in *Input) { in.Phase = PhaseBack; in.Last = LastReboot{At: now} }), state: RebootLoop, action: ActFinish, msgContains: []string{"2026-11-25T03:00:00Z"}},

		// Waiting for a slot is checked like idle.
		{name: "waiting for a slot, window closes: stop waiting", in: with(func(in *Input) { in.Phase = PhaseWaitingForSlot; in.Window = weekend }), state: Pending, detail: OutsideWindow},
		{name: "waiting for a slot, got it: drain", in: with(func(in *Input) { in.Phase = PhaseWaitingForSlot; in.SlotHeld = true }), state: Draining, action: ActStartDrain},
		{name: "other maintenance: wait for its end", in: with(func(in *Input) { in.InMaintenance = true }), state: Pending, detail: InMaintenance, msgContains: []string{"maintenance"}},
		{name: "other maintenance before the slot, after the blockers", in: with(func(in *Input) { in.InMaintenance = true; in.Blockers = []Blocker{pod} }), state: Pending, detail: BlockedByPods},

		// A failed attempt is not retried within the bound.
		{name: "failed an hour ago: no retry", in: with(func(in *Input) { in.FailedAt = now.Add(-time.Hour) }), state: Failed, msgContains: []string{"2026-11-25T02:00:00Z"}},
		{name: "failed a day ago: retry", in: with(func(in *Input) { in.FailedAt = now.Add(-24 * time.Hour) }), state: Pending, detail: WaitingForSlot, action: ActTakeSlot},

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
				d := Decide(Input{Now: now, Need: Need{Needed: needed}, Window: w, Phase: phase, LoopBound: time.Hour, NodeReady: true,
					Last: LastReboot{At: now, SentinelSurvived: survived}})
				seen[d.State] = true
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
