package maintenance

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func unstructuredNM(group, name, node string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/" + NodeMaintenanceVersion, "kind": NodeMaintenanceKind,
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"nodeName": node},
	}}
}

// TestSourceWithoutSelectableField: against a CRD without spec.nodeName as
// a selectable field (the operator's), the field selector is refused; the
// source then watches every object of the group and keeps its node's. Only
// the served group is watched, and Synced waits for discovery.
func TestSourceWithoutSelectableField(t *testing.T) {
	const group = "nodemaintenance.medik8s.io"
	gvr := NodeMaintenanceGVR(group)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "NodeMaintenanceList", NodeMaintenanceGVR("nodemaintenance.kubevirt.io"): "NodeMaintenanceList"},
		unstructuredNM(group, "mine", "node-1"), unstructuredNM(group, "other", "node-2"))
	var mu sync.Mutex
	var selectors []string
	tried := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(selectors)
	}
	dyn.PrependReactor("list", "nodemaintenances", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListActionImpl).GetListRestrictions().Fields.String()
		mu.Lock()
		selectors = append(selectors, sel)
		mu.Unlock()
		if sel != "" {
			return true, nil, apierrors.NewBadRequest(`field label not supported: spec.nodeName`)
		}
		return false, nil, nil
	})
	disc := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: group + "/v1beta1", APIResources: []metav1.APIResource{{Name: NodeMaintenanceResource}}},
	}}}
	s := &NodeMaintenanceSource{Client: dyn, Discovery: disc, NodeName: "node-1", Logger: slog.New(slog.DiscardHandler),
		Clock: clocktesting.NewFakeClock(time.Now()), RecheckInterval: time.Minute}
	if s.Synced() {
		t.Fatal("synced before discovery")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 100)
	go s.Run(ctx, func() { changed <- struct{}{} })
	// Run says when the objects are known: after that change, Synced holds.
	deadline := time.After(30 * time.Second)
	for !s.Synced() {
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("not synced: selectors tried %q", tried())
		}
	}
	objs := s.Objects()
	if len(objs) != 1 || objs[0].Name != "mine" || objs[0].Group() != group {
		t.Errorf("objects = %+v, want only %s/mine", objs, group)
	}
	if got := s.Groups(); len(got) != 1 || got[0] != group {
		t.Errorf("groups = %v, want [%s]", got, group)
	}
	if sel := tried(); len(sel) < 2 || sel[0] != "spec.nodeName=node-1" || sel[len(sel)-1] != "" {
		t.Errorf("list selectors %q: want spec.nodeName=node-1 first, then none", sel)
	}
}
