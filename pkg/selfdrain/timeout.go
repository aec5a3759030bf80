package selfdrain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/node-agent/node-agent/pkg/selfdrain/podorder"
)

// This file is what a maintenance drain (annotation, NodeMaintenance object
// or reboot) does when drain.timeout passes. It stops: one pod that cannot
// leave (a PodDisruptionBudget that allows nothing, a VM that cannot
// migrate, a pod that does not terminate) must not hold the drain slot, and
// with it every other node's maintenance, for ever. It says which pods held
// it and why, in the status (Blockers), the condition, a DrainTimedOut
// Event and the metrics. The run then returns, which gives its slot back,
// and the controller does not start the same request again (decide). With
// drain.onTimeout uncordon the controller then undoes what the agent did
// (UndoAfterTimeout); the record stays Failed, so the request stays
// answered.

const (
	// namedPerGroup is how many pods the condition and the Event name for
	// one cause; the status lists them all.
	namedPerGroup = 5
	// detailLimit bounds a blocker's detail in the status, which is an
	// annotation on the Node that every watcher of Nodes receives.
	detailLimit = 256
	// eventMessageLimit keeps an Event's message short enough for the
	// events.k8s.io API too, whose note is limited to 1 kB.
	eventMessageLimit = 1024
)

// timeOut ends a maintenance drain at drain.timeout: no eviction is asked
// for any more, the status turns Failed with the pods that stayed and why,
// and Drain returns.
func (r *drainRun) timeOut() *Status {
	e, st := r.e, r.st
	timeout := e.Config.Timeout.Duration
	st.Phase = PhaseFailed
	st.Blockers = r.blockers()
	held := describeBlockers(st.Blockers)
	st.LastError = fmt.Sprintf("drain.timeout (%s) passed; %s", timeout, held)
	msg := fmt.Sprintf("Drain timed out after %s (drain.timeout) and stopped evicting; %d of %d pods stayed: %s. %s",
		timeout, len(st.Blockers), st.EvictionPods, held, r.req.AfterTimeout)
	r.stopVMs(true)
	r.takeVMs()
	// The drain asks for nothing more: neither do its EvictionRequests.
	r.withdrawRequests()
	r.pw.stop()
	e.finishStatusWith(r.ctx, st, e.Clock.Now(), ReasonDrainFailed, msg)
	e.Event(corev1.EventTypeWarning, "DrainTimedOut", "%s", truncate(msg, eventMessageLimit))
	e.Logger.Warn("Drain timed out; no more evictions", "timeout", timeout, "pending", len(st.Blockers), "blockers", held)
	// The drain is over: its refused pods are no longer "blocked", they
	// are what the timeout left (drain_timed_out_pods).
	e.Metrics.setBlocked(nil)
	e.Metrics.ObserveStatus(st)
	e.Metrics.countTimeout(r.req.Trigger)
	e.Metrics.observeDrain(r.req.Trigger, "failed", e.Clock.Since(r.start))
	return st
}

// UndoAfterTimeout undoes what the agent did (uncordon, drain taint removed,
// only where it did them) on a node whose maintenance drain timed out, by
// drain.onTimeout uncordon. Unlike End, the maintenance stays in force: the
// record stays Failed, with the time of the undo, so the controller neither
// starts the drain again nor undoes twice, and the condition stays.
func (e *Engine) UndoAfterTimeout(ctx context.Context) error {
	now := e.Now()
	var st *Status
	_, err := e.updateRecord(ctx, e.cached(), func(node *corev1.Node) (bool, error) {
		prev, perr := ParseStatus(node)
		if perr != nil {
			// Fail closed, as End does.
			return false, perr
		}
		if !prev.TimedOut() || prev.UndoneAt != nil {
			st = nil
			return false, nil
		}
		st = prev
		undo(node, e.Config.TaintKey, st)
		st.UndoneAt, st.LastUpdate = &now, &now
		setStatusAnnotation(node, st)
		return true, nil
	})
	if err != nil {
		e.Event(corev1.EventTypeWarning, "MaintenanceUndoFailed", "Could not undo the maintenance after its drain timed out: %v", err)
		return err
	}
	if st == nil {
		return nil
	}
	undone := e.undid(st)
	e.Metrics.SetActive(false)
	e.Event(corev1.EventTypeNormal, "MaintenanceUndone", "Drain timed out and drain.onTimeout is uncordon: %s; the maintenance stays requested and Failed until it is ended or requested anew", undone)
	e.Logger.Info("Maintenance undone after its drain timed out; it stays requested", "undone", undone)
	return nil
}

// blockers says, for each pod still pending, why it stayed, from the last
// answer to its eviction and its latest state in the watch's store. They
// are sorted by reason, budget and pod.
func (r *drainRun) blockers() []Blocker {
	out := make([]Blocker, 0, len(r.pending))
	states, pods := ordered(r.pending)
	group, hasGroup := podorder.CurrentGroup(pods)
	for i, ps := range states {
		latest := ps.pod
		if r.store != nil {
			if obj, ok, _ := r.store.GetByKey(ps.key); ok {
				if p, ok := obj.(*corev1.Pod); ok && p.UID == ps.pod.UID {
					latest = *p
				}
			}
		}
		b := blockerOf(ps, &latest)
		if b.Reason == BlockerNotEvictedYet { // its treatment may say why
			if w, detail, ok := podorder.WaitOf(pods[i], group, hasGroup, r.e.Clock.Now()); ok {
				b.Reason, b.Detail = BlockerReason(w), detail
			}
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Blocker) int {
		return cmp.Or(
			cmp.Compare(slices.Index(BlockerReasons, a.Reason), slices.Index(BlockerReasons, b.Reason)),
			cmp.Compare(a.PodDisruptionBudget, b.PodDisruptionBudget),
			cmp.Compare(a.Pod, b.Pod))
	})
	return out
}

// blockerOf says why the pod of ps (latest, as the watch last saw it) is
// still on the node. A pod being deleted counts as terminating whatever its
// evictions said before; otherwise the last answer to its eviction decides.
func blockerOf(ps *podState, latest *corev1.Pod) Blocker {
	b := Blocker{Pod: ps.key}
	switch {
	case ps.evicted || latest.DeletionTimestamp != nil:
		b.Reason, b.Detail = BlockerTerminating, terminatingDetail(latest)
	case ps.blockedBy != nil && ps.blockedBy.name != "":
		b.Reason, b.PodDisruptionBudget = BlockerPodDisruptionBudget, ps.blockedBy.String()
		b.Detail = budgetRefusal(ps.lastErr)
	case ps.blockedBy != nil:
		b.Reason, b.Detail = BlockerEvictionRefused, describeEvictionError(ps.lastErr)
	case ps.lastErr != nil:
		b.Reason, b.Detail = BlockerEvictionFailed, describeEvictionError(ps.lastErr)
	default:
		b.Reason = BlockerNotEvictedYet
	}
	b.Detail = truncate(b.Detail, detailLimit)
	return b
}

// terminatingDetail names the grace period of a pod that is being deleted,
// the usual reason it is still there: a VM's or a database's pod may be
// given an hour or more to stop.
func terminatingDetail(p *corev1.Pod) string {
	grace := p.DeletionGracePeriodSeconds
	if grace == nil {
		grace = p.Spec.TerminationGracePeriodSeconds
	}
	var parts []string
	if grace != nil {
		parts = append(parts, fmt.Sprintf("grace period %s", time.Duration(*grace)*time.Second))
	}
	if p.DeletionTimestamp != nil {
		// deletionTimestamp is when the grace period ends, not when the
		// deletion was asked for.
		parts = append(parts, "to be killed at "+p.DeletionTimestamp.UTC().Format(time.RFC3339))
	} else {
		parts = append(parts, "eviction accepted")
	}
	return strings.Join(parts, ", ")
}

// budgetRefusal is what a PodDisruptionBudget's refusal says about the
// budget ("The disruption budget db needs 3 healthy pods and has 3
// currently"), or the whole error when it says nothing of it.
func budgetRefusal(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if c.Type == policyv1.DisruptionBudgetCause && c.Message != "" {
				return c.Message
			}
		}
	}
	if err == nil {
		return ""
	}
	return describeEvictionError(err)
}

// describeBlockers says which pods held a drain and why, one clause per
// cause (a budget, or a reason), naming at most namedPerGroup pods in each.
// bs is sorted as blockers sorts it.
func describeBlockers(bs []Blocker) string {
	if len(bs) == 0 {
		return "no pod stayed"
	}
	var clauses []string
	for start := 0; start < len(bs); {
		end := start + 1
		for end < len(bs) && bs[end].Reason == bs[start].Reason && bs[end].PodDisruptionBudget == bs[start].PodDisruptionBudget {
			end++
		}
		clauses = append(clauses, describeGroup(bs[start:end]))
		start = end
	}
	return strings.Join(clauses, "; ")
}

// describeGroup describes pods that stayed for one cause.
func describeGroup(g []Blocker) string {
	first := g[0]
	pods := namePods(g, first.Reason == BlockerTerminating)
	switch first.Reason {
	case BlockerPodDisruptionBudget:
		return fmt.Sprintf("PodDisruptionBudget %s refused the eviction of %s (%s)", first.PodDisruptionBudget, pods, first.Detail)
	case BlockerEvictionRefused:
		return fmt.Sprintf("eviction refused for %s (%s)", pods, first.Detail)
	case BlockerEvictionFailed:
		return fmt.Sprintf("eviction failed for %s (%s)", pods, first.Detail)
	case BlockerTerminating:
		return "still terminating: " + pods
	}
	if what := podorder.Wait(first.Reason).Describe(); what != "" {
		return what + namePods(g, first.Reason != BlockerWaitCompleted)
	}
	return "no eviction answered yet for " + pods
}

// namePods lists the pods of g, at most namedPerGroup of them, each with
// its detail when withDetail.
func namePods(g []Blocker, withDetail bool) string {
	var names []string
	for _, b := range g[:min(len(g), namedPerGroup)] {
		n := b.Pod
		if withDetail && b.Detail != "" {
			n += " (" + b.Detail + ")"
		}
		names = append(names, n)
	}
	s := strings.Join(names, ", ")
	if more := len(g) - len(names); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// truncate shortens s to at most limit bytes, on a rune boundary, marking
// the cut with an ellipsis.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const mark = "…"
	cut := limit - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
