package selfdrain

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/selfdrain/podorder"
)

// A drain by the order and behaviours pkg/selfdrain/podorder gives its
// pods, on the fake clientset; podorder's own tests hold the tables.

var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rulePod is a pod in ns with labels and annotations, created at created.
func rulePod(ns, name string, labels, annotations map[string]string) *corev1.Pod {
	p := testPod(name)
	p.Namespace, p.Labels, p.Annotations = ns, labels, annotations
	p.UID = types.UID("uid-" + ns + "-" + name)
	p.CreationTimestamp = metav1.NewTime(created)
	return p
}

// The drain evicts order group by order group: no pod of a later group is
// asked to leave before every pod of the earlier one is gone. The names
// sort against the order, so a drain that went by name would fail.
func TestDrainEvictsInOrderGroups(t *testing.T) {
	pods := []*corev1.Pod{
		rulePod("ns", "a-vm", map[string]string{"kubevirt.io": "virt-launcher"}, nil),             // 100, the default rule
		rulePod("ns", "b-db", map[string]string{"app": "db"}, nil),                                // 10
		rulePod("ns", "c-late", nil, map[string]string{podorder.DrainOrderAnnotation: "50"}),      // 50
		rulePod("ns", "d-web", map[string]string{"app": "web"}, nil),                              // 0
		rulePod("ns", "e-web", map[string]string{"app": "web"}, nil),                              // 0
		rulePod("ns", "f-first", map[string]string{"tier": "front"}, nil),                         // -1
		rulePod("ns", "g-skip", nil, map[string]string{podorder.DrainBehaviorAnnotation: "Skip"}), // never
		rulePod("ns", "h-bad", nil, map[string]string{podorder.DrainOrderAnnotation: "soon"}),     // 0
		rulePod("kube-system", "i-agent", map[string]string{"app": "monitoring-agent"}, nil),      // Skip by rule
	}
	var objs []runtime.Object
	for _, p := range pods {
		objs = append(objs, p)
	}
	h := newHarness(t, objs...)
	h.engine.Config.PodRules = append([]config.PodRuleConfig{
		{Name: "db", PodSelector: "app=db", Behavior: config.PodBehaviorDrain, Order: 10},
		{Name: "front", PodSelector: "tier=front", Behavior: config.PodBehaviorDrain, Order: -1},
		{Name: "agents", Namespaces: []string{"kube-system"}, Behavior: config.PodBehaviorSkip},
	}, h.engine.Config.PodRules...)
	h.onEvict(func(eviction) error { return nil })
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}, Request{Trigger: TriggerAnnotation})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range h.evicted() {
		got = append(got, strings.TrimPrefix(ev.key, "ns/"))
	}
	groups := [][]string{{"f-first"}, {"d-web", "e-web", "h-bad"}, {"b-db"}, {"c-late"}, {"a-vm"}}
	at := 0
	for _, g := range groups {
		if at+len(g) > len(got) {
			t.Fatalf("evictions %v, want the groups %v in order", got, groups)
		}
		if part := slices.Sorted(slices.Values(got[at : at+len(g)])); !slices.Equal(part, g) {
			t.Errorf("evictions %v: at %d got %v, want the group %v", got, at, got[at:at+len(g)], g)
		}
		at += len(g)
	}
	if at != len(got) {
		t.Errorf("evictions %v, want only %v (the Skip pods stay)", got, groups)
	}
	if st.Phase != PhaseSucceeded || st.EvictionPods != 7 || st.TotalPods != 9 {
		t.Errorf("status %s, want Succeeded with 7 of 9 pods to evict", st.Encode())
	}
	for _, name := range []string{"ns/g-skip", "kube-system/i-agent"} {
		ns, n, _ := strings.Cut(name, "/")
		if _, err := h.client.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{}); err != nil {
			t.Errorf("Skip pod %s: %v, want it left on the node", name, err)
		}
	}
	events := h.events()
	if !hasEvent(events, `Warning PodAnnotationIgnored pod ns/h-bad: node-agent.io/drain-order "soon" ignored`) {
		t.Errorf("events %q, want a Warning for ns/h-bad's malformed order", events)
	}
	if !hasEvent(events, "Normal PodsSkipped The drain leaves 2 pods on the node (behaviour Skip), neither evicting nor waiting for them: kube-system/i-agent, ns/g-skip") {
		t.Errorf("events %q, want PodsSkipped naming 2 pods", events)
	}
}

// A WaitCompleted pod is never evicted; the drain says it waits for it and
// ends only once the pod has completed.
func TestDrainWaitsForWaitCompleted(t *testing.T) {
	job := rulePod("ns", "job", nil, map[string]string{podorder.DrainBehaviorAnnotation: config.PodBehaviorWaitCompleted})
	h := newHarness(t, job, rulePod("ns", "web", nil, nil))
	h.onEvict(func(eviction) error { return nil })
	var (
		st   *Status
		err  error
		done = make(chan struct{})
		mu   sync.Mutex
	)
	go func() {
		defer close(done)
		out, e := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}, Request{Trigger: TriggerAnnotation})
		mu.Lock()
		st, err = out, e
		mu.Unlock()
	}()
	// The drain publishes what it waits on once ns/web is gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if rec, perr := ParseStatus(h.node()); perr == nil && rec != nil && len(rec.PendingPods) == 1 &&
			strings.Contains(rec.LastError, "WaitCompleted pods to complete: ns/job") &&
			len(rec.Blockers) == 1 && rec.Blockers[0].Reason == BlockerWaitCompleted {
			break
		}
		select {
		case <-done:
			t.Fatalf("the drain ended (%s, %v) with the WaitCompleted pod still running", st.Encode(), err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record never said it waits for ns/job: %s", h.status().Encode())
		}
		time.Sleep(5 * time.Millisecond)
	}
	job.Status.Phase = corev1.PodSucceeded
	if _, err := h.client.CoreV1().Pods("ns").UpdateStatus(context.Background(), job, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	if err != nil || st.Phase != PhaseSucceeded || st.LastError != "" {
		t.Fatalf("drain = %s, %v; want Succeeded", st.Encode(), err)
	}
	for _, ev := range h.evicted() {
		if ev.key == "ns/job" {
			t.Errorf("the WaitCompleted pod was evicted: %+v", ev)
		}
	}
}

// An opted-out pod is not evicted before its opt-out ends, counted from
// its creation; a malformed opt-out holds nothing.
func TestDrainHonoursDoNotDrain(t *testing.T) {
	h := newHarness(t,
		rulePod("ns", "held", nil, map[string]string{podorder.DoNotDrainAnnotation: "10s"}),
		rulePod("ns", "bad", nil, map[string]string{podorder.DoNotDrainAnnotation: "forever"}),
		rulePod("ns", "later", nil, map[string]string{podorder.DrainOrderAnnotation: "1"}))
	h.onEvict(func(eviction) error { return nil })
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}, Request{Trigger: TriggerAnnotation})
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("drain = %s, %v; want Succeeded", st.Encode(), err)
	}
	at := map[string]time.Time{}
	var order []string
	for _, ev := range h.evicted() {
		at[ev.key] = ev.at
		order = append(order, ev.key)
	}
	if want := created.Add(10 * time.Second); at["ns/held"].Before(want) {
		t.Errorf("ns/held evicted at %s, before its opt-out ended at %s", at["ns/held"], want)
	}
	if !at["ns/bad"].Before(created.Add(10 * time.Second)) {
		t.Errorf("ns/bad, whose opt-out is malformed, evicted at %s: it was held", at["ns/bad"])
	}
	if !slices.Equal(order, []string{"ns/bad", "ns/held", "ns/later"}) {
		t.Errorf("evictions %v, want ns/bad, then ns/held once its opt-out ended, then the later group", order)
	}
	if ev := h.events(); !hasEvent(ev, `Warning PodAnnotationIgnored pod ns/bad: node-agent.io/do-not-drain "forever" ignored`) {
		t.Errorf("events %q, want a Warning for ns/bad", ev)
	}
}

// At drain.timeout, the pods the drain waited on by their treatment are
// named with why they stayed.
func TestTimeoutNamesWhatTheDrainWaitedOn(t *testing.T) {
	h := newHarness(t,
		rulePod("ns", "job", nil, map[string]string{podorder.DrainBehaviorAnnotation: config.PodBehaviorWaitCompleted}),
		rulePod("ns", "held", nil, map[string]string{podorder.DoNotDrainAnnotation: "1h"}),
		rulePod("ns", "vm", map[string]string{"kubevirt.io": "virt-launcher"}, nil))
	h.onEvict(func(eviction) error { return nil })
	deadline := h.clock.Now().Add(5 * time.Second)
	st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning, Trigger: TriggerAnnotation}, Request{Trigger: TriggerAnnotation, Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]BlockerReason{"ns/job": BlockerWaitCompleted, "ns/held": BlockerDoNotDrain, "ns/vm": BlockerOrderGroup}
	got := map[string]BlockerReason{}
	for _, b := range st.Blockers {
		got[b.Pod] = b.Reason
	}
	if st.Phase != PhaseFailed || len(got) != len(want) {
		t.Fatalf("status %s, want Failed with blockers %v", st.Encode(), want)
	}
	for pod, r := range want {
		if got[pod] != r {
			t.Errorf("blocker of %s = %s, want %s", pod, got[pod], r)
		}
	}
	for _, s := range []string{"not completed (WaitCompleted, never evicted): ns/job", "opted out of the drain (node-agent.io/do-not-drain): ns/held", "in a later order group: ns/vm (order 100, after order group 0)"} {
		if !strings.Contains(st.LastError, s) {
			t.Errorf("lastError %q does not say %q", st.LastError, s)
		}
	}
	if len(h.evicted()) != 0 {
		t.Errorf("evictions %+v, want none", h.evicted())
	}
}

// However many pods carry a malformed annotation, the drain sends one Event
// for them: an Event is a request.
func TestIgnoredAnnotationsMakeOneEvent(t *testing.T) {
	var objs []runtime.Object
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		objs = append(objs, rulePod("ns", name, nil, map[string]string{podorder.DrainOrderAnnotation: "first"}))
	}
	h := newHarness(t, objs...)
	h.onEvict(func(eviction) error { return nil })
	if st, err := h.drain(context.Background(), &Status{Phase: PhaseRunning}, Request{}); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("drain = %s, %v; want Succeeded", st.Encode(), err)
	}
	var ignored []string
	for _, ev := range h.events() {
		if strings.HasPrefix(ev, "Warning PodAnnotationIgnored") {
			ignored = append(ignored, ev)
		}
	}
	if len(ignored) != 1 || !strings.Contains(ignored[0], "pod ns/a: node-agent.io/drain-order \"first\" ignored") || !strings.HasSuffix(ignored[0], "and 2 more") {
		t.Errorf("PodAnnotationIgnored Events %q, want one naming ns/a and counting 2 more", ignored)
	}
}
