package podselect

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/node-agent/node-agent/pkg/kube"
)

// PlannedPod is one pod of a drain plan.
type PlannedPod struct {
	Pod string // namespace/name
	// Action is evict, skip (DaemonSet or mirror pod, or outside
	// drain.podSelector), or done (finished already).
	Action string
	Why    string
	// Blockers names the PodDisruptionBudgets that would refuse the
	// eviction right now (disruptionsAllowed 0).
	Blockers []string
}

// Plan tells what a drain of node would do now, changing nothing: the
// dry run behind `node-agent maintenance start --dry-run`.
func Plan(ctx context.Context, client kube.Interface, node, podSelector string) ([]PlannedPod, error) {
	all, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing pods on %s: %w", node, err)
	}
	list, sel, err := Choose(ctx, client, all.Items, podSelector)
	if err != nil {
		return nil, fmt.Errorf("choosing pods on %s: %w", node, err)
	}
	evict := map[string]bool{}
	for _, p := range list {
		evict[p.Namespace+"/"+p.Name] = true
	}
	pdbs, err := client.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	var out []PlannedPod
	for _, p := range all.Items {
		key := p.Namespace + "/" + p.Name
		pp := PlannedPod{Pod: key}
		switch {
		case !evict[key]:
			pp.Action, pp.Why = "skip", skipReason(&p, sel)
		case Finished(&p):
			pp.Action, pp.Why = "done", "finished ("+string(p.Status.Phase)+")"
		default:
			pp.Action = "evict"
			for _, b := range pdbs.Items {
				if b.Namespace != p.Namespace || b.Spec.Selector == nil {
					continue
				}
				sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
				if err != nil || !sel.Matches(labels.Set(p.Labels)) {
					continue
				}
				if b.Status.DisruptionsAllowed < 1 {
					pp.Blockers = append(pp.Blockers, fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption now", b.Namespace, b.Name))
				}
			}
		}
		out = append(out, pp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out, nil
}

// Choose returns those of pods (the pods on the node) that match
// podSelector (drain.podSelector) and that a drain evicts, as kubectl drain
// --force --ignore-daemonsets --delete-emptydir-data would (podsToEvict),
// and the parsed selector.
func Choose(ctx context.Context, client kube.Interface, pods []corev1.Pod, podSelector string) ([]corev1.Pod, labels.Selector, error) {
	selected, sel, err := selectPods(pods, podSelector)
	if err != nil {
		return nil, nil, err
	}
	evict, errs := podsToEvict(ctx, selected, controllerRefOnly)
	return evict, sel, errors.Join(errs...)
}

// selectPods returns the pods that match podSelector, which kubectl drain
// applies to its pod list, and the parsed selector.
func selectPods(pods []corev1.Pod, podSelector string) ([]corev1.Pod, labels.Selector, error) {
	sel, err := labels.Parse(podSelector)
	if err != nil {
		return nil, nil, fmt.Errorf("drain.podSelector %q: %w", podSelector, err)
	}
	var selected []corev1.Pod
	for _, p := range pods {
		if sel.Matches(labels.Set(p.Labels)) {
			selected = append(selected, p)
		}
	}
	return selected, sel, nil
}

// skipReason says why a drain leaves p alone: p is outside podSelector, or
// judgePod keeps it (its DaemonSet exists, or it is a mirror pod).
func skipReason(p *corev1.Pod, podSelector labels.Selector) string {
	switch {
	case !podSelector.Matches(labels.Set(p.Labels)):
		return "outside drain.podSelector"
	case daemonSetController(p) != nil && !Finished(p):
		return keepDaemonSetPod
	default:
		return keepMirrorPod
	}
}
