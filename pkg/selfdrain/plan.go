package selfdrain

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
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
func Plan(ctx context.Context, client kubernetes.Interface, node, podSelector string) ([]PlannedPod, error) {
	all, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing pods on %s: %w", node, err)
	}
	helper := &drain.Helper{Ctx: ctx, Client: client, Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true, PodSelector: podSelector}
	list, errs := helper.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return nil, fmt.Errorf("choosing pods on %s: %w", node, errors.Join(errs...))
	}
	evict := map[string]bool{}
	for _, p := range list.Pods() {
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
			pp.Action, pp.Why = "skip", skipReason(&p)
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
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

func skipReason(p *corev1.Pod) string {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return "mirror (static) pod"
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return "DaemonSet pod"
	}
	return "outside drain.podSelector"
}
