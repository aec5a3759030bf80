package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Messages of the PreFilter stage. When a PreFilter plugin rejects the pod outright the scheduler's
// message carries that one text without counts; nodes left out of a PreFilter node-name restriction
// are counted with reasonOutsidePreFilter.
const (
	reasonAffinityTermsConflict = "pod affinity terms conflict"
	reasonOutsidePreFilter      = "node(s) didn't satisfy plugin(s) %v"
	msgPreFilterOne             = "node(s) didn't satisfy plugin %v"
	msgPreFilterMany            = "node(s) didn't satisfy plugin(s) %v simultaneously"
)

// preFilterResult is what the PreFilter stage leaves for the Filter stage: either a rejection of the
// pod everywhere, or the node names the pod may go to (nil: all), and the plugins that restricted them.
type preFilterResult struct {
	failPlugin Plugin
	failMsg    string
	allowed    sets.Set[string]
	byPlugin   map[Plugin]sets.Set[string]
	plugins    []string
}

// preFilter runs the node-name restrictions of the PreFilter stage in plugin order (v1.37.2): NodeName
// restricts a pod with spec.nodeName to that node; NodeAffinity restricts a pod whose every required
// term names nodes with "metadata.name In" match fields to the union of those names, and rejects it
// outright when every term's names cancel out. The restrictions intersect.
func preFilter(pod *corev1.Pod) preFilterResult {
	var r preFilterResult
	r.byPlugin = map[Plugin]sets.Set[string]{}
	if pod.Spec.NodeName != "" {
		r.restrict(NodeName, sets.New(pod.Spec.NodeName))
	}
	names, conflict := nodeAffinityNames(pod)
	if conflict {
		return preFilterResult{failPlugin: NodeAffinity, failMsg: reasonAffinityTermsConflict}
	}
	if names != nil {
		r.restrict(NodeAffinity, names)
	}
	if r.allowed != nil && r.allowed.Len() == 0 {
		r.failPlugin = Plugin(r.plugins[0])
		r.failMsg = fmt.Sprintf(msgPreFilterMany, r.plugins)
		if len(r.plugins) == 1 {
			r.failMsg = fmt.Sprintf(msgPreFilterOne, r.plugins[0])
		}
	}
	return r
}

func (r *preFilterResult) restrict(p Plugin, names sets.Set[string]) {
	r.byPlugin[p] = names
	r.plugins = append(r.plugins, string(p))
	sort.Strings(r.plugins)
	if r.allowed == nil {
		r.allowed = names.Clone()
	} else {
		r.allowed = r.allowed.Intersection(names)
	}
}

// nodeAffinityNames returns the node names the required node affinity pins the pod to, nil when some
// term does not pin it, and conflict when the terms pin it to no node at all.
func nodeAffinityNames(pod *corev1.Pod) (sets.Set[string], bool) {
	aff := pod.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil, false
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil, false
	}
	var union sets.Set[string]
	for _, t := range terms {
		var termNames sets.Set[string]
		for _, f := range t.MatchFields {
			if f.Key != metav1.ObjectNameField || f.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			if termNames == nil {
				termNames = sets.New(f.Values...)
			} else {
				termNames = termNames.Intersection(sets.New(f.Values...))
			}
		}
		if termNames == nil {
			return nil, false
		}
		union = union.Union(termNames)
	}
	return union, union.Len() == 0
}

// reject returns the rejection of node by the PreFilter stage, or nil when the node goes on to the filters.
func (r preFilterResult) reject(node string) *Rejection {
	if r.failMsg != "" {
		return &Rejection{Node: node, Plugin: r.failPlugin, Reasons: []string{r.failMsg}, Detail: "rejected before any node is looked at"}
	}
	if r.allowed == nil || r.allowed.Has(node) {
		return nil
	}
	var by Plugin
	for _, p := range []Plugin{NodeName, NodeAffinity} {
		if names, ok := r.byPlugin[p]; ok && !names.Has(node) {
			by = p
			break
		}
	}
	return &Rejection{Node: node, Plugin: by, Reasons: []string{fmt.Sprintf(reasonOutsidePreFilter, r.plugins)},
		Detail: "pod is pinned to node(s) " + strings.Join(sets.List(r.allowed), ", ")}
}

// isPreFilterMessage tells the reasons that stand for a rejection of the pod as a whole: the scheduler
// prints them once, without a count.
func isPreFilterMessage(reason string) bool {
	return reason == reasonAffinityTermsConflict || strings.HasPrefix(reason, "parsing pod: ") ||
		strings.HasPrefix(reason, "node(s) didn't satisfy plugin ") ||
		(strings.HasPrefix(reason, "node(s) didn't satisfy plugin(s) [") && strings.HasSuffix(reason, "] simultaneously"))
}
