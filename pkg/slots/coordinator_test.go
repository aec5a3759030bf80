package slots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// view is an agent.NodeView over an informer of the fake clientset, which
// ignores field selectors: it watches every Node and keeps to one.
type view struct {
	name     string
	informer cache.SharedIndexInformer
}

func newView(ctx context.Context, c kube.Interface, name string) *view {
	v := &view{name: name, informer: kube.NodeInformer(c, "")}
	go v.informer.RunWithContext(ctx)
	cache.WaitForCacheSync(ctx.Done(), v.informer.HasSynced)
	return v
}

func (v *view) NodeName() string { return v.name }

func (v *view) Get() (*corev1.Node, error) {
	obj, ok, err := v.informer.GetStore().GetByKey(v.name)
	if err != nil || !ok {
		return nil, fmt.Errorf("node %s not in the cache", v.name)
	}
	return obj.(*corev1.Node), nil
}

func (v *view) AddHandler(h cache.ResourceEventHandler) error {
	_, err := v.informer.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool { n, ok := obj.(*corev1.Node); return ok && n.Name == v.name },
		Handler:    h,
	})
	return err
}

type bed struct {
	t      *testing.T
	ctx    context.Context
	client kube.Interface
	fake   *fake.Clientset
	log    *slog.Logger
}

func newBed(t *testing.T, nodes ...string) *bed {
	var objs []any
	for _, n := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}, Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	f := fake.NewClientset()
	for _, o := range objs {
		if err := f.Tracker().Add(o.(*corev1.Node)); err != nil {
			t.Fatal(err)
		}
	}
	return &bed{t: t, ctx: t.Context(), client: kubetest.Wrap(f), fake: f, log: testLogger()}
}

// coordinator starts a coordinator of limit slots; stop ends it.
func (b *bed) coordinator(limit int, silence time.Duration) (stop func()) {
	return b.coordinatorHold(limit, silence, nil)
}

func (b *bed) coordinatorHold(limit int, silence time.Duration, maxHold map[Purpose]time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(b.ctx)
	c := NewCoordinator(CoordinatorOptions{Client: b.client, Namespace: "node-agent", Pools: []Pool{{Name: DefaultPool, Limit: limit}},
		HeartbeatBound: silence, RebootHoldBound: time.Hour, MaxHold: maxHold, Clock: clock.RealClock{}, Logger: b.log, LeaseResync: time.Hour})
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	return func() { cancel(); <-done }
}

// requester starts the agent side for node.
func (b *bed) requester(node string) (*Requester, func()) {
	ctx, cancel := context.WithCancel(b.ctx)
	r := &Requester{Client: b.client, NodeName: node, RenewInterval: 50 * time.Millisecond, NoAnswerAfter: 300 * time.Millisecond,
		ClaimGrace: time.Hour, Clock: clock.RealClock{}, Logger: b.log}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, newView(ctx, b.client, node)) }()
	return r, func() { cancel(); <-done }
}

// firstHoldsSecondAsks makes n1 take the bed's slot and starts n2's
// requester, which the test has ask next; both stop with the test.
func (b *bed) firstHoldsSecondAsks(t *testing.T) (Slot, *Requester) {
	t.Helper()
	r1, stop1 := b.requester("n1")
	t.Cleanup(stop1)
	h1, err := r1.Acquire(b.ctx, PurposeMaintenance, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, stop2 := b.requester("n2")
	t.Cleanup(stop2)
	return h1, r2
}

func (b *bed) leases() int {
	l, err := b.fake.CoordinationV1().Leases("node-agent").List(b.ctx, metav1.ListOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	return len(l.Items)
}

func (b *bed) node(name string) *corev1.Node {
	n, err := b.fake.CoreV1().Nodes().Get(b.ctx, name, metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// TestOneAtATimeInOrder: three nodes ask at once for one slot; they get it
// one after the other in the order they asked, never two at once, and
// each release hands the slot on without an admin.
func TestOneAtATimeInOrder(t *testing.T) {
	b := newBed(t, "n1", "n2", "n3")
	defer b.coordinator(1, time.Minute)()
	var mu sync.Mutex
	var order []string
	holding := 0
	var wg sync.WaitGroup
	for i, name := range []string{"n1", "n2", "n3"} {
		r, stop := b.requester(name)
		defer stop()
		// Ask in order: each request is written before the next.
		asked := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := r.Acquire(b.ctx, PurposeMaintenance, func(error) {})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			holding++
			if holding > 1 {
				t.Errorf("%s holds a slot while another node does", name)
			}
			order = append(order, name)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			holding--
			mu.Unlock()
			h.Release()
		}()
		go func() {
			for {
				if _, ok := b.node(name).Annotations[RequestAnnotation]; ok {
					close(asked)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		<-asked
		_ = i
	}
	wg.Wait()
	if fmt.Sprint(order) != "[n1 n2 n3]" {
		t.Errorf("order %v, want [n1 n2 n3]", order)
	}
	waitFor(t, "every slot Lease deleted", func() bool { return b.leases() == 0 })
}

// TestSilentHolderLosesItsSlot: a holder whose agent goes silent loses its
// slot, and the next node gets it without an admin.
func TestSilentHolderLosesItsSlot(t *testing.T) {
	b := newBed(t, "n1", "n2")
	defer b.coordinator(1, 300*time.Millisecond)()
	r1, stop1 := b.requester("n1")
	if _, err := r1.Acquire(b.ctx, PurposeMaintenance, nil); err != nil {
		t.Fatal(err)
	}
	// n1's agent stops: no more heartbeats.
	stop1()
	r2, stop2 := b.requester("n2")
	defer stop2()
	h2, err := r2.Acquire(b.ctx, PurposeMaintenance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release()
	g, err := ParseGrant(b.node("n1"))
	if err != nil || g == nil || g.State != Revoked || !strings.Contains(g.Reason, "no heartbeat") {
		t.Fatalf("n1's grant = %+v, %v; want Revoked for silence", g, err)
	}
	if h2.Name() != LeaseName("n2") {
		t.Errorf("n2 holds %s", h2.Name())
	}
}

// TestStoppingAgentLeavesItsRequest: an agent that stops (a rollout)
// while it holds a slot, and one that stops while it waits for one, leave
// their requests on the Node as they are, although the drain gives its
// slot back and the waiting caller gives up as the agent stops; the next
// agent takes up the slot, and the place in the queue, again. Seen in
// test/property (P7): the slot went back at every stop, and another node
// drained while this one stayed cordoned mid-drain.
func TestStoppingAgentLeavesItsRequest(t *testing.T) {
	b := newBed(t, "n1", "n2")
	defer b.coordinator(1, time.Minute)()
	agentCtx, stopAgent := context.WithCancel(b.ctx)
	r1 := &Requester{Client: b.client, NodeName: "n1", RenewInterval: 50 * time.Millisecond, NoAnswerAfter: 300 * time.Millisecond,
		ClaimGrace: time.Hour, Clock: clock.RealClock{}, Logger: b.log}
	r2 := &Requester{Client: b.client, NodeName: "n2", RenewInterval: 50 * time.Millisecond, NoAnswerAfter: 300 * time.Millisecond,
		ClaimGrace: time.Hour, Clock: clock.RealClock{}, Logger: b.log}
	var runs sync.WaitGroup
	for _, r := range []*Requester{r1, r2} {
		runs.Go(func() { _ = r.Run(agentCtx, newView(agentCtx, b.client, r.NodeName)) })
	}
	// The callers' contexts derive from the agent's, as in the agent.
	h1, err := r1.Acquire(agentCtx, PurposeMaintenance, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := r2.Acquire(agentCtx, PurposeMaintenance, func(error) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		})
		gaveUp <- err
	}()
	<-waiting
	held, _ := ParseRequest(b.node("n1"))
	queued, _ := ParseRequest(b.node("n2"))

	stopAgent()
	h1.Release() // as the drain's deferred release runs when the agent stops
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting Acquire = %v", err)
	}
	runs.Wait()
	for node, want := range map[string]*Request{"n1": held, "n2": queued} {
		if got, _ := ParseRequest(b.node(node)); got == nil || got.ID != want.ID {
			t.Errorf("%s's request after its agent stopped: %+v, want %+v kept", node, got, want)
		}
	}
	if g, _ := ParseGrant(b.node("n1")); g == nil || g.State != Granted || g.ID != held.ID {
		t.Errorf("n1's grant after its agent stopped: %+v, want Granted", g)
	}

	// The next agents take up the slot and the place.
	r1b, stop1 := b.requester("n1")
	defer stop1()
	h1b, err := r1b.Acquire(b.ctx, PurposeMaintenance, nil)
	if err != nil {
		t.Fatal(err)
	}
	if req, _ := ParseRequest(b.node("n1")); req == nil || req.ID != held.ID || h1b.Name() != h1.Name() {
		t.Errorf("n1's next agent holds %s for %+v, want %s for %s", h1b.Name(), req, h1.Name(), held.ID)
	}
	r2b, stop2 := b.requester("n2")
	defer stop2()
	got := make(chan Slot, 1)
	go func() {
		h, err := r2b.Acquire(b.ctx, PurposeMaintenance, nil)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	h1b.Release()
	h2 := <-got
	if req, _ := ParseRequest(b.node("n2")); req == nil || req.ID != queued.ID {
		t.Errorf("n2's request once served: %+v, want %s, its place kept", req, queued.ID)
	}
	h2.Release()
	waitFor(t, "the slot Lease deleted", func() bool { return b.leases() == 0 })
}

// TestHolderPastItsBoundLosesItsSlot: a live agent that holds past its
// purpose's bound is told (Lost) and the slot goes on.
func TestHolderPastItsBoundLosesItsSlot(t *testing.T) {
	b := newBed(t, "n1")
	defer b.coordinatorHold(1, time.Minute, map[Purpose]time.Duration{PurposeMaintenance: 300 * time.Millisecond})()
	r, stop := b.requester("n1")
	defer stop()
	h, err := r.Acquire(b.ctx, PurposeMaintenance, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told that its slot was taken back")
	}
	if !strings.Contains(h.LostReason(), "longer than the maintenance bound") {
		t.Errorf("reason %q", h.LostReason())
	}
	h.Release()
	waitFor(t, "the slot Lease deleted", func() bool { return b.leases() == 0 })
}

// TestPurposesDoNotShare: a reboot's slot is never adopted by a maintenance
// drain of the same node; the maintenance waits until the reboot is done.
func TestPurposesDoNotShare(t *testing.T) {
	b := newBed(t, "n1")
	defer b.coordinator(2, time.Minute)()
	r, stop := b.requester("n1")
	defer stop()
	hr, err := r.Acquire(b.ctx, PurposeReboot, nil)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{}, 1)
	got := make(chan Slot, 1)
	go func() {
		h, err := r.Acquire(b.ctx, PurposeMaintenance, func(error) {
			select {
			case waited <- struct{}{}:
			default:
			}
		})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	<-waited
	select {
	case <-got:
		t.Fatal("maintenance got a slot while the reboot held the node's")
	case <-time.After(200 * time.Millisecond):
	}
	hr.Release()
	hm := <-got
	req, _ := ParseRequest(b.node("n1"))
	if req == nil || req.Purpose != PurposeMaintenance || hm.(*Held).purpose != PurposeMaintenance {
		t.Errorf("request %+v after the hand-over", req)
	}
	hm.Release()
}

// TestKeptAcrossReboot: a slot kept across the reboot stays after the
// process ends, and the agent after the reboot takes it up at once.
func TestKeptAcrossReboot(t *testing.T) {
	b := newBed(t, "n1", "n2")
	defer b.coordinator(1, 200*time.Millisecond)()
	r, stop := b.requester("n1")
	h, err := r.Acquire(b.ctx, PurposeReboot, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.KeepAcrossReboot(b.ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	h.Release()
	stop()
	// Silent for longer than the silence bound: kept all the same.
	time.Sleep(600 * time.Millisecond)
	if g, _ := ParseGrant(b.node("n1")); g == nil || g.State != Granted {
		t.Fatalf("grant %+v after the silence; want still Granted", g)
	}
	r2, stop2 := b.requester("n1")
	defer stop2()
	h2, err := r2.Acquire(b.ctx, PurposeReboot, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Name() != h.Name() {
		t.Errorf("took up %s, want %s", h2.Name(), h.Name())
	}
	// Back: the request no longer asks for the long hold.
	waitFor(t, "holdSeconds cleared by the renewal", func() bool {
		req, _ := ParseRequest(b.node("n1"))
		return req != nil && req.HoldSeconds == 0
	})
	h2.Release()
	waitFor(t, "the slot Lease deleted", func() bool { return b.leases() == 0 })
}

// TestNoCoordinatorIsReported: without a coordinator the waiting caller is
// told so, with what to check.
func TestNoCoordinatorIsReported(t *testing.T) {
	b := newBed(t, "n1")
	r, stop := b.requester("n1")
	defer stop()
	ctx, cancel := context.WithCancel(b.ctx)
	reports := make(chan error, 4)
	done := make(chan error, 1)
	go func() {
		_, err := r.Acquire(ctx, PurposeMaintenance, func(err error) { reports <- err })
		done <- err
	}()
	if err := <-reports; !errors.Is(err, ErrNoAnswer) {
		t.Errorf("report %v, want ErrNoAnswer", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire = %v", err)
	}
	// Giving up withdraws the request.
	if _, ok := b.node("n1").Annotations[RequestAnnotation]; ok {
		t.Error("the request stays after the caller gave up")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("SLOTS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// ask writes a request on node as an agent would, without an agent.
func (b *bed) ask(node, id string) {
	req := &Request{Purpose: PurposeMaintenance, ID: id, RequestedAt: time.Now()}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, RequestAnnotation, req.Encode())
	if _, err := b.fake.CoreV1().Nodes().Patch(b.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.t.Fatal(err)
	}
}

// oneWaits runs a coordinator with limit 1 until the test ends, gives n1
// the slot and has n2 ask for it. It returns once n2 was told it waits:
// n1's slot, and a channel that gets n2's when it is granted.
func (b *bed) oneWaits(t *testing.T) (Slot, <-chan Slot) {
	t.Helper()
	t.Cleanup(b.coordinator(1, time.Minute))
	h1, r2 := b.firstHoldsSecondAsks(t)
	got := make(chan Slot, 1)
	queued := make(chan struct{}, 1)
	go func() {
		h, err := r2.Acquire(b.ctx, PurposeMaintenance, func(error) {
			select {
			case queued <- struct{}{}:
			default:
			}
		})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	<-queued
	return h1, got
}

// TestNoGrantUntilTheSlotIsGivenBack: while the Lease of a slot given back
// cannot be deleted, the decision that counts it free grants nothing; once
// it can, the next node gets the slot.
func TestNoGrantUntilTheSlotIsGivenBack(t *testing.T) {
	b := newBed(t, "n1", "n2")
	var failing atomic.Bool
	b.fake.PrependReactor("delete", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("injected: etcd is slow")
		}
		return false, nil, nil
	})
	h1, got := b.oneWaits(t)
	failing.Store(true)
	h1.Release()
	waitFor(t, "n1's request withdrawn", func() bool { return b.node("n1").Annotations[RequestAnnotation] == "" })
	// The coordinator tries again with backoff; a few of its passes fail.
	waitFor(t, "a failed delete of n1's slot", func() bool {
		for _, a := range b.fake.Actions() {
			if a.GetVerb() == "delete" && a.GetResource().Resource == "leases" {
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond)
	if g, _ := ParseGrant(b.node("n2")); g != nil && g.State == Granted {
		t.Fatalf("n2 was granted while n1's slot Lease still existed: %+v", g)
	}
	failing.Store(false)
	h2 := <-got
	if h2.Name() != LeaseName("n2") {
		t.Errorf("n2 holds %s", h2.Name())
	}
	h2.Release()
	waitFor(t, "every slot Lease deleted", func() bool { return b.leases() == 0 })
}

// TestHandOverDoesNotWaitForTheOldGrant: the slot n1 gives back goes to
// n2 once n1's Lease is deleted; clearing n1's grant, which answers no
// request any more, does not hold n2's grant up: here it is held until n2
// is granted (before, the release cleared it first, and this test would
// wait for ever).
func TestHandOverDoesNotWaitForTheOldGrant(t *testing.T) {
	b := newBed(t, "n1", "n2")
	unblock := make(chan struct{})
	var once sync.Once
	// Held up before the fake client, whose reactors run under its lock.
	b.client = beforePatch{b.client, func(name string, data []byte) {
		if name == "n1" && strings.Contains(string(data), `"`+GrantAnnotation+`":null`) {
			select {
			case <-unblock:
			case <-time.After(10 * time.Second):
				t.Error("n1's grant was cleared before n2 was granted")
			}
		}
	}}
	h1, got := b.oneWaits(t)
	h1.Release()
	var h2 Slot
	select {
	case h2 = <-got:
		once.Do(func() { close(unblock) })
	case <-time.After(5 * time.Second):
		once.Do(func() { close(unblock) })
		t.Fatal("n2 was not granted while clearing n1's grant was held up")
	}
	if h2.Name() != LeaseName("n2") {
		t.Errorf("n2 holds %s", h2.Name())
	}
	waitFor(t, "n1's grant cleared", func() bool { g, _ := ParseGrant(b.node("n1")); return g == nil })
	h2.Release()
	waitFor(t, "every slot Lease deleted", func() bool { return b.leases() == 0 })
}

// beforePatch calls before with each Node patch's name and body, then
// patches.
type beforePatch struct {
	kube.Interface
	before func(name string, data []byte)
}

// IsWatchListSemanticsUnSupported: the fake client under it serves no
// watch-list stream, and says so as kubetest's wrapper does.
func (b beforePatch) IsWatchListSemanticsUnSupported() bool { return true }

func (b beforePatch) CoreV1() kube.CoreV1Interface {
	return beforePatchCore{b.Interface.CoreV1(), b.before}
}

type beforePatchCore struct {
	kube.CoreV1Interface
	before func(name string, data []byte)
}

func (c beforePatchCore) Nodes() kube.NodeInterface {
	return beforePatchNodes{c.CoreV1Interface.Nodes(), c.before}
}

type beforePatchNodes struct {
	kube.NodeInterface
	before func(name string, data []byte)
}

func (n beforePatchNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Node, error) {
	n.before(name, data)
	return n.NodeInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// TestReplacedRequestKeepsItsNewGrant: a node that replaces its request
// while it holds a slot gives the old slot back and, the slot being free,
// is granted again in the same decision; the old grant is not cleared
// after the new one is written (which would leave the node without it).
func TestReplacedRequestKeepsItsNewGrant(t *testing.T) {
	b := newBed(t, "n1")
	defer b.coordinator(1, time.Minute)()
	b.ask("n1", "id-a")
	waitFor(t, "id-a granted", func() bool { g, _ := ParseGrant(b.node("n1")); return g != nil && g.ID == "id-a" && g.State == Granted })
	b.ask("n1", "id-b")
	waitFor(t, "id-b granted", func() bool { g, _ := ParseGrant(b.node("n1")); return g != nil && g.ID == "id-b" && g.State == Granted })
	time.Sleep(300 * time.Millisecond)
	if g, _ := ParseGrant(b.node("n1")); g == nil || g.ID != "id-b" || g.State != Granted {
		t.Fatalf("n1's grant after the hand-over: %+v; want id-b Granted", g)
	}
	for _, a := range b.fake.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetName() == "n1" && strings.Contains(string(p.GetPatch()), `"`+GrantAnnotation+`":null`) {
			t.Errorf("n1's grant was cleared although its new request was granted: %s", p.GetPatch())
		}
	}
}

// TestEveryWaitingNodeIsAnswered: more nodes ask at once than one decision
// answers; every one of them is told Queued, in later passes, and the
// first holds the slot.
func TestEveryWaitingNodeIsAnswered(t *testing.T) {
	var names []string
	for i := range AnswersPerPass*2 + 5 {
		names = append(names, fmt.Sprintf("n%03d", i))
	}
	b := newBed(t, names...)
	for _, n := range names {
		b.ask(n, "id-"+n)
	}
	defer b.coordinator(1, time.Minute)()
	waitFor(t, "every node answered", func() bool {
		granted, queued := 0, 0
		for _, n := range names {
			switch g, _ := ParseGrant(b.node(n)); {
			case g == nil:
			case g.State == Granted:
				granted++
			case g.State == Queued:
				queued++
			}
		}
		return granted == 1 && queued == len(names)-1
	})
}

// staleView is a view that can be held at one Node, as a lagging cache.
type staleView struct {
	*view
	mu     sync.Mutex
	frozen *corev1.Node
}

func (v *staleView) Get() (*corev1.Node, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.frozen != nil {
		return v.frozen, nil
	}
	return v.view.Get()
}

func (v *staleView) freeze() {
	n, _ := v.view.Get()
	v.mu.Lock()
	v.frozen = n.DeepCopy()
	v.mu.Unlock()
}

// TestReleaseWhenTheCacheLags: the request on the Node was renewed by
// another holder of this process (same id, a newer heartbeat) and the
// agent's cache still shows the old value; the release reads the request
// from the apiserver and withdraws it, rather than leaving the slot held
// until the coordinator finds the node silent (seen in make scale).
func TestReleaseWhenTheCacheLags(t *testing.T) {
	b := newBed(t, "n1")
	defer b.coordinator(1, time.Minute)()
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	v := &staleView{view: newView(ctx, b.client, "n1")}
	r := &Requester{Client: b.client, NodeName: "n1", RenewInterval: time.Hour, NoAnswerAfter: 300 * time.Millisecond,
		ClaimGrace: time.Hour, Clock: clock.RealClock{}, Logger: b.log}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, v) }()
	defer func() { cancel(); <-done }()
	h, err := r.Acquire(b.ctx, PurposeMaintenance, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.freeze()
	req, err := ParseRequest(b.node("n1"))
	if err != nil || req == nil {
		t.Fatalf("request %+v, %v", req, err)
	}
	renewed := *req
	renewed.Heartbeat = 99
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, RequestAnnotation, renewed.Encode())
	if _, err := b.fake.CoreV1().Nodes().Patch(b.ctx, "n1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if got := b.node("n1").Annotations[RequestAnnotation]; got != "" {
		t.Errorf("the request stays after the release: %s", got)
	}
}

// TestMinRebootIntervalOutlivesTheLeader: with reboot.minInterval, the
// coordinator records each reboot grant in LastRebootLease; a new leader
// reads it, and queues the next reboot until the interval has passed, with
// a reason that says so, while a maintenance goes on.
func TestMinRebootIntervalOutlivesTheLeader(t *testing.T) {
	b := newBed(t, "n1", "n2", "n3")
	start := func() (stop func()) {
		ctx, cancel := context.WithCancel(b.ctx)
		c := NewCoordinator(CoordinatorOptions{Client: b.client, Namespace: "node-agent", Pools: []Pool{{Name: DefaultPool, Limit: 3}},
			HeartbeatBound: time.Minute, RebootHoldBound: time.Hour, MinRebootInterval: time.Hour, Clock: clock.RealClock{}, Logger: b.log, LeaseResync: time.Hour})
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	askFor := func(node, id string, p Purpose) {
		req := &Request{Purpose: p, ID: id, RequestedAt: time.Now()}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, RequestAnnotation, req.Encode())
		if _, err := b.fake.CoreV1().Nodes().Patch(b.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grantOf := func(node string) *Grant {
		g, _ := ParseGrant(b.node(node))
		return g
	}
	stop := start()
	askFor("n1", "r1", PurposeReboot)
	waitFor(t, "n1's reboot granted", func() bool { g := grantOf("n1"); return g != nil && g.State == Granted })
	var recorded time.Time
	waitFor(t, "the last reboot recorded", func() bool {
		l, err := b.fake.CoordinationV1().Leases("node-agent").Get(b.ctx, LastRebootLease, metav1.GetOptions{})
		if err != nil || l.Spec.AcquireTime == nil {
			return false
		}
		recorded = l.Spec.AcquireTime.Time
		return true
	})
	stop()
	// n1 is done: its request and slot are gone. A new leader starts.
	if _, err := b.fake.CoreV1().Nodes().Patch(b.ctx, "n1", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null}}}`, RequestAnnotation, GrantAnnotation)), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.fake.CoordinationV1().Leases("node-agent").Delete(b.ctx, LeaseName("n1"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer start()()
	askFor("n2", "r2", PurposeReboot)
	askFor("n3", "m3", PurposeMaintenance)
	waitFor(t, "n3's maintenance granted", func() bool { g := grantOf("n3"); return g != nil && g.State == Granted })
	waitFor(t, "n2's reboot queued", func() bool { g := grantOf("n2"); return g != nil && g.State == Queued })
	if g := grantOf("n2"); !strings.Contains(g.Reason, "reboot.minInterval: the last reboot began at "+recorded.UTC().Format(time.RFC3339)) {
		t.Errorf("n2 waits with %q, want the interval from the recorded reboot", g.Reason)
	}
}

// TestNewLeaderKeepsTheQueueOrder: the queue's order is what the
// coordinator stamped into its answers, so a new leader serves z1, which
// asked first, before a2, whose request claims it was written in 1970 (and
// whose name comes first); the backdated request never counted.
func TestNewLeaderKeepsTheQueueOrder(t *testing.T) {
	b := newBed(t, "n0", "z1", "a2")
	askAt := func(node, id string, at time.Time) {
		req := &Request{Purpose: PurposeMaintenance, ID: id, RequestedAt: at}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, RequestAnnotation, req.Encode())
		if _, err := b.fake.CoreV1().Nodes().Patch(b.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grantOf := func(node string) *Grant {
		g, _ := ParseGrant(b.node(node))
		return g
	}
	stop := b.coordinator(1, time.Hour)
	askAt("n0", "r0", time.Now())
	waitFor(t, "n0 granted", func() bool { g := grantOf("n0"); return g != nil && g.State == Granted })
	askAt("z1", "r1", time.Now())
	waitFor(t, "z1 queued with its place", func() bool { g := grantOf("z1"); return g != nil && g.State == Queued && !g.Time.IsZero() })
	askAt("a2", "r2", time.Unix(0, 0))
	waitFor(t, "a2 queued with its place", func() bool { g := grantOf("a2"); return g != nil && g.State == Queued && !g.Time.IsZero() })
	if z, a := grantOf("z1").Time, grantOf("a2").Time; !z.Before(a) {
		t.Fatalf("z1 asked first but was stamped %s, a2 %s", z, a)
	}
	stop()
	// n0 is done while no coordinator leads; then a new one starts.
	if _, err := b.fake.CoreV1().Nodes().Patch(b.ctx, "n0", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null}}}`, RequestAnnotation, GrantAnnotation)), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.fake.CoordinationV1().Leases("node-agent").Delete(b.ctx, LeaseName("n0"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer b.coordinator(1, time.Hour)()
	waitFor(t, "the slot granted again", func() bool {
		z, a := grantOf("z1"), grantOf("a2")
		return (z != nil && z.State == Granted) || (a != nil && a.State == Granted)
	})
	if g := grantOf("z1"); g.State != Granted {
		t.Errorf("the new leader granted a2 (backdated to 1970) before z1, which asked first; z1: %s %s", g.State, g.Reason)
	}
}

// TestRebootRefusedWhileOff: a coordinator whose configuration turns
// reboots off answers a reboot request Revoked, with the reason, and holds
// no slot for it; a maintenance request goes on.
func TestRebootRefusedWhileOff(t *testing.T) {
	b := newBed(t, "n1", "n2")
	ctx, cancel := context.WithCancel(b.ctx)
	c := NewCoordinator(CoordinatorOptions{Client: b.client, Namespace: "node-agent", Pools: []Pool{{Name: DefaultPool, Limit: 1}},
		HeartbeatBound: time.Minute, RebootHoldBound: time.Hour, Off: Off(config.Default()), Clock: clock.RealClock{}, Logger: b.log, LeaseResync: time.Hour})
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for node, p := range map[string]Purpose{"n1": PurposeReboot, "n2": PurposeMaintenance} {
		req := &Request{Purpose: p, ID: node, RequestedAt: time.Now(), HoldSeconds: 1 << 20}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, RequestAnnotation, req.Encode())
		if _, err := b.fake.CoreV1().Nodes().Patch(b.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "n1's reboot request refused", func() bool { g, _ := ParseGrant(b.node("n1")); return g != nil && g.State == Revoked })
	waitFor(t, "n2's maintenance granted", func() bool { g, _ := ParseGrant(b.node("n2")); return g != nil && g.State == Granted })
	if g, _ := ParseGrant(b.node("n1")); !strings.Contains(g.Reason, "reboot.enabled is false") {
		t.Errorf("n1 refused with %q, want the reason to name reboot.enabled", g.Reason)
	}
	if _, err := b.fake.CoordinationV1().Leases("node-agent").Get(b.ctx, LeaseName("n1"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("n1's slot Lease: %v, want none", err)
	}
}

// TestRefusedRequestIsNotAskedAgainAtOnce: the agent's side of a refusal.
// Asked again at once, a refused request would be refused again, a Node
// write each round trip; the requester reports the reason and waits
// RefusedRetry first.
func TestRefusedRequestIsNotAskedAgainAtOnce(t *testing.T) {
	b := newBed(t, "n1")
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	c := NewCoordinator(CoordinatorOptions{Client: b.client, Namespace: "node-agent", Pools: []Pool{{Name: DefaultPool, Limit: 1}},
		HeartbeatBound: time.Minute, RebootHoldBound: time.Hour, Off: Off(config.Default()), Clock: clock.RealClock{}, Logger: b.log, LeaseResync: time.Hour})
	done := make(chan struct{}, 2)
	defer func() { cancel(); <-done; <-done }()
	go func() { defer func() { done <- struct{}{} }(); _ = c.Run(ctx) }()
	var asked atomic.Int32
	b.fake.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), RequestAnnotation) {
			asked.Add(1)
		}
		return false, nil, nil
	})
	r := &Requester{Client: b.client, NodeName: "n1", RenewInterval: 50 * time.Millisecond, NoAnswerAfter: time.Hour,
		ClaimGrace: time.Hour, RefusedRetry: time.Hour, Clock: clock.RealClock{}, Logger: b.log}
	go func() { defer func() { done <- struct{}{} }(); _ = r.Run(ctx, newView(ctx, b.client, "n1")) }()
	reports := make(chan error, 10)
	go func() {
		_, _ = r.Acquire(ctx, PurposeReboot, func(err error) {
			if err != nil {
				reports <- err
			}
		})
	}()
	select {
	case err := <-reports:
		if !strings.Contains(err.Error(), "refused the reboot drain slot") || !strings.Contains(err.Error(), "reboot.enabled is false") {
			t.Errorf("reported %q, want the refusal and its reason", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no refusal reported; the request was written %d times", asked.Load())
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the request was written %d times by the refusal, want once", n)
	}
	if g, _ := ParseGrant(b.node("n1")); g == nil || g.State != Revoked || !g.Refused {
		t.Errorf("n1's answer %+v, want Revoked and refused", g)
	}
}

// TestGiveUpWhenTheCacheLags: a caller stops waiting for its slot while the
// agent's cache shows an older value of its request (the same id, renewed
// since); the request is read from the apiserver and withdrawn, rather than
// left on the Node with its place in the queue (seen in make scale as
// "Could not withdraw the request for a drain slot").
func TestGiveUpWhenTheCacheLags(t *testing.T) {
	b := newBed(t, "n1")
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	v := &staleView{view: newView(ctx, b.client, "n1")}
	r := &Requester{Client: b.client, NodeName: "n1", RenewInterval: time.Hour, NoAnswerAfter: time.Hour,
		ClaimGrace: time.Hour, Clock: clock.RealClock{}, Logger: b.log}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, v) }()
	defer func() { cancel(); <-done }()
	// No coordinator runs: the request waits, unanswered.
	waitCtx, stopWaiting := context.WithCancel(b.ctx)
	acquired := make(chan error, 1)
	go func() { _, err := r.Acquire(waitCtx, PurposeMaintenance, nil); acquired <- err }()
	var req *Request
	waitFor(t, "the request on n1, in the agent's cache too", func() bool {
		var err error
		req, err = ParseRequest(b.node("n1"))
		if err != nil || req == nil {
			return false
		}
		cached, _, _, err := r.state()
		return err == nil && cached != nil && cached.ID == req.ID
	})
	v.freeze()
	renewed := *req
	renewed.Heartbeat = 99
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, RequestAnnotation, renewed.Encode())
	if _, err := b.fake.CoreV1().Nodes().Patch(b.ctx, "n1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	stopWaiting()
	if err := <-acquired; err == nil {
		t.Fatal("Acquire returned a slot; want the caller's context error")
	}
	if got := b.node("n1").Annotations[RequestAnnotation]; got != "" {
		t.Errorf("the request stays after the caller gave up: %s", got)
	}
}
