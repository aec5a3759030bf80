package selfdrain

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/config"
)

// This file decides, for each pod a drain chose (podselect), how the drain
// treats it, as Cluster API's MachineDrainRules do (v1.9 on): Drain (evicted
// in its order group; every pod of a group is gone before a pod of a later
// group is asked to leave), Skip (never evicted, and the drain does not wait
// for it) or WaitCompleted (never evicted; the drain ends only once it has
// completed or is gone, within drain.timeout). drain.podRules decide first;
// a pod no rule matches may choose by its own annotations, within bounds,
// since they are written by whoever may edit that pod (pkg/inputs).
//
// Nothing here reads the API: the drain decides from the pods its watch
// already holds, so the order costs no request.

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

// podRule is one drain.podRules entry, its selector parsed.
type podRule struct {
	name       string
	namespaces []string // empty: every namespace
	selector   labels.Selector
	behavior   string
	order      int
}

// compilePodRules parses drain.podRules, which config.Validate checked.
func compilePodRules(cfg []config.PodRuleConfig) ([]podRule, error) {
	out := make([]podRule, 0, len(cfg))
	for i, r := range cfg {
		sel, err := labels.Parse(r.PodSelector)
		if err != nil {
			return nil, fmt.Errorf("drain.podRules[%d] (%s).podSelector %q: %w", i, r.Name, r.PodSelector, err)
		}
		out = append(out, podRule{name: r.Name, namespaces: r.Namespaces, selector: sel, behavior: r.Behavior, order: r.Order})
	}
	return out, nil
}

func (r *podRule) matches(p *corev1.Pod) bool {
	if len(r.namespaces) > 0 && !slices.Contains(r.namespaces, p.Namespace) {
		return false
	}
	return r.selector.Matches(labels.Set(p.Labels))
}

// podTreatment is how the drain treats one pod.
type podTreatment struct {
	// Behavior is config.PodBehaviorDrain, PodBehaviorSkip or
	// PodBehaviorWaitCompleted.
	Behavior string
	// Order is the pod's order group, for Drain.
	Order int
	// By says what decided: "rule <name>", "annotation", or "" for the
	// default.
	By string
	// HoldUntil, when set, is the end of the pod's do-not-drain opt-out:
	// it is not evicted before.
	HoldUntil time.Time
	// Ignored says which of the pod's annotations were not honoured, and
	// why; each becomes a Warning Event.
	Ignored []string
}

// evicts reports whether the drain evicts the pod; the zero treatment is
// Drain at order 0.
func (t podTreatment) evicts() bool {
	return t.Behavior != config.PodBehaviorSkip && t.Behavior != config.PodBehaviorWaitCompleted
}

// treatPod decides how the drain treats p: by the first rule that matches,
// else by p's own annotations, else Drain at order 0. doNotDrainBound is
// drain.doNotDrainBound. A malformed or refused annotation changes nothing:
// the pod is treated as if it did not carry it, and Ignored says so.
func treatPod(p *corev1.Pod, rules []podRule, doNotDrainBound time.Duration) podTreatment {
	t := podTreatment{Behavior: config.PodBehaviorDrain}
	behavior, hasBehavior := p.Annotations[DrainBehaviorAnnotation]
	order, hasOrder := p.Annotations[DrainOrderAnnotation]
	ruled := false
	for i := range rules {
		if rules[i].matches(p) {
			t.Behavior, t.Order, t.By = rules[i].behavior, rules[i].order, "rule "+rules[i].name
			ruled = true
			break
		}
	}
	switch {
	case ruled:
		// The admin's rule wins over the pod's own wishes.
		for _, a := range []struct {
			key string
			has bool
		}{{DrainBehaviorAnnotation, hasBehavior}, {DrainOrderAnnotation, hasOrder}} {
			if a.has {
				t.Ignored = append(t.Ignored, fmt.Sprintf("%s ignored: drain.podRules %s decides (%s, order %d)", a.key, strings.TrimPrefix(t.By, "rule "), t.Behavior, t.Order))
			}
		}
	default:
		if hasBehavior {
			if slices.Contains(config.PodBehaviors, behavior) {
				t.Behavior, t.By = behavior, "annotation"
			} else {
				t.Ignored = append(t.Ignored, fmt.Sprintf("%s %q ignored: want one of %s; the pod is drained as if it had none", DrainBehaviorAnnotation, behavior, strings.Join(config.PodBehaviors, ", ")))
			}
		}
		if hasOrder {
			n, err := strconv.Atoi(strings.TrimSpace(order))
			switch {
			case err != nil || n < 0 || n > config.MaxPodOrder:
				t.Ignored = append(t.Ignored, fmt.Sprintf("%s %q ignored: want a whole number from 0 to %d (a pod may ask to leave later than the default 0, never earlier); the pod keeps order 0", DrainOrderAnnotation, order, config.MaxPodOrder))
			case t.Behavior != config.PodBehaviorDrain:
				t.Ignored = append(t.Ignored, fmt.Sprintf("%s %q ignored: a %s pod is never evicted", DrainOrderAnnotation, order, t.Behavior))
			default:
				t.Order, t.By = n, "annotation"
			}
		}
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

// currentGroup is the lowest order group among the pending pods the drain
// evicts; ok is false when none is left (only WaitCompleted pods wait).
func currentGroup(pending map[types.UID]*podState) (order int, ok bool) {
	for _, ps := range pending {
		if !ps.treat.evicts() {
			continue
		}
		if !ok || ps.treat.Order < order {
			order, ok = ps.treat.Order, true
		}
	}
	return order, ok
}

// evictableNow returns the pending pods that may be asked to leave at now,
// in key order: those of the current order group that are not held by
// their opt-out, have no eviction in flight or accepted, and whose retry
// time has come. next is the earliest retry time or end of an opt-out
// still to come in that group (zero when none): the loop wakes then.
func evictableNow(pending map[types.UID]*podState, now time.Time) (ready []*podState, next time.Time) {
	group, ok := currentGroup(pending)
	if !ok {
		return nil, time.Time{}
	}
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, ps := range sortedStates(pending) {
		if !ps.treat.evicts() || ps.treat.Order != group || ps.inFlight || ps.evicted {
			continue
		}
		if ps.treat.HoldUntil.After(now) {
			later(ps.treat.HoldUntil)
			continue
		}
		if ps.nextAttempt.After(now) {
			later(ps.nextAttempt)
			continue
		}
		ready = append(ready, ps)
	}
	return ready, next
}

// waitingSummary says what the drain waits on besides evictions under
// way, for the record's lastError while it runs: the later order groups
// and the group they wait for, the WaitCompleted pods and the opted-out
// ones, naming at most namedPerGroup pods each; "" when nothing waits.
func waitingSummary(pending map[types.UID]*podState, now time.Time) string {
	group, ok := currentGroup(pending)
	inGroup, laterPods := 0, 0
	laterGroups := map[int]bool{}
	var waiting, held []Blocker
	for _, ps := range sortedStates(pending) {
		switch {
		case ps.treat.Behavior == config.PodBehaviorWaitCompleted:
			waiting = append(waiting, Blocker{Pod: ps.key})
		case ok && ps.treat.Order == group:
			inGroup++
			if ps.treat.HoldUntil.After(now) && !ps.evicted {
				held = append(held, Blocker{Pod: ps.key, Detail: "until " + ps.treat.HoldUntil.UTC().Format(time.RFC3339)})
			}
		default:
			laterPods++
			laterGroups[ps.treat.Order] = true
		}
	}
	var parts []string
	if laterPods > 0 {
		parts = append(parts, fmt.Sprintf("the %d pods of order group %d to be gone before the %d pods of order groups %s", inGroup, group, laterPods, joinOrders(laterGroups)))
	}
	if len(held) > 0 {
		parts = append(parts, fmt.Sprintf("opt-outs (%s) to end: %s", DoNotDrainAnnotation, namePods(held, true)))
	}
	if len(waiting) > 0 {
		parts = append(parts, "WaitCompleted pods to complete: "+namePods(waiting, false))
	}
	if len(parts) == 0 {
		return ""
	}
	return "waiting for " + strings.Join(parts, "; ")
}

func joinOrders(set map[int]bool) string {
	orders := make([]int, 0, len(set))
	for o := range set {
		orders = append(orders, o)
	}
	slices.Sort(orders)
	s := make([]string, len(orders))
	for i, o := range orders {
		s[i] = strconv.Itoa(o)
	}
	return strings.Join(s, ", ")
}

// waitBlocker says why ps, which no eviction answer explains, is still on
// the node when the drain waits on it by its treatment; group is the
// current order group (hasGroup false: none). ok is false when its
// treatment does not hold it: it is simply not evicted yet.
func waitBlocker(ps *podState, group int, hasGroup bool, now time.Time) (b Blocker, ok bool) {
	b = Blocker{Pod: ps.key}
	switch {
	case ps.treat.Behavior == config.PodBehaviorWaitCompleted:
		b.Reason, b.Detail = BlockerWaitCompleted, "never evicted; the drain waits for it to complete ("+cmp.Or(ps.treat.By, "default")+")"
	case ps.treat.HoldUntil.After(now):
		b.Reason, b.Detail = BlockerDoNotDrain, fmt.Sprintf("%s until %s", DoNotDrainAnnotation, ps.treat.HoldUntil.UTC().Format(time.RFC3339))
	case hasGroup && ps.treat.Order > group:
		b.Reason, b.Detail = BlockerOrderGroup, fmt.Sprintf("order %d, after order group %d", ps.treat.Order, group)
	default:
		return b, false
	}
	return b, true
}
