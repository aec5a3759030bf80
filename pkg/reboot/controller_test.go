package reboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/slots"
)

// fakeSlot records what the controller does with its slot; a test takes
// it back by closing lost.
type fakeSlot struct {
	released bool
	keptFor  time.Duration
	keepErr  error
	lost     chan struct{}
}

func (s *fakeSlot) Name() string          { return "node-agent-drain-slot-0" }
func (s *fakeSlot) Release()              { s.released = true }
func (s *fakeSlot) Lost() <-chan struct{} { return s.lost }
func (s *fakeSlot) LostReason() string    { return "held past its bound" }
func (s *fakeSlot) KeepAcrossReboot(_ context.Context, d time.Duration) error {
	if s.keepErr != nil {
		return s.keepErr
	}
	s.keptFor = d
	return nil
}

// fakeSlots hands out one slot at once, or blocks until free is closed.
type fakeSlots struct {
	slot *fakeSlot
	free chan struct{}
	// queued, when set, is the coordinator's Queued answer a waiting
	// Acquire reports (slots.QueueWait) instead of nil.
	queued   string
	acquires int
}

func (f *fakeSlots) Acquire(ctx context.Context, purpose slots.Purpose, onWait func(error)) (Slot, error) {
	if purpose != slots.PurposeReboot {
		return nil, fmt.Errorf("asked for a slot of purpose %q, want %q", purpose, slots.PurposeReboot)
	}
	f.acquires++
	if f.free != nil {
		if f.queued != "" {
			onWait(slots.QueueWait{Reason: f.queued})
		} else {
			onWait(nil)
		}
		select {
		case <-f.free:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.slot = &fakeSlot{lost: make(chan struct{})}
	return f.slot, nil
}

type fakeRebooter struct {
	calls int
	err   error
}

func (r *fakeRebooter) Reboot(context.Context) error { r.calls++; return r.err }

type fakeMetrics struct{ rebooted, failed, loops int }

func (m *fakeMetrics) Observe(*Record) {}
func (m *fakeMetrics) Rebooted()       { m.rebooted++ }
func (m *fakeMetrics) DrainFailed()    { m.failed++ }
func (m *fakeMetrics) Loop()           { m.loops++ }

// bed is one node with a controller; the test plays selfdrain (m), the
// host (the sentinel file, the boot ID) and the kubelet (Ready).
type bed struct {
	t        *testing.T
	cs       *fake.Clientset
	clock    *clocktesting.FakeClock
	sentinel string
	slots    *fakeSlots
	reboots  *fakeRebooter
	metrics  *fakeMetrics
	events   *record.FakeRecorder
	m        Maintenance
	c        *Controller
	opts     ControllerOptions
}

const nodeName = "node-1"

func newBed(t *testing.T, window Window) *bed {
	t.Helper()
	b := &bed{t: t, clock: clocktesting.NewFakeClock(time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)),
		sentinel: filepath.Join(t.TempDir(), "reboot-required"), slots: &fakeSlots{}, reboots: &fakeRebooter{},
		metrics: &fakeMetrics{}, events: record.NewFakeRecorder(100)}
	b.cs = fake.NewClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{BootID: "boot-1"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	})
	b.opts = ControllerOptions{
		Client: kubetest.Wrap(b.cs), NodeName: nodeName, Need: NeedChecker{SentinelFile: b.sentinel},
		Window: window, LoopBound: 24 * time.Hour, SlotHoldBound: 30 * time.Minute,
		// As reboot.preferNoScheduleTaint's default.
		PreferNoScheduleTaint: true,
		Slots:                 b.slots, Rebooter: b.reboots,
		Maintenance: func(*corev1.Node) (Maintenance, error) { return b.m, nil },
		Clock:       b.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Recorder: b.events, Metrics: b.metrics,
	}
	b.c = NewController(b.opts)
	return b
}

// restart replaces the controller, as a new agent after a reboot.
func (b *bed) restart() { b.c = NewController(b.opts) }

func (b *bed) node() *corev1.Node {
	n, err := b.cs.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *bed) update(f func(*corev1.Node)) {
	n := b.node()
	f(n)
	if _, err := b.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		b.t.Fatal(err)
	}
}

// step runs one step, then hands the controller a slot its Acquire
// returned, as Run does.
func (b *bed) step() *Record {
	b.t.Helper()
	if err := b.c.step(context.Background(), b.node()); err != nil {
		b.t.Fatalf("step: %v", err)
	}
	if b.c.acquiring != nil && b.slots.free == nil {
		a := <-b.c.got
		b.c.acquiring, b.c.slot = nil, a.slot
	}
	rec, err := ParseRecord(b.node())
	if err != nil || rec == nil {
		b.t.Fatalf("record: %v %v", rec, err)
	}
	return rec
}

func (b *bed) expect(rec *Record, state State, reason string, phase Phase) {
	b.t.Helper()
	if rec.State != state || rec.Reason != reason || rec.Phase != phase {
		b.t.Fatalf("record %s/%s phase %q, want %s/%s phase %q (%s)", rec.State, rec.Reason, rec.Phase, state, reason, phase, rec.Message)
	}
	cond := condition(b.node())
	if cond == nil || cond.Reason != reason || cond.Message != rec.Message {
		b.t.Fatalf("condition %+v does not match the record %s: %s", cond, reason, rec.Message)
	}
}

// sawEvent takes the Events recorded so far and reports whether one starts
// with prefix.
func (b *bed) sawEvent(prefix string) bool {
	for {
		select {
		case e := <-b.events.Events:
			if strings.HasPrefix(e, prefix) {
				return true
			}
		default:
			return false
		}
	}
}

func (b *bed) setSentinel(on bool) {
	if on {
		if err := os.WriteFile(b.sentinel, nil, 0o644); err != nil {
			b.t.Fatal(err)
		}
		return
	}
	if err := os.Remove(b.sentinel); err != nil {
		b.t.Fatal(err)
	}
}

func alwaysWindow(t *testing.T) Window { return mustWindow(t, nil, "00:00", "00:00", "UTC") }

func TestControllerRebootsThroughEveryPhase(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	rec := b.step()
	b.expect(rec, NotNeeded, "NotNeeded", PhaseIdle)
	if cond := condition(b.node()); cond.Status != corev1.ConditionFalse {
		t.Fatalf("condition status %s, want False", cond.Status)
	}
	if b.slots.acquires != 0 {
		t.Fatal("took a slot with no need")
	}

	b.setSentinel(true)
	rec = b.step()
	b.expect(rec, Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
	if rec.Since == nil || rec.Drain {
		t.Fatalf("since %v drain %v: want since set and no drain yet", rec.Since, rec.Drain)
	}
	rec = b.step()
	b.expect(rec, Draining, "Draining", PhaseDraining)
	if !rec.Drain || rec.Slot != "node-agent-drain-slot-0" {
		t.Fatalf("drain %v slot %q: the drain must be asked for in the slot", rec.Drain, rec.Slot)
	}

	// selfdrain drains.
	b.m = Maintenance{Active: true}
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
	b.m.Drained = true
	rec = b.step()
	b.expect(rec, Rebooting, "Rebooting", PhaseRebootRequested)
	if b.reboots.calls != 1 || b.slots.slot.keptFor != 30*time.Minute || rec.BootID != "boot-1" || rec.RequestedAt == nil {
		t.Fatalf("reboots %d, slot kept for %s, boot %q, requested %v", b.reboots.calls, b.slots.slot.keptFor, rec.BootID, rec.RequestedAt)
	}
	b.expect(b.step(), Rebooting, "Rebooting", PhaseRebootRequested)
	if b.reboots.calls != 1 {
		t.Fatalf("asked logind %d times before RetryReboot", b.reboots.calls)
	}

	// The host reboots: the sentinel (in /run) is gone, a new boot ID,
	// a new agent, the kubelet not Ready yet.
	b.setSentinel(false)
	b.update(func(n *corev1.Node) {
		n.Status.NodeInfo.BootID = "boot-2"
		setReady(n, corev1.ConditionFalse)
	})
	b.restart()
	rec = b.step()
	b.expect(rec, Rebooting, "Rebooting", PhaseBack)
	if !rec.Drain || rec.LastReboot == nil || !strings.Contains(rec.Message, "Ready") {
		t.Fatalf("drain %v lastReboot %v (%s): the drain stays asked for until Ready", rec.Drain, rec.LastReboot, rec.Message)
	}
	if b.slots.acquires != 2 {
		t.Fatalf("the rebooted agent took its slot back %d times, want once", b.slots.acquires-1)
	}
	b.update(func(n *corev1.Node) { setReady(n, corev1.ConditionTrue) })
	rec = b.step()
	b.expect(rec, Rebooting, "Rebooting", PhaseBack)
	if rec.Drain || b.slots.slot.released {
		t.Fatalf("drain %v released %v: the drain must be undone before the slot goes", rec.Drain, b.slots.slot.released)
	}
	b.m = Maintenance{} // selfdrain uncordoned
	rec = b.step()
	b.expect(rec, Done, "Done", PhaseIdle)
	if !b.slots.slot.released || rec.Slot != "" || rec.SentinelSurvived || rec.Since != nil {
		t.Fatalf("released %v slot %q survived %v since %v", b.slots.slot.released, rec.Slot, rec.SentinelSurvived, rec.Since)
	}
	b.expect(b.step(), Done, "Done", PhaseIdle)
	if b.metrics.rebooted != 1 || b.metrics.loops != 0 || b.metrics.failed != 0 {
		t.Fatalf("metrics %+v", b.metrics)
	}
}

func TestControllerLoopGuard(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.setSentinel(true)
	b.step()
	b.step()
	b.m = Maintenance{Active: true, Drained: true}
	b.expect(b.step(), Rebooting, "Rebooting", PhaseRebootRequested)
	// The sentinel survives the reboot.
	b.update(func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
	b.restart()
	b.step()
	b.m = Maintenance{}
	rec := b.step()
	b.expect(rec, RebootLoop, "RebootLoop", PhaseIdle)
	if !rec.SentinelSurvived || b.metrics.loops != 1 {
		t.Fatalf("survived %v loops %d", rec.SentinelSurvived, b.metrics.loops)
	}
	acquires := b.slots.acquires
	for range 3 {
		b.clock.Step(time.Hour)
		b.expect(b.step(), RebootLoop, "RebootLoop", PhaseIdle)
	}
	if b.slots.acquires != acquires || b.reboots.calls != 1 {
		t.Fatalf("a second reboot started within the bound: acquires %d→%d, reboots %d", acquires, b.slots.acquires, b.reboots.calls)
	}
	b.clock.Step(22 * time.Hour)
	b.expect(b.step(), Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
}

func TestControllerFailedDrainIsUndoneNotRebooted(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.update(func(n *corev1.Node) { n.Annotations = map[string]string{RequestAnnotation: "kernel update"} })
	rec := b.step()
	if !strings.Contains(rec.Message, "kernel update") {
		t.Fatalf("message %q does not name the request", rec.Message)
	}
	b.step()
	b.m = Maintenance{Active: true, TimedOut: true}
	rec = b.step()
	b.expect(rec, DrainFailed, "DrainFailed", PhaseIdle)
	// The timed-out drain no longer evicts: the slot goes at once, so that
	// the next node need not wait for this one's undo.
	if rec.Drain || rec.FailedAt == nil || b.reboots.calls != 0 || !b.slots.slot.released || rec.Slot != "" || b.metrics.failed != 1 {
		t.Fatalf("drain %v failedAt %v reboots %d released %v slot %q failed %d", rec.Drain, rec.FailedAt, b.reboots.calls, b.slots.slot.released, rec.Slot, b.metrics.failed)
	}
	if _, ok := b.node().Annotations[RequestAnnotation]; ok {
		t.Fatal("the failed attempt's request is still there")
	}
	b.m = Maintenance{}
	rec = b.step()
	b.expect(rec, DrainFailed, "DrainFailed", PhaseIdle)
	if b.metrics.failed != 1 {
		t.Fatalf("failed %d: one attempt counted twice", b.metrics.failed)
	}
	if cond := condition(b.node()); cond.Status != corev1.ConditionFalse {
		t.Fatalf("condition status %s: nothing is needed any longer", cond.Status)
	}
	// A cache that still shows the old request does not start again.
	stale := b.node()
	stale.Annotations[RequestAnnotation] = "kernel update"
	if err := b.c.step(context.Background(), stale); err != nil || b.slots.acquires != 1 {
		t.Fatalf("step on a stale cache: %v, acquires %d", err, b.slots.acquires)
	}
	// Asked again: a new attempt at once.
	b.update(func(n *corev1.Node) { n.Annotations[RequestAnnotation] = "try again" })
	b.expect(b.step(), Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
}

func TestControllerWaitsAndSaysWhy(t *testing.T) {
	t.Run("outside the window", func(t *testing.T) {
		b := newBed(t, mustWindow(t, []string{"sat"}, "02:00", "04:00", "Europe/Berlin"))
		b.setSentinel(true)
		rec := b.step()
		b.expect(rec, Pending, "OutsideWindow", PhaseIdle)
		if b.slots.acquires != 0 {
			t.Fatal("took a slot outside the window")
		}
	})
	t.Run("other maintenance", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		b.setSentinel(true)
		b.m = Maintenance{Other: true}
		b.expect(b.step(), Pending, "InMaintenance", PhaseIdle)
	})
	t.Run("blocked, then free, then slot", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		blocked := &staticBlockers{[]Blocker{{Kind: BlockerAlert, Name: "EtcdDown"}}}
		b.opts.Blockers = []BlockerSource{blocked}
		b.slots.free = make(chan struct{})
		b.restart()
		b.setSentinel(true)
		rec := b.step()
		b.expect(rec, Pending, "BlockedByAlerts", PhaseIdle)
		if !strings.Contains(rec.Message, "EtcdDown") {
			t.Fatalf("message %q", rec.Message)
		}
		blocked.bs = nil
		b.expect(b.step(), Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
		close(b.slots.free)
		a := <-b.c.got
		b.c.acquiring, b.c.slot = nil, a.slot
		b.expect(b.step(), Draining, "Draining", PhaseDraining)
	})
	t.Run("queued: the coordinator's answer in the message, not as an error", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		b.slots.free = make(chan struct{})
		b.slots.queued = "pool default: 1 of 1 nodes drain (limit); slots held by node-1 since 2026-11-29T02:23:33Z"
		b.restart()
		b.setSentinel(true)
		b.expect(b.step(), Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
		deadline := time.Now().Add(10 * time.Second)
		for {
			rec := b.step()
			if strings.Contains(rec.Message, "the coordinator's answer: "+b.slots.queued) {
				if strings.Contains(rec.Message, "cannot take a slot") {
					t.Fatalf("message %q reads the Queued answer as a failure", rec.Message)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("message %q never names the coordinator's answer", rec.Message)
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(b.slots.free)
		<-b.c.got
	})
	t.Run("need unknown", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		b.opts.Need = NeedChecker{SentinelCommand: []string{"/usr/bin/needs-restarting", "-r"}, Runner: failingRunner{}}
		b.restart()
		rec := b.step()
		cond := condition(b.node())
		if cond.Status != corev1.ConditionUnknown || cond.Reason != ReasonUnknown || !strings.Contains(cond.Message, "no bus") || rec.Phase != PhaseIdle {
			t.Fatalf("condition %+v record %+v", cond, rec)
		}
	})
}

func TestControllerMalformedRecordChangesNothing(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.setSentinel(true)
	b.update(func(n *corev1.Node) {
		n.Annotations = map[string]string{RecordAnnotation: `{"state":"Rebooting","phase":"Sideways"}`}
	})
	before := b.node()
	if err := b.c.step(context.Background(), before); err != nil {
		t.Fatal(err)
	}
	after := b.node()
	if after.ResourceVersion != before.ResourceVersion || b.slots.acquires != 0 || b.reboots.calls != 0 {
		t.Fatalf("changed the node (rv %s→%s), acquires %d, reboots %d", before.ResourceVersion, after.ResourceVersion, b.slots.acquires, b.reboots.calls)
	}
	select {
	case e := <-b.events.Events:
		if !strings.Contains(e, "MalformedRebootRecord") || !strings.Contains(e, "Sideways") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no Event says the record is malformed")
	}
}

func TestControllerDoesNotRebootWithoutKeepingTheSlot(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.setSentinel(true)
	b.step()
	b.step()
	b.slots.slot.keepErr = errors.New("lease update refused")
	b.m = Maintenance{Active: true, Drained: true}
	rec := b.step()
	if b.reboots.calls != 0 || rec.Phase != PhaseDrained || !strings.Contains(rec.Message, "lease update refused") {
		t.Fatalf("reboots %d phase %s message %q", b.reboots.calls, rec.Phase, rec.Message)
	}
	b.slots.slot.keepErr = nil
	b.expect(b.step(), Rebooting, "Rebooting", PhaseRebootRequested)
	if b.reboots.calls != 1 {
		t.Fatalf("reboots %d", b.reboots.calls)
	}
}

type staticBlockers struct{ bs []Blocker }

func (s *staticBlockers) Blockers(context.Context) []Blocker { return s.bs }

type failingRunner struct{}

func (failingRunner) Run(context.Context, []string) (int, error) { return 0, errors.New("no bus") }

func setReady(n *corev1.Node, s corev1.ConditionStatus) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = s
		}
	}
}

// Removing the sentinel while the node drains calls the reboot off: the
// drain is undone, then the slot given back; the host is not rebooted.
func TestControllerCancelledWhileDraining(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.setSentinel(true)
	b.step()
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
	b.m = Maintenance{Active: true}
	b.setSentinel(false)
	rec := b.step()
	b.expect(rec, NotNeeded, "NotNeeded", PhaseIdle)
	if rec.Drain || b.slots.slot.released {
		t.Fatalf("drain %v released %v: the drain is withdrawn first, the slot kept until it is undone", rec.Drain, b.slots.slot.released)
	}
	b.m = Maintenance{}
	b.expect(b.step(), NotNeeded, "NotNeeded", PhaseIdle)
	if !b.slots.slot.released || b.reboots.calls != 0 {
		t.Fatalf("released %v reboots %d", b.slots.slot.released, b.reboots.calls)
	}
}

// A step on a cache that still shows the record the last write replaced
// does nothing: acting on it would give one attempt up twice.
func TestControllerIgnoresACacheBehindItsWrite(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.setSentinel(true)
	b.step()
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
	b.m = Maintenance{Active: true, TimedOut: true}
	stale := b.node()
	b.expect(b.step(), DrainFailed, "DrainFailed", PhaseIdle)
	rv := b.node().ResourceVersion
	if err := b.c.step(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if b.metrics.failed != 1 || b.node().ResourceVersion != rv {
		t.Fatalf("failed %d, rv %s→%s: the stale step acted", b.metrics.failed, rv, b.node().ResourceVersion)
	}
	// The cache caught up: the guard is gone, even if the old record
	// comes back later (an admin restores it).
	b.expect(b.step(), DrainFailed, "DrainFailed", PhaseIdle)
	if err := b.c.step(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if b.metrics.failed != 2 {
		t.Fatalf("failed %d: a record set back by someone else must be acted on", b.metrics.failed)
	}
}

// A host that was asked to reboot and did not go down is asked again after
// RetryReboot; the reboot is counted once, when the host is back.
func TestControllerAsksAgainWhenTheHostStaysUp(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.reboots.err = errors.New("Access denied")
	b.setSentinel(true)
	b.step()
	b.step()
	b.m = Maintenance{Active: true, Drained: true}
	rec := b.step()
	b.expect(rec, Rebooting, "Rebooting", PhaseRebootRequested)
	if !strings.Contains(rec.Message, "Access denied") || b.reboots.calls != 1 {
		t.Fatalf("message %q calls %d", rec.Message, b.reboots.calls)
	}
	b.reboots.err = nil
	b.clock.Step(4 * time.Minute)
	b.step()
	if b.reboots.calls != 1 {
		t.Fatalf("asked logind %d times before RetryReboot", b.reboots.calls)
	}
	b.clock.Step(time.Minute)
	b.expect(b.step(), Rebooting, "Rebooting", PhaseRebootRequested)
	if b.reboots.calls != 2 || b.metrics.rebooted != 0 {
		t.Fatalf("calls %d rebooted %d", b.reboots.calls, b.metrics.rebooted)
	}
	// The host comes back: one reboot, however often logind was asked.
	b.update(func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
	b.restart()
	b.expect(b.step(), Rebooting, "Rebooting", PhaseBack)
	b.step()
	if b.metrics.rebooted != 1 {
		t.Fatalf("rebooted %d", b.metrics.rebooted)
	}
}

// An agent that restarts while the node drains takes its slot back and
// lets the drain go on.
func TestControllerRestartWhileDraining(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.setSentinel(true)
	b.step()
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
	b.m = Maintenance{Active: true}
	b.restart()
	rec := b.step()
	b.expect(rec, Draining, "Draining", PhaseDraining)
	if b.slots.acquires != 2 || b.c.slot == nil || !rec.Drain {
		t.Fatalf("acquires %d slot %v drain %v", b.slots.acquires, b.c.slot, rec.Drain)
	}
	b.m.Drained = true
	b.expect(b.step(), Rebooting, "Rebooting", PhaseRebootRequested)
	if b.slots.slot.keptFor != 30*time.Minute {
		t.Fatalf("slot kept for %s", b.slots.slot.keptFor)
	}
}

// A slot taken back while the node drains (held past its bound, the agent
// found silent) is let go and asked for again, and the reboot goes on once
// it is held again: the reboot's drain, which drains only in that slot,
// would otherwise wait for ever, and the reboot be asked for without it.
func TestControllerTakesALostSlotBack(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.setSentinel(true)
	b.step()
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
	b.m = Maintenance{Active: true}
	lost := b.slots.slot
	select {
	case <-b.c.slotLost():
		t.Fatal("a slot counts as lost before it was taken back")
	default:
	}
	close(lost.lost)
	select {
	case <-b.c.slotLost():
	default:
		t.Fatal("the slot taken back is not seen")
	}
	b.c.loseSlot()
	if !lost.released || b.c.slot != nil || !b.sawEvent("Warning DrainSlotLost") {
		t.Fatalf("released %t, slot %v; want the lost slot let go, with an Event", lost.released, b.c.slot)
	}
	rec := b.step()
	b.expect(rec, Draining, "Draining", PhaseDraining)
	if b.slots.acquires != 2 || b.c.slot == nil || !rec.Drain {
		t.Fatalf("acquires %d slot %v drain %v; want the slot asked for again, the drain still asked for", b.slots.acquires, b.c.slot, rec.Drain)
	}
	b.m.Drained = true
	b.expect(b.step(), Rebooting, "Rebooting", PhaseRebootRequested)
	if b.slots.slot.keptFor != 30*time.Minute || lost.keptFor != 0 {
		t.Fatalf("kept the new slot for %s, the lost one for %s", b.slots.slot.keptFor, lost.keptFor)
	}
}

// A sentinel-driven reboot whose drain keeps failing is tried again after a
// backoff that doubles from CheckInterval and survives a restart; a reboot
// that is made clears it.
func TestControllerRetriesAFailedDrainWithBackoff(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.setSentinel(true)
	fail := func(want int) {
		t.Helper()
		b.expect(b.step(), Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
		b.expect(b.step(), Draining, "Draining", PhaseDraining)
		b.m = Maintenance{Active: true, TimedOut: true}
		rec := b.step()
		b.expect(rec, DrainFailed, "DrainFailed", PhaseIdle)
		if rec.DrainFailures != want || !b.slots.slot.released || rec.Drain {
			t.Fatalf("drainFailures %d released %v drain %v", rec.DrainFailures, b.slots.slot.released, rec.Drain)
		}
		b.m = Maintenance{} // selfdrain undid it
	}
	fail(1)
	rec := b.step()
	b.expect(rec, DrainFailed, "DrainFailed", PhaseIdle)
	if rec.RetryAt == nil || !rec.RetryAt.Equal(&metav1.Time{Time: b.clock.Now().Add(time.Minute)}) {
		t.Fatalf("retryAt %v, want a minute (CheckInterval) from now", rec.RetryAt)
	}
	b.clock.Step(time.Minute)
	fail(2)
	// The second wait is two minutes, also for a restarted agent.
	b.restart()
	b.clock.Step(time.Minute)
	b.expect(b.step(), DrainFailed, "DrainFailed", PhaseIdle)
	if b.slots.acquires != 2 {
		t.Fatalf("acquires %d: an attempt started within the backoff", b.slots.acquires)
	}
	b.clock.Step(time.Minute)
	b.expect(b.step(), Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
	b.m = Maintenance{Active: true, Drained: true}
	b.expect(b.step(), Rebooting, "Rebooting", PhaseRebootRequested)
	b.setSentinel(false)
	b.update(func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
	b.restart()
	b.step()
	b.step()
	b.m = Maintenance{}
	rec = b.step()
	b.expect(rec, Done, "Done", PhaseIdle)
	if rec.DrainFailures != 0 || rec.FailedAt != nil || rec.RetryAt != nil || b.metrics.failed != 2 {
		t.Fatalf("after a reboot: drainFailures %d failedAt %v retryAt %v; failed %d", rec.DrainFailures, rec.FailedAt, rec.RetryAt, b.metrics.failed)
	}
}

// A record an older agent wrote with the state Failed is that of
// DrainFailed, not a malformed one.
func TestDecodeRecordLegacyFailed(t *testing.T) {
	rec, err := DecodeRecord(`{"state":"Failed","reason":"Failed","failedAt":"2026-11-24T03:00:00Z"}`)
	if err != nil || rec.State != DrainFailed || rec.Reason != string(DrainFailed) {
		t.Fatalf("record %+v, err %v", rec, err)
	}
}

// gateSource is a blocker source the test opens and shuts.
type gateSource struct{ held *bool }

func (g gateSource) Blockers(context.Context) []Blocker {
	if !*g.held {
		return nil
	}
	return []Blocker{{Kind: BlockerGate, Name: "etcd-quorum (q) has 1 series: {} 1", BeforeReboot: true}}
}

// A gate asked again before the reboot holds the drained node (the drain
// kept, the slot held, the time it drained recorded across a restart),
// reboots it once it opens, and gives the attempt up past
// reboot.beforeRebootBound.
func TestControllerGateBeforeReboot(t *testing.T) {
	for _, opens := range []bool{true, false} {
		t.Run(fmt.Sprintf("opens %v", opens), func(t *testing.T) {
			b := newBed(t, alwaysWindow(t))
			held := false
			b.opts.Blockers = []BlockerSource{gateSource{&held}}
			b.opts.BeforeRebootBound = 15 * time.Minute
			b.restart()
			b.setSentinel(true)
			b.step()
			rec := b.step()
			b.expect(rec, Draining, "Draining", PhaseDraining)
			held = true // shuts once the drain started: asked again when drained
			b.m = Maintenance{Active: true, Drained: true}
			rec = b.step()
			b.expect(rec, Pending, string(BlockedByGates), PhaseDrained)
			if rec.DrainedAt == nil || !rec.DrainedAt.Time.Equal(b.clock.Now()) || b.reboots.calls != 0 || !rec.Drain || b.slots.slot.released {
				t.Fatalf("held: drainedAt %v, reboots %d, drain %v, slot released %v", rec.DrainedAt, b.reboots.calls, rec.Drain, b.slots.slot.released)
			}
			drainedAt := rec.DrainedAt.Time
			b.clock.Step(10 * time.Minute)
			b.restart()
			rec = b.step()
			if rec.DrainedAt == nil || !rec.DrainedAt.Time.Equal(drainedAt) {
				t.Fatalf("after a restart drainedAt %v, want %s kept", rec.DrainedAt, drainedAt)
			}
			if opens {
				held = false
				rec = b.step()
				b.expect(rec, Rebooting, "Rebooting", PhaseRebootRequested)
				if b.reboots.calls != 1 || rec.DrainedAt != nil {
					t.Fatalf("opened: reboots %d, drainedAt %v", b.reboots.calls, rec.DrainedAt)
				}
				return
			}
			b.clock.Step(5 * time.Minute)
			rec = b.step()
			b.expect(rec, DrainFailed, "DrainFailed", PhaseIdle)
			if b.reboots.calls != 0 || rec.Drain || rec.FailedAt == nil || !strings.Contains(rec.Message, "reboot.beforeRebootBound") {
				t.Fatalf("given up: reboots %d, drain %v, failedAt %v, %q", b.reboots.calls, rec.Drain, rec.FailedAt, rec.Message)
			}
		})
	}
}
