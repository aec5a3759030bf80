package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/agent/agenttest"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// The unit tests' one harness: a fake clientset holding the node and its
// pods, a fake clock, and an engine wired to both.

const testNode = "node-1"

type harness struct {
	t        *testing.T
	client   *fake.Clientset
	clock    *clocktesting.FakeClock
	recorder *record.FakeRecorder
	engine   *selfdrain.Engine
	slots    *fakeSlots
	// rebootSlot is the reboot controller's slot, which a reboot's drain
	// follows: held when its holder is testNode.
	rebootSlot *fakeSlots

	mu        sync.Mutex
	evictions []eviction
}

// fakeSlots is one drain slot. Another node may hold it (hold);
// a waiting Acquire reports the wait, calls onWaitHook, and takes the slot
// once free. One that follows (the reboot controller's slot) takes
// nothing: its Acquire waits until the slot is held by testNode, and its
// Release leaves it held.
type fakeSlots struct {
	follow  bool
	mu      sync.Mutex
	holder  string
	changed chan struct{}
	// onWaitHook runs after each report of a wait (tests free the slot
	// there).
	onWaitHook func()
	lost       chan struct{}
}

func newFakeSlots() *fakeSlots {
	return &fakeSlots{changed: make(chan struct{}), lost: make(chan struct{})}
}

func newFollowedSlot() *fakeSlots {
	f := newFakeSlots()
	f.follow = true
	return f
}

func (f *fakeSlots) hold(node string) {
	f.mu.Lock()
	f.holder = node
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeSlots) holderName() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holder
}

func (f *fakeSlots) acquire(ctx context.Context, onWait func(error)) (slots.Slot, error) {
	waited := false
	for {
		f.mu.Lock()
		if f.holder == testNode || (f.holder == "" && !f.follow) {
			f.holder = testNode
			f.mu.Unlock()
			return fakeSlot{f}, nil
		}
		ch := f.changed
		f.mu.Unlock()
		if !waited {
			waited = true
			onWait(nil)
			if f.onWaitHook != nil {
				f.onWaitHook()
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

type fakeSlot struct{ f *fakeSlots }

func (s fakeSlot) Name() string { return "node-agent-drain-slot-" + testNode }
func (s fakeSlot) Release() {
	s.f.mu.Lock()
	if s.f.holder == testNode && !s.f.follow {
		s.f.holder = ""
	}
	s.f.mu.Unlock()
}
func (s fakeSlot) Lost() <-chan struct{} { return s.f.lost }
func (s fakeSlot) LostReason() string    { return "revoked by the test" }
func (s fakeSlot) KeepAcrossReboot(context.Context, time.Duration) error {
	return errors.New("not kept in these tests")
}

// harnessSlots is the node's Slots: a maintenance drain takes the
// harness's slot, a reboot's drain follows the reboot controller's.
type harnessSlots struct{ maintenance, reboot *fakeSlots }

func (s harnessSlots) Acquire(ctx context.Context, purpose slots.Purpose, onWait func(error)) (slots.Slot, error) {
	if purpose != slots.PurposeMaintenance {
		return nil, fmt.Errorf("a drain asked for a slot of purpose %q", purpose)
	}
	return s.maintenance.acquire(ctx, onWait)
}

func (s harnessSlots) Await(ctx context.Context, purpose slots.Purpose, onWait func(error)) (slots.Slot, error) {
	if purpose != slots.PurposeReboot {
		return nil, fmt.Errorf("a drain followed a slot of purpose %q", purpose)
	}
	return s.reboot.acquire(ctx, onWait)
}

// eviction is one eviction request the fake apiserver received.
type eviction struct {
	key string
	uid types.UID
	at  time.Time // on the fake clock
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	objs = append([]runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}}, objs...)
	h := &harness{
		t:        t,
		client:   fake.NewClientset(objs...),
		clock:    clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		recorder: record.NewFakeRecorder(1000),
		slots:    newFakeSlots(),
		// The reboot controller holds its slot unless a test says not.
		rebootSlot: newFollowedSlot(),
	}
	h.rebootSlot.hold(testNode)
	cfg := config.Default().Drain
	cfg.Parallelism = 2
	h.engine = selfdrain.NewEngine(selfdrain.EngineOptions{
		Client: kubetest.Wrap(h.client), NodeName: testNode, Config: cfg,
		Logger: slog.New(slog.DiscardHandler), Clock: h.clock, Recorder: h.recorder,
	})
	h.engine.Jitter = func() float64 { return 1 }
	return h
}

// onEvict answers eviction requests with refuse; a nil error from it
// accepts the eviction and deletes the pod, as kube-apiserver does.
func (h *harness) onEvict(refuse func(ev eviction) error) {
	h.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		got := eviction{key: ev.Namespace + "/" + ev.Name, at: h.clock.Now()}
		if p := ev.DeleteOptions.Preconditions; p != nil && p.UID != nil {
			got.uid = *p.UID
		}
		h.mu.Lock()
		h.evictions = append(h.evictions, got)
		h.mu.Unlock()
		if err := refuse(got); err != nil {
			return true, nil, err
		}
		err := h.client.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
		return true, nil, err
	})
}

func (h *harness) evicted() []eviction {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]eviction(nil), h.evictions...)
}

// drain runs Engine.Drain, stepping the fake clock meanwhile (see run).
func (h *harness) drain(ctx context.Context, st *selfdrain.Status, req selfdrain.Request) (out *selfdrain.Status, err error) {
	h.t.Helper()
	h.run(func() { out, err = h.engine.Drain(ctx, st, req) }, nil)
	return out, err
}

// run calls f and steps the fake clock by selfdrain.RetryInitial whenever something
// waits on it and gate (when not nil) allows, until f returns.
func (h *harness) run(f func(), gate func() bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if h.clock.HasWaiters() && (gate == nil || gate()) {
				h.clock.Step(selfdrain.RetryInitial)
			}
		}
	}
}

func (h *harness) node() *corev1.Node {
	h.t.Helper()
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// trackedNode is the Node as the fake apiserver holds it, read without the
// clientset, so that a reactor may call it.
func (h *harness) trackedNode() *corev1.Node {
	h.t.Helper()
	o, err := h.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", testNode)
	if err != nil {
		h.t.Fatal(err)
	}
	return o.(*corev1.Node).DeepCopy()
}

func (h *harness) condition(typ corev1.NodeConditionType) *corev1.NodeCondition {
	for _, c := range h.node().Status.Conditions {
		if c.Type == typ {
			return &c
		}
	}
	return nil
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: ptrTo(true)}}},
		Spec:   corev1.PodSpec{NodeName: testNode},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// nodeView is the controller's view of the Node in the fake clientset.
// hold makes it show one copy instead, as an informer's cache that is
// behind the apiserver does.
type nodeView struct {
	agenttest.NodeView
	t *testing.T

	mu   sync.Mutex
	held *corev1.Node
	// after runs once, after the next Get took its copy and before it
	// returns it: what the informer does meanwhile.
	after func()
}

// Get implements agent.NodeView: the copy held, or the Node as it is.
func (v *nodeView) Get() (*corev1.Node, error) {
	v.mu.Lock()
	held, after := v.held, v.after
	v.after = nil
	v.mu.Unlock()
	if after != nil {
		defer after()
	}
	if held != nil {
		return held.DeepCopy(), nil
	}
	return v.NodeView.Get()
}

// afterNextGet runs f once, after the next Get took its copy.
func (v *nodeView) afterNextGet(f func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.after = f
}

// hold makes the view show n until hold(nil).
func (v *nodeView) hold(n *corev1.Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.held = n
}

// touch tells the controller that the Node changed.
func (v *nodeView) touch() {
	if err := v.Touch(); err != nil {
		v.t.Error(err)
	}
}

// controller returns a maintenance controller on the harness's engine with
// its one fake drain slot, and its view.
func (h *harness) controller() (*Controller, *nodeView) {
	return NewController(ControllerOptions{Engine: h.engine, Slots: harnessSlots{h.slots, h.rebootSlot}}), &nodeView{NodeView: agenttest.NodeView{Client: kubetest.Wrap(h.client), Name: testNode}, t: h.t}
}

// patchNode applies a merge patch to the Node.
func (h *harness) patchNode(patch string) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Nodes().Patch(context.Background(), testNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// waitFor steps the fake clock a second at a time until ok holds. The
// limit is only there to turn a hang into a failure.
func (h *harness) waitFor(what string, ok func() bool) {
	h.t.Helper()
	limit := time.After(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-limit:
			h.t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
			h.clock.Step(time.Second)
		}
	}
}

func (h *harness) status() *selfdrain.Status {
	st, err := selfdrain.ParseStatus(h.node())
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func ptrTo[T any](v T) *T { return &v }

// hasTaint reports whether node carries a taint of key.
func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// refusal builds a 429 the way kube-apiserver's eviction REST does, with a
// DisruptionBudget cause carrying msg.
func refusal(msg string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: msg})
	return err
}
