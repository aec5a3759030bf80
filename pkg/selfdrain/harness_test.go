package selfdrain

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

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
	engine   *Engine

	mu        sync.Mutex
	evictions []eviction
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
	}
	cfg := config.Default().Drain
	cfg.Parallelism = 2
	h.engine = NewEngine(EngineOptions{
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
func (h *harness) drain(ctx context.Context, st *Status, req Request) (out *Status, err error) {
	h.t.Helper()
	h.run(func() { out, err = h.engine.Drain(ctx, st, req) }, nil)
	return out, err
}

// run calls f and steps the fake clock by RetryInitial whenever something
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
				h.clock.Step(RetryInitial)
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

// patchNode applies a merge patch to the Node.
func (h *harness) patchNode(patch string) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Nodes().Patch(context.Background(), testNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) status() *Status {
	st, err := ParseStatus(h.node())
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func ptrTo[T any](v T) *T { return &v }

// events takes the Events recorded so far.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case ev := <-h.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	for _, ev := range events {
		if strings.HasPrefix(ev, prefix) {
			return true
		}
	}
	return false
}

// shutdownDrain drains as pkg/maintenance's DrainForShutdown has the engine
// do: the condition, a drain without drain.timeout until deadline, and the
// record of whether it was complete.
func (h *harness) shutdownDrain(deadline time.Time) (ShutdownResult, error) {
	ctx := context.Background()
	h.engine.AnnounceShutdown(ctx, deadline)
	st, err := h.engine.BeginAndDrain(ctx, Request{Trigger: TriggerShutdown, Reason: "host is shutting down",
		Deadline: deadline.Add(-StatusReserve), SkippedConcurrencyWait: true, NotATimeout: true})
	if st == nil {
		return ShutdownResult{}, err
	}
	return h.engine.RecordShutdownDrain(ctx, st), err
}
