package podorder

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/config"
)

// Table tests of the drain's order and behaviours; pkg/selfdrain's tests
// run a drain by them on the fake clientset.

var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pod is a pod in ns with labels and annotations, created at created.
func pod(ns, name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
		Labels: labels, Annotations: annotations, CreationTimestamp: metav1.NewTime(created)}}
}

func mustRules(t *testing.T, cfg ...config.PodRuleConfig) []Rule {
	t.Helper()
	rules, err := CompileRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func TestTreat(t *testing.T) {
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
		want        Treatment // Ignored is checked by wantIgnored
		wantIgnored []string  // substrings, one per ignored annotation
	}{
		{name: "no rule, no annotation: Drain at 0", pod: pod("web", "a", nil, nil),
			want: Treatment{Behavior: config.PodBehaviorDrain}},
		{name: "a rule by namespace and labels", pod: pod("db", "a", map[string]string{"app": "db"}, nil),
			want: Treatment{Behavior: config.PodBehaviorDrain, Order: 10, By: "rule db-late"}},
		{name: "the rule's namespace only", pod: pod("other", "a", map[string]string{"app": "db"}, nil),
			want: Treatment{Behavior: config.PodBehaviorSkip, By: "rule shadowed"}},
		{name: "a negative order from a rule", pod: pod("web", "a", map[string]string{"tier": "front"}, nil),
			want: Treatment{Behavior: config.PodBehaviorDrain, Order: -5, By: "rule early"}},
		{name: "WaitCompleted by a rule", pod: pod("jobs", "a", map[string]string{"kind": "batch"}, nil),
			want: Treatment{Behavior: config.PodBehaviorWaitCompleted, By: "rule batch"}},
		{name: "Skip by a namespace rule", pod: pod("monitoring", "a", nil, nil),
			want: Treatment{Behavior: config.PodBehaviorSkip, By: "rule monitoring"}},
		{name: "a rule wins over the pod's annotations", pod: pod("db", "a", map[string]string{"app": "db"},
			map[string]string{DrainBehaviorAnnotation: "Skip", DrainOrderAnnotation: "0"}),
			want:        Treatment{Behavior: config.PodBehaviorDrain, Order: 10, By: "rule db-late"},
			wantIgnored: []string{DrainBehaviorAnnotation + " ignored: drain.podRules db-late decides", DrainOrderAnnotation + " ignored"}},
		{name: "behaviour by annotation", pod: pod("web", "a", nil, map[string]string{DrainBehaviorAnnotation: "WaitCompleted"}),
			want: Treatment{Behavior: config.PodBehaviorWaitCompleted, By: "annotation"}},
		{name: "Skip by annotation", pod: pod("web", "a", nil, map[string]string{DrainBehaviorAnnotation: "Skip"}),
			want: Treatment{Behavior: config.PodBehaviorSkip, By: "annotation"}},
		{name: "a malformed behaviour changes nothing", pod: pod("web", "a", nil, map[string]string{DrainBehaviorAnnotation: "skip"}),
			want:        Treatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`node-agent.io/drain-behavior "skip" ignored: want one of Drain, Skip, WaitCompleted`}},
		{name: "a later order by annotation", pod: pod("web", "a", nil, map[string]string{DrainOrderAnnotation: "50"}),
			want: Treatment{Behavior: config.PodBehaviorDrain, Order: 50, By: "annotation"}},
		{name: "an order at the top", pod: pod("web", "a", nil, map[string]string{DrainOrderAnnotation: "1000"}),
			want: Treatment{Behavior: config.PodBehaviorDrain, Order: 1000, By: "annotation"}},
		{name: "a pod may not jump ahead", pod: pod("web", "a", nil, map[string]string{DrainOrderAnnotation: "-1"}),
			want:        Treatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`node-agent.io/drain-order "-1" ignored: want a whole number from 0 to 1000`}},
		{name: "an order past the top", pod: pod("web", "a", nil, map[string]string{DrainOrderAnnotation: "1001"}),
			want:        Treatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`"1001" ignored`}},
		{name: "an order that is not a number", pod: pod("web", "a", nil, map[string]string{DrainOrderAnnotation: "last"}),
			want:        Treatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`"last" ignored`}},
		{name: "an order on a WaitCompleted pod", pod: pod("web", "a", nil, map[string]string{DrainBehaviorAnnotation: "WaitCompleted", DrainOrderAnnotation: "5"}),
			want:        Treatment{Behavior: config.PodBehaviorWaitCompleted, By: "annotation"},
			wantIgnored: []string{"a WaitCompleted pod is never evicted"}},
		{name: "an opt-out counted from the creation", pod: pod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "30m"}),
			want: Treatment{Behavior: config.PodBehaviorDrain, HoldUntil: created.Add(30 * time.Minute)}},
		{name: "an opt-out cut to the bound", pod: pod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "100h"}),
			want:        Treatment{Behavior: config.PodBehaviorDrain, HoldUntil: created.Add(bound)},
			wantIgnored: []string{`node-agent.io/do-not-drain "100h" cut to drain.doNotDrainBound 2h0m0s`}},
		{name: "a malformed opt-out holds nothing", pod: pod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "true"}),
			want:        Treatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`node-agent.io/do-not-drain "true" ignored: want a positive duration`}},
		{name: "a negative opt-out holds nothing", pod: pod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "-4h"}),
			want:        Treatment{Behavior: config.PodBehaviorDrain},
			wantIgnored: []string{`"-4h" ignored`}},
		{name: "an opt-out of a pod a rule orders", pod: pod("db", "a", map[string]string{"app": "db"}, map[string]string{DoNotDrainAnnotation: "1h"}),
			want: Treatment{Behavior: config.PodBehaviorDrain, Order: 10, By: "rule db-late", HoldUntil: created.Add(time.Hour)}},
		{name: "no opt-out for a pod never evicted", pod: pod("monitoring", "a", nil, map[string]string{DoNotDrainAnnotation: "1h"}),
			want: Treatment{Behavior: config.PodBehaviorSkip, By: "rule monitoring"}},
	}
	compiled := mustRules(t, rules...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Treat(tt.pod, compiled, bound)
			ignored := got.Ignored
			got.Ignored = nil
			if got.Behavior != tt.want.Behavior || got.Order != tt.want.Order || got.By != tt.want.By || !got.HoldUntil.Equal(tt.want.HoldUntil) {
				t.Errorf("Treat = %+v, want %+v", got, tt.want)
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
func TestTreatNoOptOutAllowed(t *testing.T) {
	got := Treat(pod("web", "a", nil, map[string]string{DoNotDrainAnnotation: "1h"}), nil, 0)
	if !got.HoldUntil.IsZero() || len(got.Ignored) != 1 || !strings.Contains(got.Ignored[0], "drain.doNotDrainBound is 0s") {
		t.Errorf("Treat = %+v, want no hold and the bound named", got)
	}
}

// The default rules have virt-launcher pods leave after the others.
func TestDefaultRulesPutVMsLast(t *testing.T) {
	rules := mustRules(t, config.Default().Drain.PodRules...)
	vm := Treat(pod("vms", "virt-launcher-a", map[string]string{"kubevirt.io": "virt-launcher"}, nil), rules, 0)
	other := Treat(pod("web", "a", map[string]string{"app": "web"}, nil), rules, 0)
	if vm.Behavior != config.PodBehaviorDrain || other.Behavior != config.PodBehaviorDrain || vm.Order <= other.Order {
		t.Errorf("virt-launcher %+v, other %+v: want both Drain, the launcher in a later group", vm, other)
	}
}

// pending lists pods as a drain passes them: in key order.
func pending(pods ...*Pending) []Pending {
	out := make([]Pending, len(pods))
	for i, p := range pods {
		out[i] = *p
	}
	slices.SortFunc(out, func(a, b Pending) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func TestEvictable(t *testing.T) {
	now := created.Add(time.Hour)
	drainAt := func(key string, order int) *Pending {
		return &Pending{Key: key, Treatment: Treatment{Behavior: config.PodBehaviorDrain, Order: order}}
	}
	with := func(ps *Pending, f func(*Pending)) *Pending { f(ps); return ps }
	tests := []struct {
		name     string
		pending  []Pending
		want     []string
		wantNext time.Time
	}{
		{name: "nothing pending", pending: pending()},
		{name: "the lowest group only", pending: pending(drainAt("ns/a", 10), drainAt("ns/b", 0), drainAt("ns/c", 0), drainAt("ns/d", -3)),
			want: []string{"ns/d"}},
		{name: "a group waits while an earlier pod's eviction is accepted but the pod not gone",
			pending: pending(with(drainAt("ns/a", 0), func(ps *Pending) { ps.Busy = true }), drainAt("ns/b", 1))},
		{name: "nor while one is in flight",
			pending: pending(with(drainAt("ns/a", 0), func(ps *Pending) { ps.Busy = true }), drainAt("ns/b", 0), drainAt("ns/c", 1)),
			want:    []string{"ns/b"}},
		{name: "the zero treatment is Drain at order 0", pending: pending(&Pending{Key: "ns/z"}, drainAt("ns/y", 1)),
			want: []string{"ns/z"}},
		{name: "a WaitCompleted pod is never sent and holds no group",
			pending: pending(&Pending{Key: "ns/w", Treatment: Treatment{Behavior: config.PodBehaviorWaitCompleted}}, drainAt("ns/a", 5)),
			want:    []string{"ns/a"}},
		{name: "only WaitCompleted pods left",
			pending: pending(&Pending{Key: "ns/w", Treatment: Treatment{Behavior: config.PodBehaviorWaitCompleted}})},
		{name: "an opt-out holds its pod and its group until it ends",
			pending: pending(with(drainAt("ns/a", 0), func(ps *Pending) { ps.Treatment.HoldUntil = now.Add(time.Minute) }), drainAt("ns/b", 0), drainAt("ns/c", 1)),
			want:    []string{"ns/b"}, wantNext: now.Add(time.Minute)},
		{name: "an opt-out that ran out holds nothing",
			pending: pending(with(drainAt("ns/a", 0), func(ps *Pending) { ps.Treatment.HoldUntil = now }), drainAt("ns/c", 1)),
			want:    []string{"ns/a"}},
		{name: "a retry to come in the group",
			pending: pending(with(drainAt("ns/a", 0), func(ps *Pending) { ps.NextAttempt = now.Add(time.Second) }),
				with(drainAt("ns/b", 1), func(ps *Pending) { ps.NextAttempt = now.Add(-time.Second) })),
			wantNext: now.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready, next := Evictable(tt.pending, now)
			var got []string
			for _, i := range ready {
				got = append(got, tt.pending[i].Key)
			}
			if !slices.Equal(got, tt.want) || !next.Equal(tt.wantNext) {
				t.Errorf("Evictable = %v, next %s; want %v, next %s", got, next, tt.want, tt.wantNext)
			}
		})
	}
}

func TestWaiting(t *testing.T) {
	now := created.Add(time.Hour)
	wait := &Pending{Key: "ns/batch", Treatment: Treatment{Behavior: config.PodBehaviorWaitCompleted, By: "annotation"}}
	held := &Pending{Key: "ns/held", Treatment: Treatment{Behavior: config.PodBehaviorDrain, HoldUntil: now.Add(time.Hour)}}
	vm := &Pending{Key: "vms/virt-launcher-a", Treatment: Treatment{Behavior: config.PodBehaviorDrain, Order: 100}}
	got := Waiting(pending(wait, held, vm, &Pending{Key: "ns/web"}), now)
	for _, want := range []string{
		"waiting for the 2 pods of order group 0 to be gone before the 1 pods of order groups 100",
		"opt-outs (node-agent.io/do-not-drain) to end: ns/held (until 2026-01-01T02:00:00Z)",
		"WaitCompleted pods to complete: ns/batch",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Waiting = %q, want it to say %q", got, want)
		}
	}
	if got := Waiting(pending(&Pending{Key: "ns/web"}, &Pending{Key: "ns/api"}), now); got != "" {
		t.Errorf("one group and nothing held: waitingSummary = %q, want empty", got)
	}
}

// FuzzTreat: whatever a pod's writer puts in its annotations, treatPod
// does not panic, keeps the order within the bounds a pod may ask for,
// and either honours a value or says it did not.
func FuzzTreat(f *testing.F) {
	f.Add("WaitCompleted", "5", "4h")
	f.Add("skip", "-1", "true")
	f.Add("", "99999999999999999999", "9999999h")
	f.Add("Drain", " 7 ", "1ns")
	rules := []Rule{}
	f.Fuzz(func(t *testing.T, behavior, order, doNotDrain string) {
		p := pod("ns", "p", nil, map[string]string{DrainBehaviorAnnotation: behavior, DrainOrderAnnotation: order, DoNotDrainAnnotation: doNotDrain})
		got := Treat(p, rules, time.Hour)
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

func TestDecide(t *testing.T) {
	pods := []corev1.Pod{
		*pod("ns", "web", nil, nil),
		*pod("ns", "z-skip", nil, map[string]string{DrainBehaviorAnnotation: "Skip"}),
		*pod("kube-system", "agent", map[string]string{"app": "agent"}, nil),
		*pod("ns", "job", nil, map[string]string{DrainBehaviorAnnotation: "WaitCompleted", DrainOrderAnnotation: "x"}),
	}
	done := pod("ns", "done", nil, map[string]string{DrainBehaviorAnnotation: "bogus"})
	done.Status.Phase = corev1.PodSucceeded
	pods = append(pods, *done)
	plan, err := Decide(pods, []config.PodRuleConfig{{Name: "agents", PodSelector: "app=agent", Behavior: config.PodBehaviorSkip}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Finished != 1 {
		t.Errorf("finished %d, want 1 (ns/done, whose annotations are not read)", plan.Finished)
	}
	if msg := plan.SkippedMessage(); msg != "The drain leaves 2 pods on the node (behaviour Skip), neither evicting nor waiting for them: kube-system/agent, ns/z-skip" {
		t.Errorf("SkippedMessage = %q", msg)
	}
	if !slices.Equal(plan.Skipped, []string{"kube-system/agent", "ns/z-skip"}) {
		t.Errorf("skipped %v, want the two Skip pods, sorted", plan.Skipped)
	}
	if len(plan.Treatments) != 2 || plan.Treatments["uid-ns-web"].Behavior != config.PodBehaviorDrain || plan.Treatments["uid-ns-job"].Behavior != config.PodBehaviorWaitCompleted {
		t.Errorf("treatments %+v, want web (Drain) and job (WaitCompleted)", plan.Treatments)
	}
	if len(plan.Ignored) != 1 || !strings.HasPrefix(plan.Ignored[0], `pod ns/job: node-agent.io/drain-order "x" ignored`) {
		t.Errorf("ignored %q, want job's order named with the pod", plan.Ignored)
	}
}

func TestWaitOf(t *testing.T) {
	now := created.Add(time.Hour)
	tests := []struct {
		name       string
		p          Pending
		group      int
		hasGroup   bool
		want       Wait
		wantDetail string
	}{
		{name: "WaitCompleted", p: Pending{Treatment: Treatment{Behavior: config.PodBehaviorWaitCompleted, By: "rule batch"}}, want: WaitCompleted,
			wantDetail: "never evicted; the drain waits for it to complete (rule batch)"},
		{name: "opted out", p: Pending{Treatment: Treatment{HoldUntil: now.Add(time.Minute)}}, hasGroup: true, want: WaitOptedOut,
			wantDetail: "node-agent.io/do-not-drain until 2026-01-01T01:01:00Z"},
		{name: "a later group", p: Pending{Treatment: Treatment{Order: 100}}, hasGroup: true, want: WaitLaterGroup,
			wantDetail: "order 100, after order group 0"},
		{name: "the current group: not a wait", p: Pending{Treatment: Treatment{Order: 0}}, hasGroup: true},
		{name: "an opt-out that ended: not a wait", p: Pending{Treatment: Treatment{HoldUntil: now}}, hasGroup: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, detail, ok := WaitOf(tt.p, tt.group, tt.hasGroup, now)
			if w != tt.want || detail != tt.wantDetail || ok != (tt.want != "") {
				t.Errorf("WaitOf = %q, %q, %t; want %q, %q", w, detail, ok, tt.want, tt.wantDetail)
			}
		})
	}
}

func TestJoinSome(t *testing.T) {
	for _, tt := range []struct {
		items []string
		want  string
	}{
		{nil, ""},
		{[]string{"a", "b"}, "a, b"},
		{[]string{"a", "b", "c", "d", "e", "f", "g"}, "a, b, c, d, e and 2 more"},
	} {
		if got := JoinSome(tt.items, ", "); got != tt.want {
			t.Errorf("JoinSome(%q) = %q, want %q", tt.items, got, tt.want)
		}
	}
}
