package selfdrain

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// TestSlotErrorIsReported: a slot that cannot be taken because of an error
// (here the namespace is missing) is reported with the error each round,
// not as an ordinary wait; a slot held by another node is reported once
// with no error.
func TestSlotErrorIsReported(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), "node-agent")
	})
	clk := clocktesting.NewFakeClock(time.Now())
	s := &Slots{Client: kubetest.Wrap(client), Namespace: "node-agent", Identity: "node-1", Max: 1, LeaseDuration: 30 * time.Second,
		PollInterval: time.Second, Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan error, 10)
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, func(err error) { reports <- err })
		done <- err
	}()
	for i := range 3 {
		err := <-reports
		if err == nil || !strings.Contains(err.Error(), `namespaces "node-agent" not found`) {
			t.Fatalf("report %d = %v, want the missing namespace", i, err)
		}
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(time.Second)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire = %v, want context.Canceled", err)
	}

	// Held by another node: one report, without an error.
	held := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: SlotPrefix + "0", Namespace: "node-agent"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo("node-2"), LeaseDurationSeconds: ptrTo(int32(30)),
			RenewTime: &metav1.MicroTime{Time: clk.Now()}},
	})
	s.Client = kubetest.Wrap(held)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		_, err := s.Acquire(ctx2, func(err error) { reports <- err })
		done <- err
	}()
	if err := <-reports; err != nil {
		t.Errorf("held slot reported %v, want nil", err)
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Second)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-reports:
		t.Errorf("second report %v; a plain wait is reported once", err)
	default:
	}
	cancel2()
	<-done
}

func ptrTo[T any](v T) *T { return &v }

// TestSlotWaitNamesTheCause: the status and a Warning Event name the error
// and the key to fix, and errorOnLeaseCount counts consecutive errors.
func TestSlotWaitNamesTheCause(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	rec := record.NewFakeRecorder(10)
	e := NewEngine(EngineOptions{Client: kubetest.Wrap(client), NodeName: "node-1", Config: config.Default().Drain, Logger: slog.New(slog.DiscardHandler), Clock: clocktesting.NewFakeClock(time.Now()), Recorder: rec})
	w := &slotWait{s: &Slots{Namespace: "node-agent", Max: 1, Logger: slog.New(slog.DiscardHandler)}, e: e, trigger: TriggerNodeMaintenance, reason: "NIC replacement"}
	ctx := context.Background()
	cause := errors.New(`creating Lease node-agent/node-agent-drain-slot-0: namespaces "node-agent" not found`)
	status := func() *Status {
		n, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := ParseStatus(n)
		if err != nil || st == nil {
			t.Fatalf("status %v, %v", st, err)
		}
		return st
	}

	w.report(ctx, cause)
	w.report(ctx, cause)
	st := status()
	if st.Phase != PhaseWaiting || st.Trigger != TriggerNodeMaintenance || st.ErrorOnLeaseCount != 2 ||
		!strings.Contains(st.LastError, `namespaces "node-agent" not found`) || !strings.Contains(st.LastError, "drain.leaseNamespace") {
		t.Errorf("status after two errors = %s", st.Encode())
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning DrainSlotError") || !strings.Contains(ev, "drain.leaseNamespace") {
		t.Errorf("event = %q", ev)
	}
	select {
	case ev := <-rec.Events:
		t.Errorf("the same cause twice made a second Event: %q", ev)
	default:
	}

	// The slots are merely held: the count starts again.
	w.report(ctx, nil)
	st = status()
	if st.ErrorOnLeaseCount != 0 || !strings.Contains(st.LastError, "drain.maxConcurrentNodes") {
		t.Errorf("status after a plain wait = %s", st.Encode())
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Normal MaintenanceWaiting") {
		t.Errorf("event = %q", ev)
	}
}

// TestSlotWaitKeepsABegunDrain: a drain that already cordoned the node (the
// agent restarted mid-drain and cannot get a slot back) keeps its record of
// what the agent changed; only lastError and the count change.
func TestSlotWaitKeepsABegunDrain(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	begun := &Status{Phase: PhaseRunning, Trigger: TriggerNodeMaintenance, Reason: "NIC", StartTime: &start,
		TotalPods: 5, EvictionPods: 4, PendingPods: []string{"work/a"}, DrainProgress: 75, CordonedByAgent: true, TaintedByAgent: true}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{StatusAnnotation: begun.Encode()}},
		Spec: corev1.NodeSpec{Unschedulable: true}}
	client := fake.NewClientset(node)
	e := NewEngine(EngineOptions{Client: kubetest.Wrap(client), NodeName: "node-1", Config: config.Default().Drain, Logger: slog.New(slog.DiscardHandler), Clock: clocktesting.NewFakeClock(time.Now()), Recorder: record.NewFakeRecorder(10)})
	w := &slotWait{s: &Slots{Namespace: "node-agent", Max: 1, Logger: slog.New(slog.DiscardHandler)}, e: e, trigger: TriggerNodeMaintenance, reason: "NIC"}
	w.report(context.Background(), errors.New("leases is forbidden"))
	n, err := client.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStatus(n)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseRunning || !st.CordonedByAgent || !st.TaintedByAgent || !st.StartTime.Equal(&start) || st.EvictionPods != 4 ||
		st.ErrorOnLeaseCount != 1 || !strings.Contains(st.LastError, "leases is forbidden") {
		t.Errorf("record after a slot error = %s", st.Encode())
	}
}

// TestHeldKeptAcrossReboot: a slot kept across a reboot is written with the
// longer duration and is not given back when the agent stops; the agent
// after the reboot takes its own slot back at once and, at its end, gives it
// back. A slot not kept is given back.
func TestHeldKeptAcrossReboot(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	newSlots := func() *Slots {
		return &Slots{Client: kubetest.Wrap(client), Namespace: "node-agent", Identity: "node-1", Max: 2, LeaseDuration: 30 * time.Second,
			PollInterval: time.Second, Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	}
	lease := func(name string) *coordinationv1.Lease {
		l, err := client.CoordinationV1().Leases("node-agent").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	h, err := newSlots().AcquireHeld(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.KeepAcrossReboot(context.Background(), 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	h.Release()
	l := lease(h.Name())
	if holder := ptrDeref(l.Spec.HolderIdentity); holder != "node-1" || *l.Spec.LeaseDurationSeconds != 1800 {
		t.Fatalf("after the agent stopped: holder %q for %ds, want node-1 for 1800s", holder, *l.Spec.LeaseDurationSeconds)
	}

	// The agent after the reboot: its own slot, at once, at the usual
	// duration; released at the end.
	clk.Step(10 * time.Minute)
	h2, err := newSlots().AcquireHeld(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Name() != h.Name() {
		t.Fatalf("took %s, want its own %s back", h2.Name(), h.Name())
	}
	if l := lease(h2.Name()); *l.Spec.LeaseDurationSeconds != 30 {
		t.Fatalf("duration %ds after taking it back, want 30", *l.Spec.LeaseDurationSeconds)
	}
	h2.Release()
	h2.Release() // twice is fine
	if holder := ptrDeref(lease(h2.Name()).Spec.HolderIdentity); holder != "" {
		t.Fatalf("holder %q after Release, want none", holder)
	}
}

func ptrDeref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestSlotWaitIsAWatch: a node that waits for a slot makes no Lease request
// while nothing changes, however long it waits before the holder's expiry,
// and takes the slot as soon as the holder releases it.
func TestSlotWaitIsAWatch(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	now := metav1.NewMicroTime(clk.Now())
	if _, err := client.CoordinationV1().Leases("node-agent").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: SlotPrefix + "0", Namespace: "node-agent"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptrTo("node-2"), LeaseDurationSeconds: ptrTo(int32(3600)), RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &Slots{Client: kubetest.Wrap(client), Namespace: "node-agent", Identity: "node-1", Max: 1, LeaseDuration: 30 * time.Second,
		PollInterval: time.Second, Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	waiting := make(chan struct{}, 1)
	got := make(chan *Held, 1)
	go func() {
		h, err := s.AcquireHeld(context.Background(), func(err error) {
			if err == nil {
				waiting <- struct{}{}
			}
		})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	<-waiting
	leaseActions := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetResource().Resource == "leases" {
				n++
			}
		}
		return n
	}
	// Let the waiter reach its watch (list, then watch).
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	before := leaseActions()
	for range 10 {
		clk.Step(time.Minute) // 10 minutes, the holder's Lease runs an hour
		time.Sleep(5 * time.Millisecond)
	}
	if after := leaseActions(); after != before {
		t.Fatalf("%d Lease requests while waiting and nothing changed, want 0 (a poll, not a watch)", after-before)
	}
	l, err := client.CoordinationV1().Leases("node-agent").Get(context.Background(), SlotPrefix+"0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = nil
	if _, err := client.CoordinationV1().Leases("node-agent").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h == nil || ptrDeref(func() *coordinationv1.Lease {
			l, _ := client.CoordinationV1().Leases("node-agent").Get(context.Background(), SlotPrefix+"0", metav1.GetOptions{})
			return l
		}().Spec.HolderIdentity) != "node-1" {
			t.Fatal("the slot was not taken after its release")
		}
		h.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not take the released slot; it did not see the watch event")
	}
}

// TestSlotWaitersStayQuiet: many nodes wait for the one slot. A renewal of
// the held slot costs them no request; when the slot comes free, a waiter
// takes it and, thanks to TakeJitter, only a few try at all, where without
// it every waiter writes (and on a real apiserver all but one fail).
func TestSlotWaitersStayQuiet(t *testing.T) {
	for _, tc := range []struct {
		jitter time.Duration
		// writes to the Lease after its release, the winner's included
		minTries, maxTries int
	}{
		{jitter: 500 * time.Millisecond, minTries: 1, maxTries: 5},
		// The contrast: without jitter every waiter writes at once.
		{jitter: 0, minTries: 10, maxTries: 20},
	} {
		t.Run("jitter "+tc.jitter.String(), func(t *testing.T) {
			const waiters = 20
			client := fake.NewClientset()
			ctx := t.Context()
			now := metav1.NewMicroTime(time.Now())
			leases := client.CoordinationV1().Leases("node-agent")
			if _, err := leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: SlotPrefix + "0", Namespace: "node-agent"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptrTo("holder"), LeaseDurationSeconds: ptrTo(int32(3600)), RenewTime: &now},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			got := make(chan *Held, waiters)
			waiting := make(chan struct{}, waiters)
			for i := range waiters {
				s := &Slots{Client: kubetest.Wrap(client), Namespace: "node-agent", Identity: "node-" + string(rune('a'+i)), Max: 1,
					LeaseDuration: 30 * time.Second, PollInterval: time.Second, TakeJitter: tc.jitter, Clock: clockReal{}, Logger: slog.New(slog.DiscardHandler)}
				go func() {
					h, err := s.AcquireHeld(ctx, func(err error) {
						if err == nil {
							waiting <- struct{}{}
						}
					})
					if err == nil {
						got <- h
					}
				}()
			}
			for range waiters {
				<-waiting
			}
			writes := func() int {
				n := 0
				for _, a := range client.Actions() {
					if a.GetResource().Resource == "leases" && (a.GetVerb() == "update" || a.GetVerb() == "create" || a.GetVerb() == "get") {
						n++
					}
				}
				return n
			}
			time.Sleep(50 * time.Millisecond) // every waiter on its watch
			// The holder renews: nobody tries.
			l, _ := leases.Get(ctx, SlotPrefix+"0", metav1.GetOptions{})
			renewed := metav1.NewMicroTime(time.Now())
			l.Spec.RenewTime = &renewed
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			before := writes()
			time.Sleep(100 * time.Millisecond)
			if n := writes() - before; n != 0 {
				t.Fatalf("a renewal of the held slot made the waiters send %d requests, want 0", n)
			}
			// The holder releases: one waiter takes the slot.
			l, _ = leases.Get(ctx, SlotPrefix+"0", metav1.GetOptions{})
			l.Spec.HolderIdentity = nil
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			before = writes()
			var h *Held
			select {
			case h = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("no waiter took the released slot")
			}
			time.Sleep(tc.jitter + 100*time.Millisecond) // the other waiters' delays run out
			tries := writes() - before
			t.Logf("%d waiters, jitter %s: %d writes to the slot after its release", waiters, tc.jitter, tries)
			if tries < tc.minTries || tries > tc.maxTries {
				t.Errorf("%d writes after the release, want %d to %d", tries, tc.minTries, tc.maxTries)
			}
			// Which waiters' writes won is not checked here: the fake
			// clientset has no optimistic concurrency (every Update
			// succeeds). That only one node holds a slot is checked on the
			// real apiserver (test/integration, make scale).
			h.Release()
			for {
				select {
				case other := <-got:
					other.Release()
					continue
				default:
				}
				break
			}
		})
	}
}

// clockReal is the real clock as a clock.WithTicker.
type clockReal = clock.RealClock

// TestHeldRenewsWithoutReading: taking a free slot is one list and one
// write; the holder renews and releases from the Lease as it last wrote it,
// one write each and no read.
func TestHeldRenewsWithoutReading(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	s := &Slots{Client: kubetest.Wrap(client), Namespace: "node-agent", Identity: "node-1", Max: 1, LeaseDuration: 30 * time.Second,
		PollInterval: time.Second, Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	h, err := s.AcquireHeld(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	verbs := func() []string {
		var out []string
		for _, a := range client.Actions() {
			if a.GetResource().Resource == "leases" {
				out = append(out, a.GetVerb())
			}
		}
		client.ClearActions()
		return out
	}
	if got := strings.Join(verbs(), " "); got != "list create" {
		t.Errorf("taking a free slot: %s, want list create", got)
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(10 * time.Second) // a third of the Lease: the renewal
	for i := 0; i < 1000 && len(client.Actions()) == 0; i++ {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	if got := strings.Join(verbs(), " "); got != "update" {
		t.Errorf("renewing: %s, want update", got)
	}
	h.Release()
	if got := strings.Join(verbs(), " "); got != "update" {
		t.Errorf("releasing: %s, want update", got)
	}
	l, err := client.CoordinationV1().Leases("node-agent").Get(t.Context(), SlotPrefix+"0", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity != nil {
		t.Errorf("after Release the slot is %+v (%v), want no holder", l, err)
	}
}
