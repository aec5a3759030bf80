package selfdrain

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestBackoff(t *testing.T) {
	one := func() float64 { return 1 }
	tests := []struct {
		attempt int
		limit   time.Duration
		want    time.Duration
	}{
		{1, 10 * time.Second, 250 * time.Millisecond},
		{2, 10 * time.Second, 500 * time.Millisecond},
		{3, 10 * time.Second, time.Second},
		{6, 10 * time.Second, 8 * time.Second},
		{7, 10 * time.Second, 10 * time.Second},
		{100, 10 * time.Second, 10 * time.Second},
		{100, time.Minute, time.Minute},
	}
	for _, tt := range tests {
		if got := backoff(tt.attempt, tt.limit, one); got != tt.want {
			t.Errorf("backoff(%d, %s) = %s, want %s", tt.attempt, tt.limit, got, tt.want)
		}
	}
	// Jitter stays within its bounds and never reaches zero.
	for _, j := range []float64{0.75, 1.2499} {
		got := backoff(1, time.Second, func() float64 { return j })
		if got < 187*time.Millisecond || got > 313*time.Millisecond {
			t.Errorf("jitter %v gave %s", j, got)
		}
	}
	if got := backoff(1, time.Second, func() float64 { return 0 }); got <= 0 {
		t.Errorf("backoff can be zero: %s", got)
	}
}

func TestGoneBy(t *testing.T) {
	mk := func() map[types.UID]*podState {
		return map[types.UID]*podState{
			"u1": {key: "ns/a"},
			"u2": {key: "ns/b"},
		}
	}
	tests := []struct {
		name    string
		ev      podEvent
		changed bool
		left    int
	}{
		{"deleted", podEvent{key: "ns/a", uid: "u1", deleted: true}, true, 1},
		{"finished", podEvent{key: "ns/a", uid: "u1", finished: true}, true, 1},
		{"still running", podEvent{key: "ns/a", uid: "u1"}, false, 2},
		{"same name new uid", podEvent{key: "ns/b", uid: "u9"}, true, 1},
		{"other pod", podEvent{key: "ns/c", uid: "u3"}, false, 2},
		{"deletion of an unknown pod", podEvent{key: "ns/b", uid: "u9", deleted: true}, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mk()
			if got := goneBy(p, tt.ev); got != tt.changed || len(p) != tt.left {
				t.Errorf("goneBy = %t with %d left, want %t with %d", got, len(p), tt.changed, tt.left)
			}
		})
	}
}

func TestCordonAndUndo(t *testing.T) {
	const key = "kubevirt.io/drain"
	now := metav1.Now()
	foreign := corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name          string
		unschedulable bool
		taints        []corev1.Taint
		wantCordoned  bool // CordonedByAgent
		wantTainted   bool // TaintedByAgent
		wantAfterEnd  bool // unschedulable after undo
		wantTaintEnd  bool // drain taint after undo
	}{
		{name: "schedulable node", wantCordoned: true, wantTainted: true},
		{name: "admin cordoned", unschedulable: true, wantTainted: true, wantAfterEnd: true},
		{name: "taint already there", taints: []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}}, wantCordoned: true, wantTaintEnd: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: tt.unschedulable, Taints: append([]corev1.Taint{foreign}, tt.taints...)}}
			st := &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}
			cordonAndTaint(n, key, st, true, now)
			if !n.Spec.Unschedulable || !hasTaint(n, key) {
				t.Fatalf("not cordoned and tainted: %+v", n.Spec)
			}
			if st.CordonedByAgent != tt.wantCordoned || st.TaintedByAgent != tt.wantTainted {
				t.Errorf("record = %t/%t, want %t/%t", st.CordonedByAgent, st.TaintedByAgent, tt.wantCordoned, tt.wantTainted)
			}
			// A resumed drain must not overwrite the record.
			resumed := *st
			cordonAndTaint(n, key, &resumed, false, now)
			if resumed.CordonedByAgent != st.CordonedByAgent || resumed.TaintedByAgent != st.TaintedByAgent {
				t.Errorf("resume changed the record")
			}
			undo(n, key, st)
			if n.Spec.Unschedulable != tt.wantAfterEnd || hasTaint(n, key) != tt.wantTaintEnd {
				t.Errorf("after undo: unschedulable=%t taint=%t, want %t/%t", n.Spec.Unschedulable, hasTaint(n, key), tt.wantAfterEnd, tt.wantTaintEnd)
			}
			if !hasTaint(n, "other") {
				t.Error("undo removed a foreign taint")
			}
			if _, err := DecodeStatus(n.Annotations[StatusAnnotation]); err != nil {
				t.Errorf("status annotation: %v", err)
			}
		})
	}
}

func TestDecodeStatus(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string
	}{
		{name: "valid", raw: `{"phase":"Running","trigger":"annotation","totalPods":3,"evictionPods":2,"drainProgress":50,"cordonedByAgent":true,"taintedByAgent":true}`},
		{name: "not json", raw: `phase: Running`, wantErr: "not valid status JSON"},
		{name: "unknown field", raw: `{"phase":"Running","trigger":"annotation","cordonedByAgnet":true}`, wantErr: "unknown field"},
		{name: "unknown phase", raw: `{"phase":"Draining","trigger":"annotation"}`, wantErr: "unknown phase"},
		{name: "unknown trigger", raw: `{"phase":"Running","trigger":"cron"}`, wantErr: "unknown trigger"},
		{name: "wrong type", raw: `{"phase":"Running","trigger":"annotation","totalPods":"3"}`, wantErr: "not valid status JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := DecodeStatus(tt.raw)
			if tt.wantErr == "" {
				if err != nil || st == nil {
					t.Fatalf("DecodeStatus: %v", err)
				}
				if again, err := DecodeStatus(st.Encode()); err != nil || again.Encode() != st.Encode() {
					t.Errorf("round trip: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), "delete it") {
				t.Errorf("error does not say what to do: %v", err)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	for _, tt := range []struct{ total, pending, want int }{{0, 0, 100}, {10, 10, 0}, {10, 5, 50}, {3, 0, 100}, {3, 1, 66}, {2, 5, 0}} {
		if got := progress(tt.total, tt.pending); got != tt.want {
			t.Errorf("progress(%d,%d) = %d, want %d", tt.total, tt.pending, got, tt.want)
		}
	}
}

// FuzzDecodeStatus: the status annotation is outside input (anyone with
// patch rights on the Node can write it); decoding must never panic, and
// whatever decodes must encode and decode again to the same value.
func FuzzDecodeStatus(f *testing.F) {
	f.Add(`{"phase":"Running","trigger":"annotation","totalPods":3}`)
	f.Add(`{"phase":"Succeeded","trigger":"shutdown","pendingPods":["a/b"],"startTime":"2026-01-01T00:00:00Z","drainedInTime":true}`)
	f.Add(`{}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, raw string) {
		st, err := DecodeStatus(raw)
		if err != nil {
			return
		}
		again, err := DecodeStatus(st.Encode())
		if err != nil {
			t.Fatalf("re-decoding %q: %v", st.Encode(), err)
		}
		if again.Encode() != st.Encode() {
			t.Fatalf("round trip changed %q to %q", st.Encode(), again.Encode())
		}
	})
}

func TestEvictionResult(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	tests := []struct {
		deleted bool
		err     error
		want    string
	}{
		{false, nil, "evicted"},
		{true, nil, "deleted"},
		{false, apierrors.NewNotFound(gr, "p"), "not_found"},
		{false, apierrors.NewConflict(gr, "p", errors.New("uid")), "not_found"},
		{false, apierrors.NewTooManyRequests("pdb", 0), "blocked"},
		{false, apierrors.NewInternalError(errors.New("x")), "error"},
	}
	for _, tt := range tests {
		if got := evictionResult(tt.deleted, tt.err); got != tt.want {
			t.Errorf("evictionResult(%t, %v) = %s, want %s", tt.deleted, tt.err, got, tt.want)
		}
	}
}

// What each phase of the reboot's record becomes when another request takes
// it over (HandOver): what the agent cordoned and tainted stays on record;
// a drain under way or a new attempt after a timeout waits for the
// request's own slot, and its drain.timeout counts from that slot.
func TestHandedOver(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(t0.Add(time.Hour))
	reboot := func(phase Phase) *Status {
		return &Status{Phase: phase, Trigger: TriggerReboot, Reason: "reboot controller: kernel", StartTime: &t0, DrainStartTime: &t0,
			TotalPods: 3, EvictionPods: 2, PendingPods: []string{"ns/a"}, DrainProgress: 50, CordonedByAgent: true, TaintedByAgent: true}
	}
	failed := reboot(PhaseFailed)
	failed.LastError = "drain.timeout (1h0m0s) passed"
	failed.Blockers = []Blocker{{Pod: "ns/a", Reason: BlockerPodDisruptionBudget}}
	tests := []struct {
		name string
		prev *Status
		want Status
	}{
		{name: "drained: stays drained", prev: reboot(PhaseSucceeded), want: Status{Phase: PhaseSucceeded, StartTime: &t0, DrainStartTime: &t0,
			TotalPods: 3, EvictionPods: 2, PendingPods: []string{"ns/a"}, DrainProgress: 50}},
		{name: "under way: goes on, waiting for its slot", prev: reboot(PhaseRunning), want: Status{Phase: PhaseRunning, StartTime: &t0,
			TotalPods: 3, EvictionPods: 2, PendingPods: []string{"ns/a"}, DrainProgress: 50, LastError: testWaitMessage}},
		{name: "timed out: a new attempt, waiting for its slot", prev: failed, want: Status{Phase: PhaseRunning, StartTime: &now, LastError: testWaitMessage}},
		{name: "waiting for the reboot's slot: waits for the request's", prev: reboot(PhaseWaiting), want: Status{Phase: PhaseWaiting, StartTime: &t0, DrainStartTime: &t0,
			TotalPods: 3, EvictionPods: 2, PendingPods: []string{"ns/a"}, DrainProgress: 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.prev.Encode()
			got := handedOver(tt.prev, TriggerAnnotation, "NIC", testWaitMessage, now)
			want := tt.want
			want.Trigger, want.Reason, want.LastUpdate = TriggerAnnotation, "NIC", &now
			want.CordonedByAgent, want.TaintedByAgent = true, true
			if got.Encode() != want.Encode() {
				t.Errorf("handed over:\n got %s\nwant %s", got.Encode(), want.Encode())
			}
			if tt.prev.Encode() != before {
				t.Error("the reboot's record was changed in place")
			}
		})
	}
}

// testWaitMessage stands for pkg/maintenance's slot-wait message.
const testWaitMessage = "waiting for a drain slot (test)"
