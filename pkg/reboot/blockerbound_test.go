package reboot

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// reboot.blockerBound: blockers hold a needed reboot from their first
// check until the bound, then reboot.onBlockerBound decides.
func TestDecideBlockerBound(t *testing.T) {
	now := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	pod := Blocker{Kind: BlockerPod, Name: "tenant/pinned"}
	vm := Blocker{Kind: BlockerVM, Name: "tenant/db (evictionStrategy None)"}
	base := Input{
		Now: now, Need: Need{Needed: true, Why: "sentinel file /run/reboot-required exists"},
		Window: mustWindow(t, nil, "02:00", "04:00", "UTC"), CheckInterval: time.Minute, NodeReady: true,
		BlockerBound: 24 * time.Hour, Blockers: []Blocker{pod},
	}
	with := func(f func(*Input)) Input { in := base; f(&in); return in }
	dayAgo := now.Add(-24 * time.Hour)

	tests := []struct {
		name     string
		in       Input
		state    State
		detail   Detail
		action   Action
		since    time.Time // Decision.BlockedSince
		exceeded string
		msg      []string
	}{
		{name: "first block starts the bound", in: base, state: Pending, detail: BlockedByPods, since: now, msg: []string{"tenant/pinned"}},
		{name: "within the bound: still held, since kept", in: with(func(in *Input) { in.BlockedSince = dayAgo.Add(time.Second) }),
			state: Pending, detail: BlockedByPods, since: dayAgo.Add(time.Second)},
		{name: "past the bound, wait: held and said", in: with(func(in *Input) { in.BlockedSince = dayAgo }),
			state: Pending, detail: BlockedByPods, since: dayAgo, exceeded: BoundWait,
			msg: []string{"tenant/pinned", "since 2026-11-23T03:00:00Z, past reboot.blockerBound (24h)", "reboot.onBlockerBound=wait"}},
		{name: "past the bound, proceed: a slot is taken, blockers named", in: with(func(in *Input) { in.BlockedSince = dayAgo; in.ProceedPastBound = true }),
			state: Pending, detail: WaitingForSlot, action: ActTakeSlot, since: dayAgo, exceeded: BoundProceed,
			msg: []string{"waiting for a drain slot", "tenant/pinned", "passed over as reboot.onBlockerBound=proceed"}},
		{name: "past the bound, proceed, slot held: drain", in: with(func(in *Input) { in.BlockedSince = dayAgo; in.ProceedPastBound = true; in.SlotHeld = true }),
			state: Draining, action: ActStartDrain, since: dayAgo, exceeded: BoundProceed},
		{name: "a VM that cannot leave is bounded too", in: with(func(in *Input) { in.BlockedSince = dayAgo; in.Blockers = []Blocker{vm} }),
			state: Pending, detail: BlockedByVMs, since: dayAgo, exceeded: BoundWait, msg: []string{"tenant/db"}},
		{name: "blockers gone: the bound starts afresh next time", in: with(func(in *Input) { in.BlockedSince = dayAgo; in.Blockers = nil }),
			state: Pending, detail: WaitingForSlot, action: ActTakeSlot},
		{name: "outside the window the blockers' start is kept", in: with(func(in *Input) {
			in.BlockedSince = dayAgo.Add(time.Hour)
			in.Window = mustWindow(t, nil, "22:00", "23:00", "UTC")
		}), state: Pending, detail: OutsideWindow, since: dayAgo.Add(time.Hour)},
		{name: "a start in the future counts as now", in: with(func(in *Input) { in.BlockedSince = now.Add(100 * 24 * time.Hour) }),
			state: Pending, detail: BlockedByPods, since: now},
		{name: "bound 0: held as long as they hold", in: with(func(in *Input) { in.BlockedSince = now.Add(-1000 * time.Hour); in.BlockerBound = 0 }),
			state: Pending, detail: BlockedByPods, since: now.Add(-1000 * time.Hour)},
		{name: "not needed: no start", in: with(func(in *Input) { in.BlockedSince = dayAgo; in.Need = Need{} }), state: NotNeeded},
		{name: "under way: the start is kept", in: with(func(in *Input) {
			in.BlockedSince = dayAgo
			in.Phase, in.Drain, in.SlotHeld = PhaseDraining, true, true
		}), state: Draining, since: dayAgo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.State != tt.state || d.Detail != tt.detail || d.Action != tt.action {
				t.Errorf("Decide = %s/%s action %q, want %s/%s action %q (%s)", d.State, d.Detail, d.Action, tt.state, tt.detail, tt.action, d.Message)
			}
			if !d.BlockedSince.Equal(tt.since) || d.BoundExceeded != tt.exceeded {
				t.Errorf("BlockedSince %v BoundExceeded %q, want %v %q", d.BlockedSince, d.BoundExceeded, tt.since, tt.exceeded)
			}
			for _, s := range tt.msg {
				if !strings.Contains(d.Message, s) {
					t.Errorf("message %q lacks %q", d.Message, s)
				}
			}
		})
	}
}

// reboot.blockingPodNamespaces: a pod that matches the selector blocks only
// from the namespaces listed.
func TestPodBlockersNamespaces(t *testing.T) {
	mk := func(ns, name string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Namespace, p.Name, p.Labels = ns, name, map[string]string{"hold": "reboot"}
		return p
	}
	lister := listerFunc(func(context.Context, labels.Selector) ([]*corev1.Pod, error) {
		return []*corev1.Pod{mk("batch", "job-1"), mk("tenant", "pinned")}, nil
	})
	sel := labels.SelectorFromSet(labels.Set{"hold": "reboot"})
	for _, tt := range []struct {
		namespaces []string
		want       string
	}{
		{nil, "batch/job-1 tenant/pinned"},
		{[]string{"batch"}, "batch/job-1"},
		{[]string{"other"}, ""},
	} {
		var got []string
		for _, b := range (PodBlockers{Lister: lister, Selector: sel, Namespaces: tt.namespaces}).Blockers(t.Context()) {
			got = append(got, b.Name)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("namespaces %v: blockers %v, want %q", tt.namespaces, got, tt.want)
		}
	}
}

// The controller keeps the blockers' start on the Node across a restart,
// and once reboot.blockerBound runs out says so once: a Warning Event that
// names what held the reboot and what was decided, the record and the
// condition, and node_agent_wait_bound_exceeded_total.
func TestControllerBlockerBound(t *testing.T) {
	for _, proceed := range []bool{false, true} {
		decision := map[bool]string{false: BoundWait, true: BoundProceed}[proceed]
		t.Run(decision, func(t *testing.T) {
			b := newBed(t, alwaysWindow(t))
			b.opts.Blockers = []BlockerSource{&staticBlockers{[]Blocker{{Kind: BlockerPod, Name: "tenant/pinned"}}}}
			b.opts.BlockerBound, b.opts.ProceedPastBound = time.Hour, proceed
			wb := metrics.NewWaitBound(nil)
			b.opts.WaitBound = wb
			b.slots.free = make(chan struct{}) // the slot is only asked for
			b.restart()
			b.setSentinel(true)
			start := b.clock.Now()
			rec := b.step()
			b.expect(rec, Pending, "BlockedByPods", PhaseIdle)
			if rec.BlockedSince == nil || !rec.BlockedSince.Time.Equal(start) || rec.BoundExceeded != "" {
				t.Fatalf("record %+v: want blockedSince %v and no bound exceeded", rec, start)
			}

			// A new agent (an upgrade, a crash) does not start the bound
			// afresh.
			b.restart()
			b.clock.Step(time.Hour - time.Second)
			if rec := b.step(); rec.BoundExceeded != "" || b.sawEvent("Warning RebootBlockerBoundExceeded") {
				t.Fatalf("bound exceeded early: %+v", rec)
			}

			b.clock.Step(time.Second)
			rec = b.step()
			if rec.BoundExceeded != decision || !rec.BlockedSince.Time.Equal(start) {
				t.Fatalf("record %+v: want boundExceeded %q from %v", rec, decision, start)
			}
			if proceed {
				b.expect(rec, Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
			} else {
				b.expect(rec, Pending, "BlockedByPods", PhaseIdle)
			}
			if !strings.Contains(rec.Message, "tenant/pinned") || !strings.Contains(rec.Message, "reboot.onBlockerBound="+decision) {
				t.Fatalf("message %q: want the pod and the decision", rec.Message)
			}
			var event string
			for len(b.events.Events) > 0 {
				if e := <-b.events.Events; strings.HasPrefix(e, "Warning RebootBlockerBoundExceeded") {
					event = e
				}
			}
			if !strings.Contains(event, "tenant/pinned") || !strings.Contains(event, decision) {
				t.Fatalf("Warning Event %q: want one naming the pod and the decision", event)
			}
			if got := testutil.ToFloat64(wb.Exceeded.WithLabelValues(metrics.WaitRebootBlockers, decision)); got != 1 {
				t.Fatalf("wait_bound_exceeded_total{decision=%q} = %v, want 1", decision, got)
			}
			held := map[bool]float64{false: 1, true: 0}[proceed]
			if got := testutil.ToFloat64(wb.Held.WithLabelValues(metrics.WaitRebootBlockers)); got != held {
				t.Fatalf("wait_bound_held = %v, want %v", got, held)
			}

			// Said once, not at every check past the bound.
			b.clock.Step(time.Minute)
			b.step()
			if b.sawEvent("Warning RebootBlockerBoundExceeded") {
				t.Fatal("the Warning Event came again at the next check")
			}
			if got := testutil.ToFloat64(wb.Exceeded.WithLabelValues(metrics.WaitRebootBlockers, decision)); got != 1 {
				t.Fatalf("wait_bound_exceeded_total = %v after another check, want 1", got)
			}
		})
	}
}
