package selfdrain

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// refusal builds a 429 the way kube-apiserver's eviction REST does, with a
// DisruptionBudget cause carrying msg.
func refusal(msg string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: msg})
	return err
}

func TestBlockingBudget(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		want    pdbRef
		refused bool
	}{
		{"insufficient healthy", refusal("The disruption budget web-pdb needs 2 healthy pods and has 2 currently"), pdbRef{"shop", "web-pdb"}, true},
		{"not yet processed", refusal("The disruption budget db.v2 is still being processed by the server."), pdbRef{"shop", "db.v2"}, true},
		{"failed sync", refusal("The disruption budget x does not allow evicting pods currently because it failed sync: boom"), pdbRef{"shop", "x"}, true},
		{"429 without a cause", apierrors.NewTooManyRequests("slow down", 1), pdbRef{"shop", ""}, true},
		{"429 with an unexpected cause text", refusal("budget exhausted"), pdbRef{"shop", ""}, true},
		{"not a refusal", apierrors.NewInternalError(errors.New("etcd")), pdbRef{}, false},
		{"not an API error", errors.New("connection refused"), pdbRef{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, refused := blockingBudget("shop", tt.err)
			if got != tt.want || refused != tt.refused {
				t.Errorf("blockingBudget = %+v, %v; want %+v, %v", got, refused, tt.want, tt.refused)
			}
		})
	}
}

func TestSetBlockedDeletesOnlyClearedSeries(t *testing.T) {
	m := NewMetrics(nil)
	a, b := pdbRef{"shop", "web"}, pdbRef{"db", "pg"}
	m.setBlocked(map[pdbRef]int{a: 2, b: 1})
	if n := testutil.CollectAndCount(m.BlockedPods); n != 2 {
		t.Fatalf("series after two budgets blocked: %d, want 2", n)
	}
	m.setBlocked(map[pdbRef]int{a: 1, b: 0})
	if n := testutil.CollectAndCount(m.BlockedPods); n != 1 {
		t.Fatalf("series after one budget cleared: %d, want 1", n)
	}
	if v := testutil.ToFloat64(m.BlockedPods.WithLabelValues("shop/web")); v != 1 {
		t.Errorf("shop/web = %v, want 1", v)
	}
	m.setBlocked(nil)
	if n := testutil.CollectAndCount(m.BlockedPods); n != 0 {
		t.Errorf("series after the drain ended: %d, want 0", n)
	}
}

func TestBlockedCounts(t *testing.T) {
	web := &pdbRef{"shop", "web"}
	pending := map[types.UID]*podState{
		"a": {blockedBy: web}, "b": {blockedBy: web}, "c": {}, "d": {blockedBy: &pdbRef{"shop", ""}},
	}
	got := blockedCounts(pending)
	want := map[pdbRef]int{{"shop", "web"}: 2, {"shop", ""}: 1}
	if !maps.Equal(got, want) {
		t.Errorf("blockedCounts = %v, want %v", got, want)
	}
}

func TestObserveStatus(t *testing.T) {
	start := metav1.NewTime(time.Unix(1700000000, 0))
	end := metav1.NewTime(time.Unix(1700000600, 0))
	tests := []struct {
		name     string
		st       *Status
		phase    string // the phase at 1; "" for none
		start    float64
		progress float64
	}{
		{"no status", nil, "", 0, 0},
		{"running", &Status{Phase: PhaseRunning, StartTime: &start, DrainProgress: 40}, "Running", 1700000000, 0.4},
		{"failed", &Status{Phase: PhaseFailed, StartTime: &start, DrainProgress: 90}, "Failed", 1700000000, 0.9},
		{"ended", &Status{Phase: PhaseSucceeded, StartTime: &start, EndTime: &end, DrainProgress: 100}, "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			m.ObserveStatus(&Status{Phase: PhaseWaiting}) // a previous phase must be cleared
			m.ObserveStatus(tt.st)
			for _, p := range phases {
				want := 0.0
				if string(p) == tt.phase {
					want = 1
				}
				if got := testutil.ToFloat64(m.Phase.WithLabelValues(string(p))); got != want {
					t.Errorf("phase %s = %v, want %v", p, got, want)
				}
			}
			if got := testutil.ToFloat64(m.StartTime); got != tt.start {
				t.Errorf("start time = %v, want %v", got, tt.start)
			}
			if got := testutil.ToFloat64(m.Progress); got != tt.progress {
				t.Errorf("progress = %v, want %v", got, tt.progress)
			}
			problems, err := testutil.GatherAndLint(reg)
			if err != nil || len(problems) > 0 {
				t.Errorf("lint: %v %v", problems, err)
			}
		})
	}
}

func TestSeriesExportedFromTheStart(t *testing.T) {
	m := NewMetrics(nil)
	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want int
	}{
		{"drain_duration_seconds", m.DrainDuration, 4 * len(drainResults)}, // annotation, nodemaintenance, reboot, shutdown
		{"evictions_total", m.Evictions, len(evictionResults)},
		{"maintenance_phase", m.Phase, len(phases)},
		{"drain_timeouts_total", m.DrainTimeouts, 3}, // annotation, nodemaintenance, reboot
	} {
		if n := testutil.CollectAndCount(c.c); n != c.want {
			t.Errorf("%s: %d series before any drain, want %d", c.name, n, c.want)
		}
	}
}

// An engine without metrics (EngineOptions.Metrics nil) records nothing
// and must not fail for it.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.ObserveNode(&Status{Phase: PhaseRunning}, nil)
	m.ObserveStatus(nil)
	m.SetActive(true)
	m.drainProgress(map[types.UID]*podState{"a": {blockedBy: &pdbRef{"shop", "web"}}})
	m.observeDrain(TriggerAnnotation, "succeeded", time.Second)
	m.countEviction("evicted")
	m.setBlocked(nil)
	m.countTimeout(TriggerAnnotation)
	m.setTimedOut([]Blocker{{Pod: "ns/a", Reason: BlockerTerminating}})
	m.ended()
}

// drain_timed_out_pods mirrors the blockers of a timed-out drain's record,
// so an agent restarted after the timeout exports them too, and clears once
// a new drain begins or the maintenance ends.
func TestTimedOutPodsFollowTheRecord(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1700000000, 0))
	timedOut := &Status{Phase: PhaseFailed, Trigger: TriggerAnnotation, StartTime: &t0, Blockers: []Blocker{
		{Pod: "shop/web-1", Reason: BlockerPodDisruptionBudget, PodDisruptionBudget: "shop/web"},
		{Pod: "shop/web-2", Reason: BlockerPodDisruptionBudget, PodDisruptionBudget: "shop/web"},
		{Pod: "vm/launcher", Reason: BlockerTerminating},
	}}
	m := NewMetrics(nil)
	m.ObserveStatus(timedOut)
	if n := testutil.CollectAndCount(m.TimedOutPods); n != 2 {
		t.Fatalf("%d series, want 2 (a budget and a reason)", n)
	}
	if v := testutil.ToFloat64(m.TimedOutPods.WithLabelValues("PodDisruptionBudget", "shop/web")); v != 2 {
		t.Errorf("PodDisruptionBudget shop/web = %v, want 2", v)
	}
	if v := testutil.ToFloat64(m.TimedOutPods.WithLabelValues("Terminating", "")); v != 1 {
		t.Errorf("Terminating = %v, want 1", v)
	}
	shutdown := *timedOut
	shutdown.Trigger = TriggerShutdown
	for name, st := range map[string]*Status{
		"a new drain began":              {Phase: PhaseRunning, Trigger: TriggerAnnotation, StartTime: &t0},
		"a shutdown drain's own failure": &shutdown,
		"no record":                      nil,
	} {
		m.ObserveStatus(timedOut)
		m.ObserveStatus(st)
		if n := testutil.CollectAndCount(m.TimedOutPods); n != 0 {
			t.Errorf("%s: %d series, want none", name, n)
		}
	}
	m.ObserveStatus(timedOut)
	m.ended()
	if n := testutil.CollectAndCount(m.TimedOutPods); n != 0 {
		t.Errorf("after the maintenance ended: %d series, want none", n)
	}
}
