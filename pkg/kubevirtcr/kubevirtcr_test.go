package kubevirtcr

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// kv is a KubeVirt CR as virt-operator leaves it: phase Deployed unless
// phase says otherwise ("-" for none).
func kv(ns, name string, created time.Time, phase string, configuration map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"namespace": ns, "name": name, "creationTimestamp": created.UTC().Format(time.RFC3339)},
		"spec":     map[string]any{"configuration": configuration},
	}}
	if phase == "" {
		phase = "Deployed"
	}
	if phase != "-" {
		u.Object["status"] = map[string]any{"phase": phase}
	}
	return u
}

func TestChoose(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	full := map[string]any{
		"obsoleteCPUModels": map[string]any{"Westmere": true, "Haswell": false},
		"minCPUModel":       "Penryn",
		"developerConfiguration": map[string]any{
			"featureGates": []any{"CrossArchitectureVirtualization", "Snapshot"},
		},
	}
	deleting := kv("kubevirt", "gone", t0, "", nil)
	deleting.SetDeletionTimestamp(&metav1.Time{Time: t0})
	tests := []struct {
		name     string
		objs     []*unstructured.Unstructured
		want     *Settings
		wantNote string
	}{
		{name: "none", wantNote: "no KubeVirt CR"},
		{name: "every field, values of the map ignored", objs: []*unstructured.Unstructured{kv("kubevirt", "kubevirt", t0, "", full)},
			want: &Settings{CR: "kubevirt/kubevirt", ObsoleteCPUModels: []string{"Haswell", "Westmere"}, MinCPUModel: "Penryn", FeatureGates: []string{"CrossArchitectureVirtualization", "Snapshot"}}},
		{name: "no configuration", objs: []*unstructured.Unstructured{kv("kubevirt", "kubevirt", t0, "", nil)},
			want: &Settings{CR: "kubevirt/kubevirt"}},
		{name: "not taken up by virt-operator", objs: []*unstructured.Unstructured{kv("kubevirt", "kubevirt", t0, "-", full)},
			wantNote: "kubevirt/kubevirt has no status.phase yet"},
		{name: "being deleted", objs: []*unstructured.Unstructured{deleting}, wantNote: "no KubeVirt CR"},
		{name: "several: the oldest", objs: []*unstructured.Unstructured{
			kv("second", "kubevirt", t0.Add(time.Hour), "", full), kv("kubevirt", "kubevirt", t0, "", nil), deleting},
			want: &Settings{CR: "kubevirt/kubevirt"}, wantNote: "2 KubeVirt CRs in force (kubevirt/kubevirt, second/kubevirt): virt-operator installs from one only; the oldest, kubevirt/kubevirt, applies"},
		{name: "fields of the wrong type", objs: []*unstructured.Unstructured{kv("kubevirt", "kubevirt", t0, "", map[string]any{
			"obsoleteCPUModels": []any{"Westmere"}, "minCPUModel": int64(3), "developerConfiguration": map[string]any{"featureGates": "all"}})},
			want:     &Settings{CR: "kubevirt/kubevirt"},
			wantNote: "obsoleteCPUModels is a []interface {}, not a map of model names; ignored; kubevirt/kubevirt: spec.configuration.minCPUModel is a int64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Choose(tt.objs)
			if !reflect.DeepEqual(got.Settings, tt.want) {
				t.Errorf("settings %+v; want %+v", got.Settings, tt.want)
			}
			if (tt.wantNote == "") != (got.Note == "") || !strings.Contains(got.Note, tt.wantNote) {
				t.Errorf("note %q; want one containing %q", got.Note, tt.wantNote)
			}
		})
	}
}

// fakeDiscovery serves kubevirts.kubevirt.io while served is true, and fails
// with err when set.
type fakeDiscovery struct {
	mu     sync.Mutex
	served bool
	err    error
	asked  int
}

func (d *fakeDiscovery) set(served bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.served, d.err = served, err
}

func (d *fakeDiscovery) ServerVersion() (*version.Info, error) {
	return &version.Info{Major: "1", Minor: "36", GitVersion: "v1.36.3"}, nil
}

func (d *fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked++
	switch {
	case d.err != nil:
		return nil, d.err
	case !d.served || gv != "kubevirt.io/v1":
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "kubevirts", Namespaced: true}}}, nil
}

type harness struct {
	t      *testing.T
	disc   *fakeDiscovery
	dyn    *dynamicfake.FakeDynamicClient
	clock  *clocktesting.FakeClock
	states chan State
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, served bool, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		t:      t,
		disc:   &fakeDiscovery{served: served},
		dyn:    dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GVR: "KubeVirtList"}, objs...),
		clock:  clocktesting.NewFakeClock(time.Now()),
		states: make(chan State, 10),
		done:   make(chan struct{}),
	}
	return h
}

func (h *harness) run() {
	w := &Watcher{Client: h.dyn, Discovery: h.disc, Logger: slog.New(slog.DiscardHandler), Clock: h.clock, RecheckInterval: 5 * time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		w.Run(ctx, func(s State) { h.states <- s })
	}()
	h.t.Cleanup(func() {
		cancel()
		<-h.done
	})
}

func (h *harness) next(what string) State {
	h.t.Helper()
	select {
	case s := <-h.states:
		return s
	case <-time.After(30 * time.Second):
		h.t.Fatalf("no state reported: %s", what)
		return State{}
	}
}

// quiet checks that nothing was reported once the watcher is back waiting
// for its recheck, that is, once it has done all it would do.
func (h *harness) quiet(what string) {
	h.t.Helper()
	h.waitForWaiter()
	select {
	case s := <-h.states:
		h.t.Fatalf("%s: reported %+v", what, s)
	default:
	}
}

func (h *harness) waitForWaiter() {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !h.clock.HasWaiters() {
		if time.Now().After(deadline) {
			h.t.Fatal("the watcher never waits for the recheck")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitAndStep moves the fake clock past the recheck wait once the watcher
// waits on it.
func (h *harness) waitAndStep() {
	h.t.Helper()
	h.waitForWaiter()
	h.clock.Step(5 * time.Minute)
}

// TestWatcherFollowsChanges: the CR is reported once listed, and again after
// each change, with no recheck in between: the informer's watch brings them.
func TestWatcherFollowsChanges(t *testing.T) {
	cr := kv("kubevirt", "kubevirt", time.Now(), "", map[string]any{"obsoleteCPUModels": map[string]any{"Westmere": true}})
	h := start(t, true, cr)
	h.run()
	s := h.next("the CR")
	if s.Settings == nil || !reflect.DeepEqual(s.Settings.ObsoleteCPUModels, []string{"Westmere"}) || s.Note != "" {
		t.Fatalf("state %+v %+v; want the CR's Westmere", s, s.Settings)
	}
	res := h.dyn.Resource(GVR).Namespace("kubevirt")
	cr = cr.DeepCopy()
	cr.Object["spec"] = map[string]any{"configuration": map[string]any{"developerConfiguration": map[string]any{"featureGates": []any{"CrossArchitectureVirtualization"}}}}
	if _, err := res.Update(context.Background(), cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s = h.next("the update")
	if s.Settings == nil || s.Settings.ObsoleteCPUModels != nil || !reflect.DeepEqual(s.Settings.FeatureGates, []string{"CrossArchitectureVirtualization"}) {
		t.Fatalf("after the update: %+v", s.Settings)
	}
	// A change that changes nothing read reports nothing: the next
	// state reported is the deletion's.
	cr.SetLabels(map[string]string{"a": "b"})
	if _, err := res.Update(context.Background(), cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := res.Delete(context.Background(), "kubevirt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if s = h.next("the deletion"); s.Settings != nil || s.Note != "no KubeVirt CR" {
		t.Fatalf("after a label change and the deletion: %+v; want the deletion's state only", s)
	}
	if h.clock.HasWaiters() {
		t.Error("the watcher waits on the clock while it watches")
	}
	h.disc.mu.Lock()
	defer h.disc.mu.Unlock()
	if h.disc.asked != 1 {
		t.Errorf("discovery asked %d times; want once", h.disc.asked)
	}
}

// TestWatcherPicksUpKubeVirtLater: without the resource the watcher says so,
// asks discovery again only after RecheckInterval, and then watches.
func TestWatcherPicksUpKubeVirtLater(t *testing.T) {
	h := start(t, false)
	h.run()
	if s := h.next("not served"); s.Settings != nil || s.Note != NotServed {
		t.Fatalf("state %+v; want %q", s, NotServed)
	}
	h.waitAndStep()
	h.quiet("still not served")
	if _, err := h.dyn.Resource(GVR).Namespace("kubevirt").Create(context.Background(),
		kv("kubevirt", "kubevirt", time.Now(), "", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.disc.set(true, nil)
	h.waitAndStep()
	if s := h.next("installed"); s.Settings == nil || s.Settings.CR != "kubevirt/kubevirt" {
		t.Fatalf("state %+v; want the CR", s)
	}
}

// TestWatcherUncertain: while discovery fails nothing is reported, so the
// labeller changes nothing on a guess; a refused list is reported, naming
// what to grant.
func TestWatcherUncertain(t *testing.T) {
	h := start(t, true)
	h.disc.set(false, apierrors.NewServiceUnavailable("etcd is sad"))
	h.run()
	h.waitAndStep()
	h.quiet("discovery failing")

	h.dyn.PrependReactor("list", "kubevirts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "kubevirt.io", Resource: "kubevirts"}, "", nil)
	})
	h.disc.set(true, nil)
	h.waitAndStep()
	s := h.next("forbidden")
	if s.Settings != nil || !strings.Contains(s.Note, "forbidden") || !strings.Contains(s.Note, "labeller.kubeVirtCR: ignore") {
		t.Fatalf("state %+v; want a note on the refusal", s)
	}
}

func TestRead(t *testing.T) {
	disc := &fakeDiscovery{}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GVR: "KubeVirtList"},
		kv("kubevirt", "kubevirt", time.Now(), "", map[string]any{"minCPUModel": "Penryn"}))
	s, err := Read(context.Background(), disc, dyn)
	if err != nil || s.Settings != nil || s.Note != NotServed {
		t.Errorf("not served: %+v, %v", s, err)
	}
	disc.set(true, nil)
	s, err = Read(context.Background(), disc, dyn)
	if err != nil || s.Settings == nil || s.Settings.MinCPUModel != "Penryn" {
		t.Errorf("served: %+v, %v", s, err)
	}
	disc.set(true, apierrors.NewServiceUnavailable("down"))
	if _, err := Read(context.Background(), disc, dyn); err == nil || !strings.Contains(err.Error(), "kubevirt.io/v1") {
		t.Errorf("discovery failing: %v", err)
	}
}
