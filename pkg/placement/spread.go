package placement

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Reason strings of PodTopologySpread, as kube-scheduler v1.37.2 words them.
const (
	reasonSpread             = "node(s) didn't match pod topology spread constraints"
	reasonSpreadMissingLabel = reasonSpread + " (missing required label)"
)

// spreadConstraint is one DoNotSchedule topology spread constraint made ready to count pods.
type spreadConstraint struct {
	maxSkew         int32
	topologyKey     string
	selector        labels.Selector
	minDomains      int32
	honorAffinity   bool // nodeAffinityPolicy, Honor unless set to Ignore
	honorTaints     bool // nodeTaintsPolicy, Ignore unless set to Honor
	domainMatchNums map[string]int
}

// spreadState is PodTopologySpread's PreFilter result for one incoming pod.
type spreadState struct {
	pod         *corev1.Pod
	constraints []*spreadConstraint
	err         error
}

// spreadConstraints reads the pod's DoNotSchedule constraints. matchLabelKeys the pod has labels for
// are added to the selector (the scheduler does so itself; the apiserver may have done it already,
// which changes nothing). The cluster-default constraints are all ScheduleAnyway, so a pod without
// constraints of its own has none to filter with.
func spreadConstraints(pod *corev1.Pod) ([]*spreadConstraint, error) {
	var out []*spreadConstraint
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != corev1.DoNotSchedule {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			return nil, err
		}
		match := labels.Set{}
		for _, k := range c.MatchLabelKeys {
			if v, ok := pod.Labels[k]; ok {
				match[k] = v
			}
		}
		if len(match) > 0 {
			if reqs, selectable := sel.Requirements(); selectable {
				merged := labels.SelectorFromSet(match)
				for _, r := range reqs {
					merged = merged.Add(r)
				}
				sel = merged
			}
		}
		sc := &spreadConstraint{maxSkew: c.MaxSkew, topologyKey: c.TopologyKey, selector: sel, minDomains: 1,
			honorAffinity: true, domainMatchNums: map[string]int{}}
		if c.MinDomains != nil {
			sc.minDomains = *c.MinDomains
		}
		if c.NodeAffinityPolicy != nil {
			sc.honorAffinity = *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor
		}
		if c.NodeTaintsPolicy != nil {
			sc.honorTaints = *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor
		}
		out = append(out, sc)
	}
	return out, nil
}

// newSpreadState counts, for each constraint, the matching pods in every eligible domain. A node is
// eligible when it has the topology keys of all constraints and passes the constraint's inclusion
// policies; eligible nodes make their domain exist even with no matching pod. Only pods in the incoming
// pod's namespace and not being deleted are counted, and an empty selector counts nothing.
func (s *Snapshot) newSpreadState(pod *corev1.Pod) *spreadState {
	st := &spreadState{pod: pod}
	st.constraints, st.err = spreadConstraints(pod)
	if st.err != nil || len(st.constraints) == 0 {
		return st
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	for _, ns := range s.nodes {
		if !hasAllKeys(ns.node, st.constraints) {
			continue
		}
		for _, c := range st.constraints {
			if !c.includes(pod, ns.node, required) {
				continue
			}
			c.domainMatchNums[ns.node.Labels[c.topologyKey]] += countMatching(ns.pods, c.selector, pod.Namespace)
		}
	}
	return st
}

func hasAllKeys(node *corev1.Node, cs []*spreadConstraint) bool {
	for _, c := range cs {
		if _, ok := node.Labels[c.topologyKey]; !ok {
			return false
		}
	}
	return true
}

func (c *spreadConstraint) includes(pod *corev1.Pod, node *corev1.Node, required nodeaffinity.RequiredNodeAffinity) bool {
	if c.honorAffinity {
		if ok, _ := required.Match(node); !ok {
			return false
		}
	}
	if c.honorTaints {
		if _, untolerated := untoleratedTaint(pod, node); untolerated {
			return false
		}
	}
	return true
}

func countMatching(pods []*corev1.Pod, sel labels.Selector, namespace string) int {
	if sel.Empty() {
		return 0
	}
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Namespace == namespace && sel.Matches(labels.Set(p.Labels)) {
			n++
		}
	}
	return n
}

// minMatch is the smallest count over the constraint's domains, or 0 while there are fewer domains
// than minDomains.
func (c *spreadConstraint) minMatch() int {
	if len(c.domainMatchNums) < int(c.minDomains) {
		return 0
	}
	lowest := math.MaxInt32
	for _, n := range c.domainMatchNums {
		lowest = min(lowest, n)
	}
	return lowest
}

// filter: PodTopologySpread. For each constraint in turn, the node must have the topology key, and
// placing the pod in the node's domain must keep (domain count + 1 if the pod matches itself - the
// smallest domain count) within maxSkew.
func (st *spreadState) filter(ns *nodeState) *Rejection {
	if st.err != nil {
		return reject(fmt.Sprintf("get constraints from pod: %v", st.err), "topology spread constraints do not parse")
	}
	node := ns.node
	for _, c := range st.constraints {
		v, ok := node.Labels[c.topologyKey]
		if !ok {
			return reject(reasonSpreadMissingLabel, "lacks topology label "+c.topologyKey)
		}
		self := 0
		if c.selector.Matches(labels.Set(st.pod.Labels)) {
			self = 1
		}
		lowest := c.minMatch()
		if skew := c.domainMatchNums[v] + self - lowest; skew > int(c.maxSkew) {
			return reject(reasonSpread, fmt.Sprintf("%s=%s would hold %d matching pods against a minimum of %d (maxSkew %d)",
				c.topologyKey, v, c.domainMatchNums[v]+self, lowest, c.maxSkew))
		}
	}
	return nil
}
