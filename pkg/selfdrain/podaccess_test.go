package selfdrain

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/podaccess"
)

// Without a way to the node's pods, Begin refuses before the Node changes:
// no cordon, no taint, no status.
func TestBeginRefusesWithoutPodAccess(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.engine.PodAccess = func(context.Context) (podaccess.Access, error) {
		return podaccess.Access{Mode: podaccess.ModeNone, Why: "impersonating system:node:node-1 was refused: no"}, nil
	}
	_, err := h.engine.Begin(context.Background(), Request{Trigger: TriggerAnnotation, Reason: "test"})
	if !errors.Is(err, podaccess.ErrNoAccess) {
		t.Fatalf("Begin: %v, want %v", err, podaccess.ErrNoAccess)
	}
	n := h.node()
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 0 || n.Annotations[StatusAnnotation] != "" {
		t.Errorf("the Node changed although the drain was refused: unschedulable %v, taints %v, annotations %v", n.Spec.Unschedulable, n.Spec.Taints, n.Annotations)
	}
	// An unknown answer (apiserver unreachable) refuses too.
	h.engine.PodAccess = func(context.Context) (podaccess.Access, error) {
		return podaccess.Access{}, errors.New("connection refused")
	}
	if _, err := h.engine.Begin(context.Background(), Request{Trigger: TriggerAnnotation, Reason: "test"}); err == nil {
		t.Fatal("Begin started without knowing how to reach the pods")
	}
	if h.node().Spec.Unschedulable {
		t.Error("the Node was cordoned")
	}
}

// With access as the node, every pod request of the drain goes through the
// node's client and the Node's writes through the ServiceAccount's.
func TestDrainEvictsThroughThePodClient(t *testing.T) {
	h := newHarness(t)
	pods := fake.NewClientset(testPod("a"), testPod("b"))
	var evictions, ownPodCalls atomic.Int32
	pods.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		evictions.Add(1)
		ev := a.(k8stesting.CreateAction)
		name := ev.GetObject().(interface{ GetName() string }).GetName()
		return true, nil, pods.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.GetNamespace(), name)
	})
	h.client.PrependReactor("*", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		ownPodCalls.Add(1)
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no direct grant"))
	})
	h.engine.PodAccess = func(context.Context) (podaccess.Access, error) {
		return podaccess.Access{Mode: podaccess.ModeNode, Client: kubetest.Wrap(pods)}, nil
	}
	ctx := context.Background()
	st, err := h.engine.Begin(ctx, Request{Trigger: TriggerAnnotation, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if st.PodAccess != string(podaccess.ModeNode) {
		t.Errorf("status podAccess %q, want %q", st.PodAccess, podaccess.ModeNode)
	}
	if !h.node().Spec.Unschedulable {
		t.Error("not cordoned")
	}
	st, err = h.drain(ctx, st, Request{Trigger: TriggerAnnotation})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseSucceeded || evictions.Load() != 2 {
		t.Errorf("phase %s with %d evictions through the node's client, want Succeeded with 2", st.Phase, evictions.Load())
	}
	if n := ownPodCalls.Load(); n != 0 {
		t.Errorf("%d pod requests went out as the ServiceAccount", n)
	}
}
