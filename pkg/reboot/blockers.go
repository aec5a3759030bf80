package reboot

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/node-agent/node-agent/pkg/podaccess"
)

// Every check below fails closed: when it cannot be made, it reports a
// blocker that says why, and the reboot waits. A node that reboots because
// Prometheus was down, or the apiserver did not answer, is the outage the
// check was configured to prevent (kured fails closed the same way).

// PodLister lists the pods on this node that match a selector.
type PodLister interface {
	ListPods(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error)
}

// NodePods lists a node's pods through the apiserver with a spec.nodeName
// field selector, through the client pkg/podaccess chose: as the node itself
// (ModeNode: the Node authorizer lets the node's identity list its pods only
// with that selector), or with the ServiceAccount's own grant where the
// cluster refuses the impersonation (ModeClusterWide), as the drain does.
type NodePods struct {
	// Access says how the node's pods are reached; it is asked before
	// every list, as the drain asks before it begins. The wiring hands it
	// podaccess.Reporter.Check, shared with the drain.
	Access func(ctx context.Context) (podaccess.Access, error)
	Node   string
}

// ListPods implements PodLister; the label selector is applied by the
// apiserver. With no way to the pods (ModeNone), or when the way cannot be
// found out, it fails, and PodBlockers reports that as a blocker.
func (n NodePods) ListPods(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error) {
	acc, err := n.Access(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding out how node %s's pods are reached: %w", n.Node, err)
	}
	if acc.Client == nil {
		return nil, fmt.Errorf("%w: %s; %s", podaccess.ErrNoAccess, acc.Why, podaccess.Fix)
	}
	list, err := acc.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Node).String(),
		LabelSelector: selector.String(),
	})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// PodBlockers finds the pods that block a reboot: those on this node that
// match reboot.blockingPodSelector and have not finished.
type PodBlockers struct {
	Lister PodLister
	// Selector is the parsed reboot.blockingPodSelector; nil or empty
	// means no pod blocks (labels.Parse("") would select every pod).
	Selector labels.Selector
	// Namespaces is reboot.blockingPodNamespaces: only pods of these
	// namespaces block. Empty: every namespace's.
	Namespaces []string
}

// Blockers returns one Blocker per blocking pod, namespace/name, sorted; a
// failed list is itself a blocker.
func (p PodBlockers) Blockers(ctx context.Context) []Blocker {
	if p.Selector == nil || p.Selector.Empty() {
		return nil
	}
	pods, err := p.Lister.ListPods(ctx, p.Selector)
	if err != nil {
		return []Blocker{{Kind: BlockerPod, Name: "pods not listed: " + err.Error()}}
	}
	var out []Blocker
	for _, pod := range pods {
		// A pod that finished holds nothing a reboot could break; kured
		// leaves out the same phases.
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if !p.Selector.Matches(labels.Set(pod.Labels)) {
			continue // the lister may be a store that does not filter
		}
		if len(p.Namespaces) > 0 && !slices.Contains(p.Namespaces, pod.Namespace) {
			// The label alone is anyone's who may create a pod here;
			// the admin chose whose pods count.
			continue
		}
		out = append(out, Blocker{Kind: BlockerPod, Name: pod.Namespace + "/" + pod.Name})
	}
	slices.SortFunc(out, func(a, b Blocker) int { return strings.Compare(a.Name, b.Name) })
	return out
}
