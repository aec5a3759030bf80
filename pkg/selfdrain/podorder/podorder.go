// Package podorder decides how a drain treats each pod it would evict, as
// Cluster API's MachineDrainRules do (v1.9 on): Drain (evicted in its order
// group; every pod of a group is gone before a pod of a later group is asked
// to leave), Skip (never evicted, and the drain does not wait for it) or
// WaitCompleted (never evicted; the drain ends only once it has completed or
// is gone, within drain.timeout). drain.podRules decide first; a pod no rule
// matches may choose by its own annotations, within bounds, since they are
// written by whoever may edit that pod (pkg/inputs); and a pod may opt out of
// evictions for a bounded time.
//
// It reads nothing and writes nothing: pkg/selfdrain decides from the pods
// its watch already holds (Decide when a drain begins, Evictable and Waiting
// at each step), so the order costs no request. docs/drain-order.md is the
// user's page.
package podorder

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/selfdrain/podselect"
)

// The annotations a pod may carry for its drain.
const (
	// DrainBehaviorAnnotation chooses the pod's behaviour (Drain, Skip or
	// WaitCompleted) where no drain.podRules rule matches it.
	DrainBehaviorAnnotation = "node-agent.io/drain-behavior"
	// DrainOrderAnnotation chooses the pod's order group where no rule
	// matches it: 0 (the default) to config.MaxPodOrder. A pod may ask to
	// leave later than the default, never earlier: an earlier group is the
	// admin's to give.
	DrainOrderAnnotation = "node-agent.io/drain-order"
	// DoNotDrainAnnotation opts the pod out of evictions for a duration
	// ("4h"), counted from the pod's creation, as Karpenter's
	// karpenter.sh/do-not-disrupt counts it, and cut to
	// drain.doNotDrainBound. Until it runs out the pod is not evicted and
	// holds its order group, and so the drain, within drain.timeout.
	DoNotDrainAnnotation = "node-agent.io/do-not-drain"
)

// Rule is one drain.podRules entry, its selector parsed.
type Rule struct {
	name       string
	namespaces []string // empty: every namespace
	selector   labels.Selector
	behavior   string
	order      int
}

// CompileRules parses drain.podRules, which config.Validate checked.
func CompileRules(cfg []config.PodRuleConfig) ([]Rule, error) {
	out := make([]Rule, 0, len(cfg))
	for i, r := range cfg {
		sel, err := labels.Parse(r.PodSelector)
		if err != nil {
			return nil, fmt.Errorf("drain.podRules[%d] (%s).podSelector %q: %w", i, r.Name, r.PodSelector, err)
		}
		out = append(out, Rule{name: r.Name, namespaces: r.Namespaces, selector: sel, behavior: r.Behavior, order: r.Order})
	}
	return out, nil
}

func (r *Rule) matches(p *corev1.Pod) bool {
	if len(r.namespaces) > 0 && !slices.Contains(r.namespaces, p.Namespace) {
		return false
	}
	return r.selector.Matches(labels.Set(p.Labels))
}

// Treatment is how the drain treats one pod. The zero Treatment is Drain
// at order 0.
type Treatment struct {
	// Behavior is config.PodBehaviorDrain, PodBehaviorSkip or
	// PodBehaviorWaitCompleted.
	Behavior string
	// Order is the pod's order group, for Drain.
	Order int
	// By says what decided: "rule <name>", "annotation", or "" for the
	// default.
	By string
	// HoldUntil, when set, is the end of the pod's opt-out
	// (DoNotDrainAnnotation): it is not evicted before.
	HoldUntil time.Time
	// Ignored says which of the pod's annotations were not honoured, and
	// why.
	Ignored []string
}

// Evicts reports whether the drain evicts the pod.
func (t Treatment) Evicts() bool {
	return t.Behavior != config.PodBehaviorSkip && t.Behavior != config.PodBehaviorWaitCompleted
}

// Treat decides how the drain treats p: by the first rule that matches,
// else by p's own annotations, else Drain at order 0. doNotDrainBound is
// drain.doNotDrainBound. A malformed or refused annotation changes nothing:
// the pod is treated as if it did not carry it, and Ignored says so.
func Treat(p *corev1.Pod, rules []Rule, doNotDrainBound time.Duration) Treatment {
	t := Treatment{Behavior: config.PodBehaviorDrain}
	if i := slices.IndexFunc(rules, func(r Rule) bool { return r.matches(p) }); i >= 0 {
		r := rules[i]
		t.Behavior, t.Order, t.By = r.behavior, r.order, "rule "+r.name
		// The admin's rule wins over the pod's own wishes.
		for _, key := range []string{DrainBehaviorAnnotation, DrainOrderAnnotation} {
			if _, ok := p.Annotations[key]; ok {
				t.Ignored = append(t.Ignored, fmt.Sprintf("%s ignored: drain.podRules %s decides (%s, order %d)", key, r.name, t.Behavior, t.Order))
			}
		}
	} else {
		t = byAnnotations(p, t)
	}
	if v, ok := p.Annotations[DoNotDrainAnnotation]; ok && t.Behavior == config.PodBehaviorDrain {
		hold, why := doNotDrainUntil(p, v, doNotDrainBound)
		t.HoldUntil = hold
		if why != "" {
			t.Ignored = append(t.Ignored, why)
		}
	}
	return t
}

// byAnnotations applies p's own behaviour and order to t, the default.
func byAnnotations(p *corev1.Pod, t Treatment) Treatment {
	if behavior, ok := p.Annotations[DrainBehaviorAnnotation]; ok {
		if slices.Contains(config.PodBehaviors, behavior) {
			t.Behavior, t.By = behavior, "annotation"
		} else {
			t.Ignored = append(t.Ignored, fmt.Sprintf("%s %q ignored: want one of %s; the pod is drained as if it had none", DrainBehaviorAnnotation, behavior, strings.Join(config.PodBehaviors, ", ")))
		}
	}
	order, ok := p.Annotations[DrainOrderAnnotation]
	if !ok {
		return t
	}
	n, err := strconv.Atoi(strings.TrimSpace(order))
	switch {
	case err != nil || n < 0 || n > config.MaxPodOrder:
		t.Ignored = append(t.Ignored, fmt.Sprintf("%s %q ignored: want a whole number from 0 to %d (a pod may ask to leave later than the default 0, never earlier); the pod keeps order 0", DrainOrderAnnotation, order, config.MaxPodOrder))
	case t.Behavior != config.PodBehaviorDrain:
		t.Ignored = append(t.Ignored, fmt.Sprintf("%s %q ignored: a %s pod is never evicted", DrainOrderAnnotation, order, t.Behavior))
	default:
		t.Order, t.By = n, "annotation"
	}
	return t
}

// doNotDrainUntil reads value, p's DoNotDrainAnnotation: the end of its
// opt-out, counted from p's creation (which the apiserver sets, so the
// pod's writer cannot move it) and cut to bound; and what was not
// honoured, "" when all was. A value that is not a positive duration holds
// nothing: it cannot say for how long, and the drain goes on as if it were
// not there.
func doNotDrainUntil(p *corev1.Pod, value string, bound time.Duration) (time.Time, string) {
	d, err := time.ParseDuration(strings.TrimSpace(value))
	switch {
	case err != nil || d <= 0:
		return time.Time{}, fmt.Sprintf("%s %q ignored: want a positive duration such as 4h, counted from the pod's creation; the pod is evicted as if it had none", DoNotDrainAnnotation, value)
	case bound <= 0:
		return time.Time{}, fmt.Sprintf("%s %q ignored: drain.doNotDrainBound is 0s, which honours no opt-out", DoNotDrainAnnotation, value)
	case d > bound:
		return p.CreationTimestamp.Add(bound), fmt.Sprintf("%s %q cut to drain.doNotDrainBound %s", DoNotDrainAnnotation, value, bound)
	}
	return p.CreationTimestamp.Add(d), ""
}

// Plan is how a drain treats its pods, decided when it begins.
type Plan struct {
	// Treatments are those of the unfinished pods the drain evicts or
	// waits for.
	Treatments map[types.UID]Treatment
	// Finished counts the pods that had already finished.
	Finished int
	// Skipped are the Skip pods, namespace/name, sorted.
	Skipped []string
	// Ignored are the annotations not honoured, "pod namespace/name:
	// why", sorted.
	Ignored []string
}

// Decide treats each of pods, the pods a drain chose (podselect.Choose),
// by the rules of cfg (drain.podRules) and doNotDrainBound
// (drain.doNotDrainBound).
func Decide(pods []corev1.Pod, cfg []config.PodRuleConfig, doNotDrainBound time.Duration) (Plan, error) {
	rules, err := CompileRules(cfg)
	if err != nil {
		return Plan{}, err
	}
	plan := Plan{Treatments: map[types.UID]Treatment{}}
	for i := range pods {
		p := &pods[i]
		if podselect.Finished(p) {
			plan.Finished++
			continue
		}
		key := p.Namespace + "/" + p.Name
		t := Treat(p, rules, doNotDrainBound)
		for _, why := range t.Ignored {
			plan.Ignored = append(plan.Ignored, "pod "+key+": "+why)
		}
		if t.Behavior == config.PodBehaviorSkip {
			plan.Skipped = append(plan.Skipped, key)
			continue
		}
		plan.Treatments[p.UID] = t
	}
	slices.Sort(plan.Skipped)
	slices.Sort(plan.Ignored)
	return plan, nil
}

// IgnoredMessage is the one Event's message, however many pods, that
// names the annotations not honoured; "" when all were. They are written
// by whoever may edit the pod, and acted on as if absent.
func (p Plan) IgnoredMessage() string { return JoinSome(p.Ignored, "; ") }

// SkippedMessage is the one Event's message that names the Skip pods; ""
// when none is.
func (p Plan) SkippedMessage() string {
	if len(p.Skipped) == 0 {
		return ""
	}
	return fmt.Sprintf("The drain leaves %d pods on the node (behaviour Skip), neither evicting nor waiting for them: %s", len(p.Skipped), JoinSome(p.Skipped, ", "))
}

// NamedAtMost is how many items a message names; it counts the rest.
const NamedAtMost = 5

// JoinSome joins the first NamedAtMost items with sep, and counts the rest.
func JoinSome(items []string, sep string) string {
	s := strings.Join(items[:min(len(items), NamedAtMost)], sep)
	if more := len(items) - NamedAtMost; more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}
