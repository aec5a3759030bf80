package selfdrain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// Tests of what a maintenance drain says when drain.timeout passes: which
// pods held it and why.

func TestBlockerOf(t *testing.T) {
	deleting := metav1.NewTime(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC))
	pdb := refusal("The disruption budget db needs 3 healthy pods and has 3 currently")
	migrating := apierrors.NewTooManyRequests("Eviction triggered evacuation of VMI vm/fedora", 0)
	etcd := apierrors.NewInternalError(errors.New("etcd is down"))
	tests := []struct {
		name       string
		ps         podState
		grace      *int64
		deletion   *metav1.Time
		wantReason BlockerReason
		wantBudget string
		wantDetail string
	}{
		{name: "a budget refused", ps: podState{blockedBy: &pdbRef{"ns", "db"}, lastErr: pdb},
			wantReason: BlockerPodDisruptionBudget, wantBudget: "ns/db", wantDetail: "The disruption budget db needs 3 healthy pods and has 3 currently"},
		{name: "refused, no budget named", ps: podState{blockedBy: &pdbRef{"ns", ""}, lastErr: migrating},
			wantReason: BlockerEvictionRefused, wantDetail: "Eviction triggered evacuation of VMI vm/fedora"},
		{name: "another error", ps: podState{lastErr: etcd}, wantReason: BlockerEvictionFailed, wantDetail: "etcd is down"},
		{name: "evicted, long grace period", ps: podState{evicted: true}, grace: ptr.To(int64(3600)),
			wantReason: BlockerTerminating, wantDetail: "grace period 1h0m0s, eviction accepted"},
		{name: "deleted by someone else, after a refusal", ps: podState{blockedBy: &pdbRef{"ns", "db"}, lastErr: pdb}, grace: ptr.To(int64(30)), deletion: &deleting,
			wantReason: BlockerTerminating, wantDetail: "grace period 30s, to be killed at 2026-01-01T01:00:00Z"},
		{name: "never answered", ps: podState{inFlight: true}, wantReason: BlockerNotEvictedYet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod("a")
			pod.Spec.TerminationGracePeriodSeconds = tt.grace
			pod.DeletionTimestamp = tt.deletion
			tt.ps.key, tt.ps.pod = "ns/a", *pod
			b := blockerOf(&tt.ps, pod)
			if b.Pod != "ns/a" || b.Reason != tt.wantReason || b.PodDisruptionBudget != tt.wantBudget || !strings.Contains(b.Detail, tt.wantDetail) {
				t.Errorf("blocker = %+v, want %s, budget %q, detail containing %q", b, tt.wantReason, tt.wantBudget, tt.wantDetail)
			}
		})
	}
}

func TestDescribeBlockers(t *testing.T) {
	var bs []Blocker
	for _, p := range []string{"db-0", "db-1", "db-2", "db-3", "db-4", "db-5", "db-6"} {
		bs = append(bs, Blocker{Pod: "ns/" + p, Reason: BlockerPodDisruptionBudget, PodDisruptionBudget: "ns/db", Detail: "The disruption budget db needs 7 healthy pods and has 7 currently"})
	}
	bs = append(bs,
		Blocker{Pod: "ns/web-0", Reason: BlockerPodDisruptionBudget, PodDisruptionBudget: "ns/web", Detail: "The disruption budget web needs 1 healthy pods and has 1 currently"},
		Blocker{Pod: "vm/launcher", Reason: BlockerTerminating, Detail: "grace period 1h0m0s, eviction accepted"},
	)
	got := describeBlockers(bs)
	want := "PodDisruptionBudget ns/db refused the eviction of ns/db-0, ns/db-1, ns/db-2, ns/db-3, ns/db-4 and 2 more (The disruption budget db needs 7 healthy pods and has 7 currently); " +
		"PodDisruptionBudget ns/web refused the eviction of ns/web-0 (The disruption budget web needs 1 healthy pods and has 1 currently); " +
		"still terminating: vm/launcher (grace period 1h0m0s, eviction accepted)"
	if got != want {
		t.Errorf("describeBlockers =\n%s\nwant\n%s", got, want)
	}
	if got := describeBlockers(nil); got != "no pod stayed" {
		t.Errorf("describeBlockers(nil) = %q", got)
	}
}

func TestTruncate(t *testing.T) {
	s := strings.Repeat("é", 10) // 20 bytes
	got := truncate(s, 8)
	if len(got) > 8 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("truncate = %q (%d bytes), want at most 8 valid bytes ending in …", got, len(got))
	}
	if truncate("short", 8) != "short" {
		t.Error("truncate changed a short string")
	}
}

// acceptButKeep answers the eviction of name by accepting it and marking
// the pod for deletion with grace seconds, as kube-apiserver does for a pod
// with a termination grace period: the pod stays until its containers stop.
func acceptButKeep(h *harness, name string, grace int64) {
	h.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ev, ok := a.(k8stesting.CreateAction).GetObject().(interface{ GetName() string })
		if a.GetSubresource() != "eviction" || !ok || ev.GetName() != name {
			return false, nil, nil
		}
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		obj, err := h.client.Tracker().Get(gvr, "ns", name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		at := metav1.NewTime(h.clock.Now().Add(time.Duration(grace) * time.Second))
		pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &at, &grace
		return true, nil, h.client.Tracker().Update(gvr, pod, "ns")
	})
}

// A drain that times out names, in its status, condition, Event and
// metrics, every pod that stayed and why: the budget that refused it, or a
// grace period still running.
func TestDrainTimeoutNamesTheBlockers(t *testing.T) {
	h := newHarness(t, testPod("db-0"), testPod("db-1"), testPod("vm"), testPod("web"))
	h.engine.Metrics = NewMetrics(nil)
	h.onEvict(func(ev eviction) error {
		if strings.HasPrefix(ev.key, "ns/db-") {
			return refusal("The disruption budget db needs 2 healthy pods and has 2 currently")
		}
		return nil
	})
	acceptButKeep(h, "vm", 3600)
	timeout := 30 * time.Second
	h.engine.Config.Timeout = metav1.Duration{Duration: timeout}
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation},
		Request{Trigger: TriggerAnnotation, Deadline: h.clock.Now().Add(timeout), AfterTimeout: "What follows is the caller's policy."})
	if err != nil {
		t.Fatal(err)
	}
	want := []Blocker{
		{Pod: "ns/db-0", Reason: BlockerPodDisruptionBudget, PodDisruptionBudget: "ns/db", Detail: "The disruption budget db needs 2 healthy pods and has 2 currently"},
		{Pod: "ns/db-1", Reason: BlockerPodDisruptionBudget, PodDisruptionBudget: "ns/db", Detail: "The disruption budget db needs 2 healthy pods and has 2 currently"},
		{Pod: "ns/vm", Reason: BlockerTerminating},
	}
	written := h.status()
	if len(written.Blockers) != len(want) {
		t.Fatalf("blockers on the Node = %+v, want %+v", written.Blockers, want)
	}
	for i, b := range written.Blockers {
		w := want[i]
		if b.Pod != w.Pod || b.Reason != w.Reason || b.PodDisruptionBudget != w.PodDisruptionBudget || (w.Detail != "" && b.Detail != w.Detail) {
			t.Errorf("blocker %d = %+v, want %+v", i, b, w)
		}
	}
	if d := written.Blockers[2].Detail; !strings.Contains(d, "grace period 1h0m0s") {
		t.Errorf("terminating pod's detail %q does not name its grace period", d)
	}
	if st.Phase != PhaseFailed || !strings.Contains(st.LastError, "PodDisruptionBudget ns/db") {
		t.Errorf("status = %s, want Failed with lastError naming the budget", st.Encode())
	}
	cond := h.condition(ConditionType)
	if cond == nil || cond.Reason != ReasonDrainFailed {
		t.Fatalf("condition = %+v, want reason %s", cond, ReasonDrainFailed)
	}
	for _, s := range []string{"timed out after 30s", "stopped evicting", "3 of 4 pods stayed", "PodDisruptionBudget ns/db refused the eviction of ns/db-0, ns/db-1", "still terminating: ns/vm (grace period 1h0m0s", "What follows is the caller's policy."} {
		if !strings.Contains(cond.Message, s) {
			t.Errorf("condition message %q lacks %q", cond.Message, s)
		}
	}
	var timedOut string
	for _, ev := range h.events() {
		if strings.HasPrefix(ev, "Warning DrainTimedOut ") {
			timedOut = ev
		}
	}
	if !strings.Contains(timedOut, "PodDisruptionBudget ns/db") || !strings.Contains(timedOut, "ns/vm") {
		t.Errorf("DrainTimedOut Event %q does not name the budget and the terminating pod", timedOut)
	}
	m := h.engine.Metrics
	if v := testutil.ToFloat64(m.TimedOutPods.WithLabelValues("PodDisruptionBudget", "ns/db")); v != 2 {
		t.Errorf("drain_timed_out_pods{PodDisruptionBudget, ns/db} = %v, want 2", v)
	}
	if v := testutil.ToFloat64(m.TimedOutPods.WithLabelValues("Terminating", "")); v != 1 {
		t.Errorf("drain_timed_out_pods{Terminating} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.DrainTimeouts.WithLabelValues("annotation")); v != 1 {
		t.Errorf("drain_timeouts_total{annotation} = %v, want 1", v)
	}
	if n := testutil.CollectAndCount(m.BlockedPods); n != 0 {
		t.Errorf("drain_blocked_pods has %d series after the drain ended, want none", n)
	}
}
