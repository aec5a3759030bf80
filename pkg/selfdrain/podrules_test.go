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
)

// Tests of the drain's order groups and per-pod behaviours (podrules.go):
// the pure decisions first, then the drain that applies them on the fake
// clientset.

var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rulePod is a pod in ns with labels and annotations, created at created.
func rulePod(ns, name string, labels, annotations map[string]string) *corev1.Pod {
	p := testPod(name)
	p.Namespace, p.Labels, p.Annotations = ns, labels, annotations
	p.UID = types.UID("uid-" + ns + "-" + name)
	p.CreationTimestamp = metav1.NewTime(created)
	return p
}

func mustRules(t *testing.T, cfg ...config.PodRuleConfig) []podRule {
	t.Helper()
	rules, err := compilePodRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func TestTreatPod(t *testing.T) {
	rules := []config.PodRuleConfig{
		{Name: "db-late", Namespaces: []string{"db"}, PodSelector: "app=db", Behavior: config.PodBehaviorDrain, Order: 10},
		{Name: "early", PodSelector: "tier=front", Behavior: config.PodBehaviorDrain, Order: -5},
		{Name: "batch", PodSelector: "kind=batch", Behavior: config.PodBehaviorWaitCompleted},
		{Name: "monitoring", Namespaces: []string{"monitoring"}, Behavior: config.PodBehaviorSkip},
		// Never reached for an app=db pod in db: the first match decides.
		{Name: "shadowed", PodSelector: "app=db", Behavior: config.PodBehaviorSkip},
	}
	const bound = 2 * time.Hour
	tests := []struct {
		name        string
		pod         *corev1.Pod
		want        podTreatment // Ignored is checked by wantIgnored
		wantIgnored []string     // substrings, one per ignored annotation
	}{
		{name: "no rule, no annotation: Drain at 0", pod: rulePod("web", "a", nil, nil),
			want: podTreatment{Behavior: config.PodBehaviorDrain}},
		{name: "a rule by namespace and labels", pod: rulePod("db", "a", map[string]string{"app": "db"}, nil),
			want: podTreatment{Behavior: config.PodBehaviorDrain, Order: 10, By: "rule db-late"}},
		{name: "the rule's namespace only", pod: rulePod("other", "a", map[string]string{"app": "db"}, nil),
			want: podTreatment{Behavior: config.PodBehaviorSkip, By: "rule shadowed"}},
		{name: "a negative order from a rule", pod: rulePod("web", "a", map[string]string{"tier": "front"}, nil),
			want: podTreatment{Behavior: config.PodBehaviorDrain, Order: -5, By: "rule early"}},
		{name: "WaitCompleted by a rule", pod: rulePod("jobs", "a", map[string]string{"kind": "batch"}, nil),
			want: podTreatment{Behavior: config.PodBehaviorWaitCompleted, By: "rule batch"}},
		{name: "Skip by a namespace rule", pod: rulePod("monitoring", "a", nil, nil),
			want: podTreatment{Behavior: config.PodBehaviorSkip, By: "rule monitoring"}},
		{name: "a rule wins over the pod's annotations", pod: rulePod("db", "a", map[string]string{"app": "db"},
			map[string]string{DrainBehaviorAnnotation: "Skip", DrainOrderAnnotation: "0"}),
			want:        podTreatment{Behavior: config.PodBehaviorDrain, Order: 10, By: "rule db-late"},
			wantIgnored: []string{DrainBehaviorAnnotation + " ignored: drain.podRules db-late decides", DrainOrderAnnotation + " ignored"}},
		{name: "behaviour by annotation", pod: rulePod("web", "a", nil, map[string]string{DrainBehaviorAnnotation: "WaitCompleted"}),
			want: podTreatment{Behavior: config.PodBehaviorWaitCompleted, By: "annotation"}},
		{name: "Skip by annotation", pod: rulePod("web", "a", nil, map[string]string{DrainBehaviorAnnotation: "Skip"}),
			want: podTreatment{Behavior: config.PodBehaviorSkip, By: "annotation"}},
		{name: "a malformed behaviour changes nothing", pod: rulePod("web", "a", nil, map[string]string{DrainBehaviorAnnotation: "skip"}),
			want:        podTreatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`node-agent.io/drain-behavior "skip" ignored: want one of Drain, Skip, WaitCompleted`}},
		{name: "a later order by annotation", pod: rulePod("web", "a", nil, map[string]string{DrainOrderAnnotation: "50"}),
			want: podTreatment{Behavior: config.PodBehaviorDrain, Order: 50, By: "annotation"}},
		{name: "an order at the top", pod: rulePod("web", "a", nil, map[string]string{DrainOrderAnnotation: "1000"}),
			want: podTreatment{Behavior: config.PodBehaviorDrain, Order: 1000, By: "annotation"}},
		{name: "a pod may not jump ahead", pod: rulePod("web", "a", nil, map[string]string{DrainOrderAnnotation: "-1"}),
			want:        podTreatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`node-agent.io/drain-order "-1" ignored: want a whole number from 0 to 1000`}},
		{name: "an order past the top", pod: rulePod("web", "a", nil, map[string]string{DrainOrderAnnotation: "1001"}),
			want:        podTreatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`"1001" ignored`}},
		{name: "an order that is not a number", pod: rulePod("web", "a", nil, map[string]string{DrainOrderAnnotation: "last"}),
			want:        podTreatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`"last" ignored`}},
		{name: "an order on a WaitCompleted pod", pod: rulePod("web", "a", nil, map[string]string{DrainBehaviorAnnotation: "WaitCompleted", DrainOrderAnnotation: "5"}),
			want:        podTreatment{Behavior: config.PodBehaviorWaitCompleted, By: "annotation"},
			wantIgnored: []string{"a WaitCompleted pod is never evicted"}},
		{name: "an opt-out counted from the creation", pod: rulePod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "30m"}),
			want: podTreatment{Behavior: config.PodBehaviorDrain, HoldUntil: created.Add(30 * time.Minute)}},
		{name: "an opt-out cut to the bound", pod: rulePod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "100h"}),
			want:        podTreatment{Behavior: config.PodBehaviorDrain, HoldUntil: created.Add(bound)},
			wantIgnored: []string{`node-agent.io/do-not-drain "100h" cut to drain.doNotDrainBound 2h0m0s`}},
		{name: "a malformed opt-out holds nothing", pod: rulePod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "true"}),
			want:        podTreatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`node-agent.io/do-not-drain "true" ignored: want a positive duration`}},
		{name: "a negative opt-out holds nothing", pod: rulePod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "-4h"}),
			want:        podTreatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`"-4h" ignored`}},
		{name: "an opt-out of a pod a rule orders", pod: rulePod("db", "a", map[string]string{"app": "db"}, map[string]string{DoNotDrainAnnotation: "1h"}),
			want: podTreatment{Behavior: config.PodBehaviorDrain, Order: 10, By: "rule db-late", HoldUntil: created.Add(time.Hour)}},
		{name: "no opt-out for a pod never evicted", pod: rulePod("monitoring", "a", nil, map[string]string{DoNotDrainAnnotation: "1h"}),
			want: podTreatment{Behavior: config.PodBehaviorSkip, By: "rule monitoring"}},
	}
	compiled := mustRules(t, rules...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := treatPod(tt.pod, compiled, bound)
			ignored := got.Ignored
			got.Ignored = nil
			if got.Behavior != tt.want.Behavior || got.Order != tt.want.Order || got.By != tt.want.By || !got.HoldUntil.Equal(tt.want.HoldUntil) {
				t.Errorf("treatPod = %+v, want %+v", got, tt.want)
			}
			if len(ignored) != len(tt.wantIgnored) {
				t.Fatalf("ignored %q, want %d matching %q", ignored, len(tt.wantIgnored), tt.wantIgnored)
			}
			for i, want := range tt.wantIgnored {
				if !strings.Contains(ignored[i], want) {
					t.Errorf("ignored[%d] = %q, want it to contain %q", i, ignored[i], want)
				}
			}
		})
	}
}

// With drain.doNotDrainBound 0 no opt-out is honoured, and the pod is told.
func TestTreatPodNoOptOutAllowed(t *testing.T) {
	got := treatPod(rulePod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "1h"}), nil, 0)
	if !got.HoldUntil.IsZero() || len(got.Ignored) != 1 || !strings.Contains(got.Ignored[0], "drain.doNotDrainBound is 0s") {
		t.Errorf("treatPod = %+v, want no hold and the bound named", got)
	}
}

// The default rules have virt-launcher pods leave after the others.
func TestDefaultRulesPutVMsLast(t *testing.T) {
	rules := mustRules(t, config.Default().Drain.PodRules...)
	vm := treatPod(rulePod("vms", "virt-launcher-a", map[string]string{"kubevirt.io": "virt-launcher"}, nil), rules, 0)
	other := treatPod(rulePod("web", "a", map[string]string{"app": "web"}, nil), rules, 0)
	if vm.Behavior != config.PodBehaviorDrain || other.Behavior != config.PodBehaviorDrain || vm.Order <= other.Order {
		t.Errorf("virt-launcher %+v, other %+v: want both Drain, the launcher in a later group", vm, other)
	}
}

// pending builds a drain's pending pods from states keyed by name.
func pending(states ...*podState) map[types.UID]*podState {
	m := map[types.UID]*podState{}
	for _, ps := range states {
		ps.pod.UID = types.UID("uid-" + ps.key)
		m[ps.pod.UID] = ps
	}
	return m
}

func TestEvictableNow(t *testing.T) {
	now := created.Add(time.Hour)
	drainAt := func(key string, order int) *podState {
		return &podState{key: key, treat: podTreatment{Behavior: config.PodBehaviorDrain, Order: order}}
	}
	with := func(ps *podState, f func(*podState)) *podState { f(ps); return ps }
	tests := []struct {
		name     string
		pending  map[types.UID]*podState
		want     []string
		wantNext time.Time
	}{
		{name: "nothing pending", pending: pending()},
		{name: "the lowest group only", pending: pending(drainAt("ns/a", 10), drainAt("ns/b", 0), drainAt("ns/c", 0), drainAt("ns/d", -3)),
			want: []string{"ns/d"}},
		{name: "a group waits while an earlier pod's eviction is accepted but the pod not gone",
			pending: pending(with(drainAt("ns/a", 0), func(ps *podState) { ps.evicted = true }), drainAt("ns/b", 1))},
		{name: "nor while one is in flight",
			pending: pending(with(drainAt("ns/a", 0), func(ps *podState) { ps.inFlight = true }), drainAt("ns/b", 0), drainAt("ns/c", 1)),
			want:    []string{"ns/b"}},
		{name: "the zero treatment is Drain at order 0", pending: pending(&podState{key: "ns/z"}, drainAt("ns/y", 1)),
			want: []string{"ns/z"}},
		{name: "a WaitCompleted pod is never sent and holds no group",
			pending: pending(&podState{key: "ns/w", treat: podTreatment{Behavior: config.PodBehaviorWaitCompleted}}, drainAt("ns/a", 5)),
			want:    []string{"ns/a"}},
		{name: "only WaitCompleted pods left",
			pending: pending(&podState{key: "ns/w", treat: podTreatment{Behavior: config.PodBehaviorWaitCompleted}})},
		{name: "an opt-out holds its pod and its group until it ends",
			pending: pending(with(drainAt("ns/a", 0), func(ps *podState) { ps.treat.HoldUntil = now.Add(time.Minute) }), drainAt("ns/b", 0), drainAt("ns/c", 1)),
			want:    []string{"ns/b"}, wantNext: now.Add(time.Minute)},
		{name: "an opt-out that ran out holds nothing",
			pending: pending(with(drainAt("ns/a", 0), func(ps *podState) { ps.treat.HoldUntil = now }), drainAt("ns/c", 1)),
			want:    []string{"ns/a"}},
		{name: "a retry to come in the group",
			pending: pending(with(drainAt("ns/a", 0), func(ps *podState) { ps.nextAttempt = now.Add(time.Second) }),
				with(drainAt("ns/b", 1), func(ps *podState) { ps.nextAttempt = now.Add(-time.Second) })),
			wantNext: now.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready, next := evictableNow(tt.pending, now)
			var got []string
			for _, ps := range ready {
				got = append(got, ps.key)
			}
			if !slices.Equal(got, tt.want) || !next.Equal(tt.wantNext) {
				t.Errorf("evictableNow = %v, next %s; want %v, next %s", got, next, tt.want, tt.wantNext)
			}
		})
	}
}

func TestWaitingSummary(t *testing.T) {
	now := created.Add(time.Hour)
	wait := &podState{key: "ns/batch", treat: podTreatment{Behavior: config.PodBehaviorWaitCompleted, By: "annotation"}}
	held := &podState{key: "ns/held", treat: podTreatment{Behavior: config.PodBehaviorDrain, HoldUntil: now.Add(time.Hour)}}
	vm := &podState{key: "vms/virt-launcher-a", treat: podTreatment{Behavior: config.PodBehaviorDrain, Order: 100}}
	got := waitingSummary(pending(wait, held, vm, &podState{key: "ns/web"}), now)
	for _, want := range []string{
		"waiting for the 2 pods of order group 0 to be gone before the 1 pods of order groups 100",
		"opt-outs (node-agent.io/do-not-drain) to end: ns/held (until 2026-01-01T02:00:00Z)",
		"WaitCompleted pods to complete: ns/batch",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("waitingSummary = %q, want it to say %q", got, want)
		}
	}
	if got := waitingSummary(pending(&podState{key: "ns/web"}, &podState{key: "ns/api"}), now); got != "" {
		t.Errorf("one group and nothing held: waitingSummary = %q, want empty", got)
	}
}

// The drain evicts order group by order group: no pod of a later group is
// asked to leave before every pod of the earlier one is gone. The names
// sort against the order, so a drain that went by name would fail.
func TestDrainEvictsInOrderGroups(t *testing.T) {
	pods := []*corev1.Pod{
		rulePod("ns", "a-vm", map[string]string{"kubevirt.io": "virt-launcher"}, nil),        // 100, the default rule
		rulePod("ns", "b-db", map[string]string{"app": "db"}, nil),                           // 10
		rulePod("ns", "c-late", nil, map[string]string{DrainOrderAnnotation: "50"}),          // 50
		rulePod("ns", "d-web", map[string]string{"app": "web"}, nil),                         // 0
		rulePod("ns", "e-web", map[string]string{"app": "web"}, nil),                         // 0
		rulePod("ns", "f-first", map[string]string{"tier": "front"}, nil),                    // -1
		rulePod("ns", "g-skip", nil, map[string]string{DrainBehaviorAnnotation: "Skip"}),     // never
		rulePod("ns", "h-bad", nil, map[string]string{DrainOrderAnnotation: "soon"}),         // 0
		rulePod("kube-system", "i-agent", map[string]string{"app": "monitoring-agent"}, nil), // Skip by rule
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
	job := rulePod("ns", "job", nil, map[string]string{DrainBehaviorAnnotation: config.PodBehaviorWaitCompleted})
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
		rulePod("ns", "held", nil, map[string]string{DoNotDrainAnnotation: "10s"}),
		rulePod("ns", "bad", nil, map[string]string{DoNotDrainAnnotation: "forever"}),
		rulePod("ns", "later", nil, map[string]string{DrainOrderAnnotation: "1"}))
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
		rulePod("ns", "job", nil, map[string]string{DrainBehaviorAnnotation: config.PodBehaviorWaitCompleted}),
		rulePod("ns", "held", nil, map[string]string{DoNotDrainAnnotation: "1h"}),
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
		objs = append(objs, rulePod("ns", name, nil, map[string]string{DrainOrderAnnotation: "first"}))
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

// FuzzTreatPod: whatever a pod's writer puts in its annotations, treatPod
// does not panic, keeps the order within the bounds a pod may ask for,
// and either honours a value or says it did not.
func FuzzTreatPod(f *testing.F) {
	f.Add("WaitCompleted", "5", "4h")
	f.Add("skip", "-1", "true")
	f.Add("", "99999999999999999999", "9999999h")
	f.Add("Drain", " 7 ", "1ns")
	rules := []podRule{}
	f.Fuzz(func(t *testing.T, behavior, order, doNotDrain string) {
		p := rulePod("ns", "p", nil, map[string]string{DrainBehaviorAnnotation: behavior, DrainOrderAnnotation: order, DoNotDrainAnnotation: doNotDrain})
		got := treatPod(p, rules, time.Hour)
		if !slices.Contains(config.PodBehaviors, got.Behavior) {
			t.Fatalf("behaviour %q from %q", got.Behavior, behavior)
		}
		if got.Order < 0 || got.Order > config.MaxPodOrder {
			t.Fatalf("order %d from %q: a pod may ask for 0 to %d only", got.Order, order, config.MaxPodOrder)
		}
		if got.HoldUntil.After(created.Add(time.Hour)) {
			t.Fatalf("opt-out until %s from %q, past drain.doNotDrainBound", got.HoldUntil, doNotDrain)
		}
		if got.Behavior != behavior && !slices.ContainsFunc(got.Ignored, func(s string) bool { return strings.HasPrefix(s, DrainBehaviorAnnotation) }) {
			t.Fatalf("behaviour %q not honoured and not said: %+v", behavior, got)
		}
	})
}
