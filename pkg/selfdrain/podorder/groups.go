package podorder

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/node-agent/node-agent/pkg/config"
)

// Pending is what the order needs of one pod a running drain still waits
// for.
type Pending struct {
	// Key is namespace/name.
	Key       string
	Treatment Treatment
	// Busy: an eviction of the pod is in flight, or was accepted and the
	// pod is on its way.
	Busy bool
	// NextAttempt is when its eviction may be asked again.
	NextAttempt time.Time
}

// CurrentGroup is the lowest order group among pods that the drain evicts;
// ok is false when none is left (only WaitCompleted pods wait).
func CurrentGroup(pods []Pending) (order int, ok bool) {
	for _, p := range pods {
		if p.Treatment.Evicts() && (!ok || p.Treatment.Order < order) {
			order, ok = p.Treatment.Order, true
		}
	}
	return order, ok
}

// Evictable returns the indices in pods of those that may be asked to
// leave at now: of the current order group, not held by their opt-out, not
// Busy, their retry time come. next is the earliest retry time or end of an
// opt-out still to come in that group (zero when none): the drain looks
// again then. A WaitCompleted pod is never returned.
func Evictable(pods []Pending, now time.Time) (ready []int, next time.Time) {
	group, ok := CurrentGroup(pods)
	if !ok {
		return nil, time.Time{}
	}
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for i, p := range pods {
		switch t := p.Treatment; {
		case !t.Evicts() || t.Order != group || p.Busy:
		case t.HoldUntil.After(now):
			later(t.HoldUntil)
		case p.NextAttempt.After(now):
			later(p.NextAttempt)
		default:
			ready = append(ready, i)
		}
	}
	return ready, next
}

// Wait is why a drain waits for a pod by its treatment.
type Wait string

// The waits.
const (
	// WaitCompleted: the pod is WaitCompleted.
	WaitCompleted Wait = "WaitCompleted"
	// WaitOptedOut: the pod's opt-out has not ended.
	WaitOptedOut Wait = "DoNotDrain"
	// WaitLaterGroup: the pod's order group waits for an earlier one.
	WaitLaterGroup Wait = "OrderGroup"
)

// Describe begins the clause that names the pods w held when the drain
// timed out; "" for what is not a Wait.
func (w Wait) Describe() string {
	switch w {
	case WaitCompleted:
		return "not completed (WaitCompleted, never evicted): "
	case WaitOptedOut:
		return "opted out of the drain (" + DoNotDrainAnnotation + "): "
	case WaitLaterGroup:
		return "not evicted, in a later order group: "
	}
	return ""
}

// WaitOf says why the drain waits for p by its treatment, and in detail;
// group is the current order group (hasGroup false: none). ok is false
// when its treatment does not hold it.
func WaitOf(p Pending, group int, hasGroup bool, now time.Time) (w Wait, detail string, ok bool) {
	switch t := p.Treatment; {
	case t.Behavior == config.PodBehaviorWaitCompleted:
		by := t.By
		if by == "" {
			by = "default"
		}
		return WaitCompleted, "never evicted; the drain waits for it to complete (" + by + ")", true
	case t.HoldUntil.After(now):
		return WaitOptedOut, DoNotDrainAnnotation + " until " + t.HoldUntil.UTC().Format(time.RFC3339), true
	case hasGroup && t.Order > group:
		return WaitLaterGroup, fmt.Sprintf("order %d, after order group %d", t.Order, group), true
	}
	return "", "", false
}

// Waiting says what the drain waits on by the pods' treatment, for its
// record while it runs: the later order groups and the group they wait
// for, the opted-out pods and the WaitCompleted ones, naming at most
// NamedAtMost pods each; "" when nothing waits.
func Waiting(pods []Pending, now time.Time) string {
	group, ok := CurrentGroup(pods)
	inGroup, laterPods := 0, 0
	var laterGroups []int
	var waiting, held []string
	for _, p := range pods {
		switch t := p.Treatment; {
		case t.Behavior == config.PodBehaviorWaitCompleted:
			waiting = append(waiting, p.Key)
		case ok && t.Order == group:
			inGroup++
			if t.HoldUntil.After(now) && !p.Busy {
				held = append(held, p.Key+" (until "+t.HoldUntil.UTC().Format(time.RFC3339)+")")
			}
		default:
			laterPods++
			if !slices.Contains(laterGroups, t.Order) {
				laterGroups = append(laterGroups, t.Order)
			}
		}
	}
	var parts []string
	if laterPods > 0 {
		slices.Sort(laterGroups)
		orders := make([]string, len(laterGroups))
		for i, o := range laterGroups {
			orders[i] = strconv.Itoa(o)
		}
		parts = append(parts, fmt.Sprintf("the %d pods of order group %d to be gone before the %d pods of order groups %s", inGroup, group, laterPods, strings.Join(orders, ", ")))
	}
	if len(held) > 0 {
		parts = append(parts, fmt.Sprintf("opt-outs (%s) to end: %s", DoNotDrainAnnotation, JoinSome(held, ", ")))
	}
	if len(waiting) > 0 {
		parts = append(parts, "WaitCompleted pods to complete: "+JoinSome(waiting, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "waiting for " + strings.Join(parts, "; ")
}
