package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Reason strings of the node-only plugins, as kube-scheduler v1.37.2 words them.
const (
	reasonNodeName      = "node(s) didn't match the requested node name"
	reasonUnschedulable = "node(s) were unschedulable"
	reasonTaint         = "node(s) had untolerated taint(s)"
	reasonNodeAffinity  = "node(s) didn't match Pod's node affinity/selector"
)

// enableTaintComparisonOperators mirrors the TaintTolerationComparisonOperators feature gate, alpha and
// off by default at v1.37.
const enableTaintComparisonOperators = false

// filterNodeName: a pod that names its node fits only there.
func filterNodeName(pod *corev1.Pod, node *corev1.Node) *Rejection {
	if pod.Spec.NodeName == "" || pod.Spec.NodeName == node.Name {
		return nil
	}
	return reject(reasonNodeName, fmt.Sprintf("pod asks for node %s", pod.Spec.NodeName))
}

// filterUnschedulable: a cordoned node takes only pods tolerating the node.kubernetes.io/unschedulable
// NoSchedule taint.
func filterUnschedulable(pod *corev1.Pod, node *corev1.Node) *Rejection {
	if !node.Spec.Unschedulable {
		return nil
	}
	taint := &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	if corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, taint, enableTaintComparisonOperators) {
		return nil
	}
	return reject(reasonUnschedulable, "cordoned (spec.unschedulable)")
}

// doNotSchedule keeps the taints the filter looks at: NoSchedule and NoExecute (PreferNoSchedule is
// only scored).
func doNotSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// untoleratedTaint returns the node's first NoSchedule/NoExecute taint the pod does not tolerate.
func untoleratedTaint(pod *corev1.Pod, node *corev1.Node) (corev1.Taint, bool) {
	return corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		doNotSchedule, enableTaintComparisonOperators)
}

func filterTaints(pod *corev1.Pod, node *corev1.Node) *Rejection {
	taint, found := untoleratedTaint(pod, node)
	if !found {
		return nil
	}
	return reject(reasonTaint, "taint "+taint.ToString())
}

// filterNodeAffinity: spec.nodeSelector and the required node affinity, both must match.
func filterNodeAffinity(pod *corev1.Pod, node *corev1.Node) *Rejection {
	// Parse errors are ignored, as the scheduler does: a term that does not parse matches nothing.
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); ok {
		return nil
	}
	return reject(reasonNodeAffinity, nodeAffinityDetail(pod, node))
}

// nodeAffinityDetail says what the node lacks: the node selector's missing labels first, else, for each
// required term, its first requirement the node fails.
func nodeAffinityDetail(pod *corev1.Pod, node *corev1.Node) string {
	var lacks []string
	keys := make([]string, 0, len(pod.Spec.NodeSelector))
	for k := range pod.Spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := node.Labels[k]; !ok || v != pod.Spec.NodeSelector[k] {
			lacks = append(lacks, k+"="+pod.Spec.NodeSelector[k])
		}
	}
	if len(lacks) > 0 {
		return "lacks " + strings.Join(lacks, ", ")
	}
	aff := pod.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "does not match the node selector"
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	var fails []string
	for _, t := range terms {
		fails = append(fails, failingRequirement(t, node))
	}
	if len(fails) == 0 {
		return "required node affinity has no terms"
	}
	return "fails required node affinity: " + strings.Join(fails, "; or ")
}

// failingRequirement describes the first requirement of term that node does not meet.
func failingRequirement(term corev1.NodeSelectorTerm, node *corev1.Node) string {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return "empty term (matches no node)"
	}
	for _, r := range term.MatchExpressions {
		one := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{r}}}}
		if ok, _ := nodeaffinity.NewLazyErrorNodeSelector(one).Match(node); !ok {
			return describeRequirement(r, node.Labels)
		}
	}
	for _, r := range term.MatchFields {
		one := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{r}}}}
		if ok, _ := nodeaffinity.NewLazyErrorNodeSelector(one).Match(node); !ok {
			return fmt.Sprintf("field %s %s %v (node is %s)", r.Key, r.Operator, r.Values, node.Name)
		}
	}
	return "term does not match"
}

func describeRequirement(r corev1.NodeSelectorRequirement, nodeLabels map[string]string) string {
	has := "node lacks " + r.Key
	if v, ok := nodeLabels[r.Key]; ok {
		has = "node has " + r.Key + "=" + v
	}
	switch r.Operator {
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		return fmt.Sprintf("%s %s (%s)", r.Key, r.Operator, has)
	}
	return fmt.Sprintf("%s %s [%s] (%s)", r.Key, r.Operator, strings.Join(r.Values, " "), has)
}
