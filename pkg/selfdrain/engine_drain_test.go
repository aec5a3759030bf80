package selfdrain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// Tests of Engine.Drain end to end on the fake clientset, and of the drain
// run's steps one at a time.

func TestDrainEvictsEveryPod(t *testing.T) {
	h := newHarness(t, testPod("a"), testPod("b"), testPod("c"))
	h.onEvict(func(eviction) error { return nil })
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}, Request{Trigger: TriggerAnnotation})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseSucceeded || st.EvictionPods != 3 || st.TotalPods != 3 || len(st.PendingPods) != 0 {
		t.Errorf("status = %+v, want Succeeded with 3 of 3 pods evicted", st)
	}
	if got := len(h.evicted()); got != 3 {
		t.Errorf("%d eviction requests, want 3", got)
	}
	if c := h.condition(ConditionType); c == nil || c.Reason != ReasonDrained {
		t.Errorf("condition = %+v, want reason %s", c, ReasonDrained)
	}
	written, err := ParseStatus(h.node())
	if err != nil || written.Phase != PhaseSucceeded {
		t.Errorf("status on the Node = %+v (%v), want Succeeded", written, err)
	}
}

func TestDrainSendsThePodUIDAsPrecondition(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	if _, err := h.drain(context.Background(), &Status{Phase: PhaseRunning}, Request{}); err != nil {
		t.Fatal(err)
	}
	ev := h.evicted()
	if len(ev) != 1 || ev[0].uid != "uid-a" {
		t.Errorf("evictions = %+v, want one with the UID precondition uid-a", ev)
	}
}

// A budget that refuses with 429 is asked again after the backoff, not
// before, and the status names it meanwhile.
func TestDrainBacksOffOnPDBRefusal(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error {
		if len(h.evicted()) <= 3 {
			return refusal("The disruption budget web-pdb needs 1 healthy pods and has 1 currently")
		}
		return nil
	})
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning}, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseSucceeded {
		t.Fatalf("phase = %s, want Succeeded", st.Phase)
	}
	ev := h.evicted()
	if len(ev) != 4 {
		t.Fatalf("%d eviction requests, want 4 (three refused)", len(ev))
	}
	for i := 1; i < len(ev); i++ {
		if gap, want := ev[i].at.Sub(ev[i-1].at), backoff(i, retryCap, nil); gap < want {
			t.Errorf("retry %d came %s after the last, before its backoff %s", i, gap, want)
		}
	}
}

func TestDrainDeadline(t *testing.T) {
	h := newHarness(t, testPod("a"), testPod("b"))
	h.onEvict(func(ev eviction) error {
		if ev.key == "ns/b" {
			return refusal("The disruption budget db-pdb needs 1 healthy pods and has 1 currently")
		}
		return nil
	})
	deadline := h.clock.Now().Add(30 * time.Second)
	var st *Status
	var err error
	// The clock moves once both pods were asked for.
	h.run(func() {
		st, err = h.engine.Drain(context.Background(), &Status{Phase: PhaseRunning}, Request{Trigger: TriggerShutdown, Deadline: deadline})
	}, func() bool { return len(h.evicted()) >= 2 })
	if err != nil {
		t.Fatal(err)
	}
	if h.clock.Now().Before(deadline) {
		t.Errorf("Drain returned at %s, before its deadline %s", h.clock.Now(), deadline)
	}
	if st.Phase != PhaseFailed || len(st.PendingPods) != 1 || st.PendingPods[0] != "ns/b" {
		t.Errorf("status = %+v, want Failed with ns/b pending", st)
	}
	if !strings.Contains(st.LastError, "db-pdb") {
		t.Errorf("lastError %q does not name the budget", st.LastError)
	}
	if c := h.condition(ConditionType); c == nil || c.Reason != ReasonDrainFailed {
		t.Errorf("condition = %+v, want reason %s", c, ReasonDrainFailed)
	}
}

// A maintenance drain stops at its deadline (drain.timeout): Drain returns
// Failed with the pod that stayed, and says so in a DrainTimedOut Event.
func TestDrainStopsAtTheTimeout(t *testing.T) {
	h := newHarness(t, testPod("a"), testPod("b"))
	h.onEvict(func(ev eviction) error {
		if ev.key == "ns/a" {
			return refusal("The disruption budget web-pdb needs 1 healthy pods and has 1 currently")
		}
		return nil
	})
	deadline := h.clock.Now().Add(5 * time.Second)
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}, Request{Trigger: TriggerAnnotation, Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	if h.clock.Now().Before(deadline) {
		t.Errorf("Drain returned at %s, before its deadline %s", h.clock.Now(), deadline)
	}
	if st.Phase != PhaseFailed || len(st.PendingPods) != 1 || st.PendingPods[0] != "ns/a" {
		t.Errorf("status = %s, want Failed with ns/a pending", st.Encode())
	}
	if written := h.status(); written.Phase != PhaseFailed {
		t.Errorf("status on the Node = %s, want Failed", written.Encode())
	}
	if c := h.condition(ConditionType); c == nil || c.Reason != ReasonDrainFailed {
		t.Errorf("condition = %+v, want reason %s", c, ReasonDrainFailed)
	}
	if ev := h.events(); !hasEvent(ev, "Warning DrainTimedOut") {
		t.Errorf("events = %q, want DrainTimedOut", ev)
	}
}

// A drain resumed after its deadline (the agent was down when it passed)
// asks for no eviction at all.
func TestDrainResumedPastItsDeadline(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation},
		Request{Trigger: TriggerAnnotation, Deadline: h.clock.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseFailed {
		t.Errorf("phase = %s, want Failed", st.Phase)
	}
	if ev := h.evicted(); len(ev) != 0 {
		t.Errorf("evictions %+v after the deadline, want none", ev)
	}
}

// A resumed drain keeps the counts of the first attempt.
func TestDrainResumeKeepsTheCounts(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, TotalPods: 7, EvictionPods: 5}, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if st.TotalPods != 7 || st.EvictionPods != 5 || st.DrainProgress != 100 {
		t.Errorf("status = %+v, want the first attempt's counts 7 and 5, progress 100", st)
	}
}

// An eviction in flight when the attempt ends is waited for, not cut off
// (see startWorkers).
func TestDrainWaitsForTheEvictionInFlight(t *testing.T) {
	h := newHarness(t, testPod("a"))
	arrived, release := make(chan struct{}), make(chan struct{})
	h.onEvict(func(eviction) error {
		close(arrived)
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.engine.Drain(ctx, &Status{Phase: PhaseRunning}, Request{})
		done <- err
	}()
	<-arrived
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Drain returned (%v) with its eviction request still in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Drain = %v, want context.Canceled", err)
	}
}

func TestHandleResult(t *testing.T) {
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a")
	uidChanged := apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "a", errors.New("UID precondition failed"))
	tests := []struct {
		name      string
		err       error
		failed    bool
		pending   bool
		evicted   bool
		nextAfter time.Duration
		blockedBy *pdbRef
	}{
		{name: "accepted", pending: true, evicted: true},
		{name: "pod gone", err: gone},
		{name: "UID precondition failed", err: uidChanged},
		{name: "budget refused", err: refusal("The disruption budget web-pdb needs 1 healthy pods and has 1 currently"),
			pending: true, nextAfter: RetryInitial, blockedBy: &pdbRef{"ns", "web-pdb"}},
		{name: "server error", err: apierrors.NewInternalError(errors.New("etcd")), pending: true, nextAfter: RetryInitial},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			r := h.engine.newDrainRun(context.Background(), &Status{}, Request{})
			pod := testPod("a")
			ps := &podState{key: "ns/a", pod: *pod, inFlight: true}
			r.pending[pod.UID] = ps
			r.handleResult(evictResult{key: string(pod.UID), err: tt.err})
			_, pending := r.pending[pod.UID]
			if pending != tt.pending || ps.evicted != tt.evicted || ps.inFlight {
				t.Fatalf("pending %t, evicted %t, inFlight %t; want %t, %t, false", pending, ps.evicted, ps.inFlight, tt.pending, tt.evicted)
			}
			if got := ps.nextAttempt.Sub(h.clock.Now()); tt.nextAfter > 0 && got != tt.nextAfter {
				t.Errorf("next attempt in %s, want %s", got, tt.nextAfter)
			}
			if (ps.blockedBy == nil) != (tt.blockedBy == nil) || (ps.blockedBy != nil && *ps.blockedBy != *tt.blockedBy) {
				t.Errorf("blockedBy = %v, want %v", ps.blockedBy, tt.blockedBy)
			}
			if tt.nextAfter > 0 && !strings.Contains(r.st.LastError, "ns/a") {
				t.Errorf("lastError %q does not name the pod", r.st.LastError)
			}
		})
	}
}

func TestDispatch(t *testing.T) {
	h := newHarness(t)
	r := h.engine.newDrainRun(context.Background(), &Status{}, Request{})
	r.work = make(chan *podState, 10)
	now := h.clock.Now()
	add := func(name string, ps podState) {
		ps.key, ps.pod = "ns/"+name, *testPod(name)
		r.pending[types.UID("uid-"+name)] = &ps
	}
	add("due", podState{nextAttempt: now})
	add("later", podState{nextAttempt: now.Add(3 * time.Second)})
	add("soon", podState{nextAttempt: now.Add(time.Second)})
	add("inflight", podState{inFlight: true})
	add("evicted", podState{evicted: true})
	next, ok := r.dispatch(now)
	if !ok || !next.Equal(now.Add(time.Second)) {
		t.Errorf("dispatch = %s, %t; want the soonest retry %s", next, ok, now.Add(time.Second))
	}
	close(r.work)
	var sent []string
	for ps := range r.work {
		sent = append(sent, ps.key)
	}
	if len(sent) != 1 || sent[0] != "ns/due" || !r.pending["uid-due"].inFlight {
		t.Errorf("dispatched %v, want only ns/due, marked in flight", sent)
	}
}

func TestDispatchStopsWithTheContext(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := h.engine.newDrainRun(ctx, &Status{}, Request{})
	r.work = make(chan *podState) // no worker takes it
	r.pending["uid-a"] = &podState{key: "ns/a", pod: *testPod("a")}
	if _, ok := r.dispatch(h.clock.Now()); ok {
		t.Error("dispatch went on after the context ended")
	}
}

// Begin on a Node whose drain is already running resumes it: what the agent
// recorded it did stays, though the node is now cordoned.
func TestBeginResumes(t *testing.T) {
	h := newHarness(t)
	first, err := h.engine.Begin(context.Background(), Request{Trigger: TriggerAnnotation, Reason: "kernel"})
	if err != nil {
		t.Fatal(err)
	}
	if !first.CordonedByAgent || !first.TaintedByAgent {
		t.Fatalf("first Begin = %+v, want cordoned and tainted by the agent", first)
	}
	again, err := h.engine.Begin(context.Background(), Request{Trigger: TriggerAnnotation, Reason: "kernel"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.CordonedByAgent || !again.TaintedByAgent || !again.StartTime.Equal(first.StartTime) {
		t.Errorf("resumed Begin = %+v, want the first record kept", again)
	}
	if err := h.engine.End(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	if n := h.node(); n.Spec.Unschedulable || hasTaint(n, h.engine.Config.TaintKey) {
		t.Errorf("after End the node is still cordoned or tainted: %+v", n.Spec)
	}
	if h.condition(ConditionType) != nil {
		t.Error("after End the condition is still there")
	}
}

// Begin after a drain that timed out starts a new attempt: the clock of
// drain.timeout and the counts start again, but the record of what the
// agent changed stays, since the node is still cordoned by it; unless the
// agent undid it at the timeout (drain.onTimeout uncordon): then the node
// as it is now (here cordoned by an admin since) is recorded afresh. A
// drain resumed while it ran keeps its clock, so a restart does not extend
// it.
func TestBeginStartsTheClock(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2025, 12, 31, 0, 0, 0, 0, time.UTC))
	tests := []struct {
		name      string
		prev      Status
		req       Trigger
		wantClock bool // the drain's start is now
		wantCount bool // the counts start again
		wantOwn   bool // the record says the agent cordoned the node
	}{
		{name: "resumed while running", prev: Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}, req: TriggerAnnotation, wantOwn: true},
		{name: "after a timeout", prev: Status{Phase: PhaseFailed, Trigger: TriggerAnnotation}, req: TriggerAnnotation, wantClock: true, wantCount: true, wantOwn: true},
		{name: "after a timeout and its undo", prev: Status{Phase: PhaseFailed, Trigger: TriggerAnnotation, UndoneAt: &t0}, req: TriggerAnnotation, wantClock: true, wantCount: true},
		{name: "after a shutdown drain", prev: Status{Phase: PhaseSucceeded, Trigger: TriggerShutdown}, req: TriggerAnnotation, wantClock: true, wantOwn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			prev := tt.prev
			prev.StartTime, prev.DrainStartTime = &t0, &t0
			prev.CordonedByAgent, prev.TaintedByAgent = true, true
			prev.TotalPods, prev.EvictionPods, prev.PendingPods = 5, 4, []string{"ns/a"}
			h.patchNode(fmt.Sprintf(`{"spec":{"unschedulable":true},"metadata":{"annotations":{%q:%q}}}`, StatusAnnotation, prev.Encode()))
			st, err := h.engine.Begin(context.Background(), Request{Trigger: tt.req, Reason: "kernel"})
			if err != nil {
				t.Fatal(err)
			}
			now := h.clock.Now()
			if got := st.DrainStartTime.Equal(&metav1.Time{Time: now}); got != tt.wantClock {
				t.Errorf("drainStartTime %s, now %s: restarted %t, want %t", st.DrainStartTime, now, got, tt.wantClock)
			}
			if got := st.EvictionPods == 0; got != tt.wantCount {
				t.Errorf("evictionPods %d: counted afresh %t, want %t", st.EvictionPods, got, tt.wantCount)
			}
			if st.CordonedByAgent != tt.wantOwn || !st.TaintedByAgent || st.Phase != PhaseRunning || st.UndoneAt != nil {
				t.Errorf("status %s, want Running, cordoned by the agent %t, tainted by it", st.Encode(), tt.wantOwn)
			}
		})
	}
}

// TestNodeCacheSavesReads: with the agent's informer copy of the Node, a
// maintenance's Begin, conditions and End read the Node once (End's check
// of what is active) instead of before every write. Each write stays
// conditional on the copy's resourceVersion, which the real apiserver
// enforces (test/integration runs every drain that way).
func TestNodeCacheSavesReads(t *testing.T) {
	reads := func(h *harness) int {
		n := 0
		for _, a := range h.client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
				n++
			}
		}
		return n
	}
	run := func(cache bool) int {
		h := newHarness(t)
		if cache {
			h.engine.UseNodeCache(func() (*v1.Node, error) {
				o, err := h.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", testNode)
				if err != nil {
					return nil, err
				}
				return o.(*v1.Node), nil
			})
		}
		h.client.ClearActions()
		ctx := context.Background()
		if _, err := h.engine.Begin(ctx, Request{Trigger: TriggerAnnotation, Reason: "kernel"}); err != nil {
			t.Fatal(err)
		}
		if err := h.engine.End(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		got := reads(h)
		if n := h.node(); n.Spec.Unschedulable || hasTaint(n, h.engine.Config.TaintKey) || h.condition(ConditionType) != nil {
			t.Errorf("cache %v: after End the node is still cordoned, tainted or conditioned: %+v", cache, n)
		}
		return got
	}
	without, with := run(false), run(true)
	t.Logf("GETs of the Node for Begin and End: %d without the cache, %d with it", without, with)
	if with != 1 || without <= with {
		t.Errorf("GETs: %d with the cache (want 1), %d without", with, without)
	}
}

// TestDrainSaysThePodsRefusedIt: when the node's pods refuse the drain's
// client (rights withdrawn since PodAccess last probed), the drain stops
// with the refusal in its status and a Warning Event, and tells
// PodAccessRefused so that the next drain probes again; it does not wait
// for a pod cache that cannot fill.
func TestDrainSaysThePodsRefusedIt(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("impersonation withdrawn"))
	})
	forgotten := 0
	h.engine.PodAccessRefused = func() { forgotten++ }
	st := &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}
	_, err := h.drain(context.Background(), st, Request{Trigger: TriggerAnnotation})
	if err == nil || !strings.Contains(err.Error(), "cannot read this node's pods") {
		t.Fatalf("Drain: %v; want the refusal", err)
	}
	if forgotten != 1 {
		t.Errorf("PodAccessRefused called %d times, want once", forgotten)
	}
	if got := h.status(); got == nil || !strings.Contains(got.LastError, "impersonation withdrawn") {
		t.Errorf("status on the Node %+v; want lastError with the refusal", got)
	}
	if ev := strings.Join(h.events(), "\n"); !strings.Contains(ev, "DrainRefused") {
		t.Errorf("Events %q; want DrainRefused", ev)
	}
}
