package selfdrain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/evictionrequest"
	"github.com/node-agent/node-agent/pkg/selfdrain/podorder"
)

// evictionResult is the result label of node_agent_drain_evictions_total.
func evictionResult(deleted bool, err error) string {
	var awaiting *evictionrequest.AwaitingResponder
	switch {
	case errors.As(err, &awaiting):
		return "awaiting_responder"
	case err == nil && deleted:
		return "deleted"
	case err == nil:
		return "evicted"
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return "not_found"
	case apierrors.IsTooManyRequests(err):
		return "blocked"
	}
	return "error"
}

// describeEvictionError turns an eviction error into a message that names
// the blocker, for example the PodDisruptionBudget.
func describeEvictionError(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		msg := s.Message
		if s.Details != nil {
			for _, c := range s.Details.Causes {
				if c.Type == policyv1.DisruptionBudgetCause && c.Message != "" && !strings.Contains(msg, c.Message) {
					msg += " (" + c.Message + ")"
				}
			}
		}
		if msg != "" {
			return fmt.Sprintf("%s (HTTP %d)", msg, s.Code)
		}
	}
	return err.Error()
}

// evictOrDelete evicts the pod (through an EvictionRequest where the drain
// uses them, evictionrequests.go), or deletes it once it has been blocked
// for drain.deleteAfter. requested says whether the pod's EvictionRequest
// exists.
func (e *Engine) evictOrDelete(ctx context.Context, ps *podState) (deleted, requested bool, err error) {
	p := ps.pod
	uid := p.UID
	if d := e.Config.DeleteAfter.Duration; d > 0 && !ps.firstBlocked.IsZero() && e.Clock.Since(ps.firstBlocked) >= d {
		e.Event(corev1.EventTypeWarning, "PodDeleted", "Deleting pod %s: its eviction was refused for %s (drain.deleteAfter)", ps.key, d)
		return true, false, e.podClient().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	if e.usingRequests() {
		requested, err := e.request(ctx, ps)
		return false, requested, err
	}
	return false, false, e.evict(ctx, &p)
}

// evict asks for p's eviction through pods/eviction.
func (e *Engine) evict(ctx context.Context, p *corev1.Pod) error {
	uid := p.UID
	return e.podClient().PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
}

// backoff returns the wait before retry number attempt (1-based): doubling
// from RetryInitial, capped at limit, times a jitter factor, never zero.
func backoff(attempt int, limit time.Duration, jitter func() float64) time.Duration {
	d := RetryInitial
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	if jitter != nil {
		d = time.Duration(float64(d) * jitter())
	}
	return max(d, time.Millisecond)
}

func sortedStates(m map[types.UID]*podState) []*podState {
	out := make([]*podState, 0, len(m))
	for _, ps := range m {
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// ordered is the pending pods in key order, and what podorder needs of each.
func ordered(pending map[types.UID]*podState) ([]*podState, []podorder.Pending) {
	states := sortedStates(pending)
	pods := make([]podorder.Pending, len(states))
	for i, ps := range states {
		pods[i] = podorder.Pending{Key: ps.key, Treatment: ps.treat, Busy: ps.inFlight || ps.evicted, NextAttempt: ps.nextAttempt}
	}
	return states, pods
}

// blockedCounts counts the pending pods by the budget that refused them.
func blockedCounts(pending map[types.UID]*podState) map[pdbRef]int {
	n := map[pdbRef]int{}
	for _, ps := range pending {
		if ps.blockedBy != nil {
			n[*ps.blockedBy]++
		}
	}
	return n
}

func (e *Engine) setPending(st *Status, pending map[types.UID]*podState) {
	st.PendingPods = st.PendingPods[:0]
	for _, ps := range pending {
		st.PendingPods = append(st.PendingPods, ps.key)
	}
	sort.Strings(st.PendingPods)
	st.DrainProgress = progress(st.EvictionPods, len(pending))
}

// progressWriter writes the latest progress posted to it; a newer status
// replaces one not yet written.
