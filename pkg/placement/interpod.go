package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Reason strings of InterPodAffinity, as kube-scheduler v1.37.2 words them.
const (
	reasonAffinity             = "node(s) didn't match pod affinity rules"
	reasonAntiAffinity         = "node(s) didn't match pod anti-affinity rules"
	reasonExistingAntiAffinity = "node(s) didn't satisfy existing pods anti-affinity rules"
)

// affinityTerm is a required pod (anti-)affinity term made ready to match pods: the namespaces it names
// (the owning pod's own when it names none and has no namespaceSelector), its namespaceSelector (nil in
// the API becomes "nothing", {} becomes "everything") and its label selector.
type affinityTerm struct {
	namespaces  sets.Set[string]
	nsSelector  labels.Selector
	selector    labels.Selector
	topologyKey string
	text        string // for details
}

func newAffinityTerm(owner *corev1.Pod, t corev1.PodAffinityTerm) (affinityTerm, error) {
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	if err != nil {
		return affinityTerm{}, err
	}
	nsSel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
	if err != nil {
		return affinityTerm{}, err
	}
	ns := sets.New(t.Namespaces...)
	if len(t.Namespaces) == 0 && t.NamespaceSelector == nil {
		ns.Insert(owner.Namespace)
	}
	return affinityTerm{namespaces: ns, nsSelector: nsSel, selector: sel, topologyKey: t.TopologyKey,
		text: fmt.Sprintf("%s over %s", sel, t.TopologyKey)}, nil
}

// matches says whether pod, whose namespace has nsLabels, is selected by the term.
func (t affinityTerm) matches(pod *corev1.Pod, nsLabels labels.Set) bool {
	if t.namespaces.Has(pod.Namespace) || t.nsSelector.Matches(nsLabels) {
		return t.selector.Matches(labels.Set(pod.Labels))
	}
	return false
}

// requiredTerms parses a pod's required affinity or anti-affinity terms; a term that does not parse is
// dropped (the scheduler cannot build the pod's info then either).
func requiredTerms(owner *corev1.Pod, terms []corev1.PodAffinityTerm) ([]affinityTerm, error) {
	var out []affinityTerm
	for _, t := range terms {
		at, err := newAffinityTerm(owner, t)
		if err != nil {
			return nil, err
		}
		out = append(out, at)
	}
	return out, nil
}

func podAffinityTerms(p *corev1.Pod) []corev1.PodAffinityTerm {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
		return nil
	}
	return p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}

func podAntiAffinityTerms(p *corev1.Pod) []corev1.PodAffinityTerm {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAntiAffinity == nil {
		return nil
	}
	return p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}

// mergeLabelKeys does to p what the apiserver does when a pod is created: in each pod (anti-)affinity
// term with a label selector, every matchLabelKeys key the pod has a label for becomes "key In (value)",
// every mismatchLabelKeys key "key NotIn (value)". For a pod that was created already this only repeats
// requirements it has.
func mergeLabelKeys(p *corev1.Pod) {
	if p.Spec.Affinity == nil {
		return
	}
	var terms []*corev1.PodAffinityTerm
	if a := p.Spec.Affinity.PodAffinity; a != nil {
		for i := range a.RequiredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, &a.RequiredDuringSchedulingIgnoredDuringExecution[i])
		}
		for i := range a.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, &a.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm)
		}
	}
	if a := p.Spec.Affinity.PodAntiAffinity; a != nil {
		for i := range a.RequiredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, &a.RequiredDuringSchedulingIgnoredDuringExecution[i])
		}
		for i := range a.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, &a.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm)
		}
	}
	for _, t := range terms {
		if t.LabelSelector == nil {
			continue
		}
		addLabelKeys(t.LabelSelector, t.MatchLabelKeys, metav1.LabelSelectorOpIn, p.Labels)
		addLabelKeys(t.LabelSelector, t.MismatchLabelKeys, metav1.LabelSelectorOpNotIn, p.Labels)
	}
}

func addLabelKeys(sel *metav1.LabelSelector, keys []string, op metav1.LabelSelectorOperator, podLabels map[string]string) {
	for _, k := range keys {
		if v, ok := podLabels[k]; ok {
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: op, Values: []string{v}})
		}
	}
}

// topologyPair is one topology domain: a node label key and its value.
type topologyPair struct{ key, value string }

// affinityState is InterPodAffinity's PreFilter result for one incoming pod.
type affinityState struct {
	skip          bool
	parseErr      error
	pod           *corev1.Pod
	affinity      []affinityTerm
	antiAffinity  []affinityTerm
	affinityCount map[topologyPair]int64 // domains holding a pod that matches all affinity terms
	antiCount     map[topologyPair]int64 // domains holding a pod the incoming anti-affinity selects
	existingCount map[topologyPair]int64 // domains where an existing pod's anti-affinity selects the incoming pod
	existingWhy   map[topologyPair]string
}

// nsLabels returns a namespace's labels as the scheduler's namespace lister would (empty when unknown).
func (s *Snapshot) nsLabels(ns string) labels.Set {
	return labels.Merge(s.namespaces[ns], nil)
}

// mergeNamespaceSelector folds an incoming term's non-empty namespaceSelector into its namespace set
// using the snapshot's Namespaces, as the plugin's PreFilter does; an empty selector ({}) is kept and
// matches every namespace.
func (s *Snapshot) mergeNamespaceSelector(t *affinityTerm) {
	if t.nsSelector.Empty() {
		return
	}
	for name, l := range s.namespaces {
		if t.nsSelector.Matches(labels.Set(l)) {
			t.namespaces.Insert(name)
		}
	}
	t.nsSelector = labels.Nothing()
}

func (s *Snapshot) newAffinityState(pod *corev1.Pod) *affinityState {
	st := &affinityState{pod: pod, affinityCount: map[topologyPair]int64{}, antiCount: map[topologyPair]int64{},
		existingCount: map[topologyPair]int64{}, existingWhy: map[topologyPair]string{}}
	var err error
	if st.affinity, err = requiredTerms(pod, podAffinityTerms(pod)); err == nil {
		st.antiAffinity, err = requiredTerms(pod, podAntiAffinityTerms(pod))
	}
	if err != nil {
		st.parseErr = err
		return st
	}
	for i := range st.affinity {
		s.mergeNamespaceSelector(&st.affinity[i])
	}
	for i := range st.antiAffinity {
		s.mergeNamespaceSelector(&st.antiAffinity[i])
	}
	own := s.nsLabels(pod.Namespace)
	for _, ns := range s.nodes {
		for _, existing := range ns.pods {
			s.countExisting(st, existing, ns.node, own)
			if podMatchesAll(st.affinity, existing) {
				for _, t := range st.affinity {
					addPair(st.affinityCount, ns.node, t.topologyKey)
				}
			}
			for _, t := range st.antiAffinity {
				if t.matches(existing, nil) {
					addPair(st.antiCount, ns.node, t.topologyKey)
				}
			}
		}
	}
	st.skip = len(st.existingCount) == 0 && len(st.affinity) == 0 && len(st.antiAffinity) == 0
	return st
}

// countExisting records the domains where existing's required anti-affinity selects the incoming pod.
func (s *Snapshot) countExisting(st *affinityState, existing *corev1.Pod, node *corev1.Node, own labels.Set) {
	terms, err := requiredTerms(existing, podAntiAffinityTerms(existing))
	if err != nil {
		return
	}
	for _, t := range terms {
		if !t.matches(st.pod, own) {
			continue
		}
		if v, ok := node.Labels[t.topologyKey]; ok {
			tp := topologyPair{t.topologyKey, v}
			st.existingCount[tp]++
			if _, seen := st.existingWhy[tp]; !seen {
				st.existingWhy[tp] = fmt.Sprintf("pod %s/%s on %s repels it (%s)", existing.Namespace, existing.Name, node.Name, t.text)
			}
		}
	}
}

func addPair(m map[topologyPair]int64, node *corev1.Node, key string) {
	if v, ok := node.Labels[key]; ok {
		m[topologyPair{key, v}]++
	}
}

// podMatchesAll: terms is not empty and pod matches every one of them (namespace selectors of the
// incoming pod's terms are already folded into their namespace sets).
func podMatchesAll(terms []affinityTerm, pod *corev1.Pod) bool {
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		if !t.matches(pod, nil) {
			return false
		}
	}
	return true
}

// filter: InterPodAffinity. The plugin checks, in this order, the incoming pod's affinity, its
// anti-affinity, then the existing pods' anti-affinity.
func (st *affinityState) filter(ns *nodeState) *Rejection {
	if st.skip || st.parseErr != nil {
		return nil
	}
	node := ns.node
	if detail, ok := st.affinityMatches(node); !ok {
		return reject(reasonAffinity, detail)
	}
	for _, t := range st.antiAffinity {
		if v, ok := node.Labels[t.topologyKey]; ok && st.antiCount[topologyPair{t.topologyKey, v}] > 0 {
			return reject(reasonAntiAffinity, fmt.Sprintf("anti-affinity %s: %s=%s already holds a matching pod", t.text, t.topologyKey, v))
		}
	}
	keys := make([]string, 0, len(node.Labels))
	for k := range node.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tp := topologyPair{k, node.Labels[k]}
		if st.existingCount[tp] > 0 {
			return reject(reasonExistingAntiAffinity, fmt.Sprintf("in %s=%s, %s", k, tp.value, st.existingWhy[tp]))
		}
	}
	return nil
}

// affinityMatches: every affinity term's domain of node must hold a pod matching all the terms; a node
// lacking a term's topology key never matches. When no pod anywhere matches and the pod matches its own
// terms, it may go to any node that has all the keys (the first pod of a group).
func (st *affinityState) affinityMatches(node *corev1.Node) (string, bool) {
	if len(st.affinity) == 0 {
		return "", true
	}
	var missing []string
	for _, t := range st.affinity {
		v, ok := node.Labels[t.topologyKey]
		if !ok {
			return fmt.Sprintf("lacks topology label %s of affinity %s", t.topologyKey, t.text), false
		}
		if st.affinityCount[topologyPair{t.topologyKey, v}] <= 0 {
			missing = append(missing, fmt.Sprintf("%s=%s", t.topologyKey, v))
		}
	}
	if len(missing) == 0 {
		return "", true
	}
	if len(st.affinityCount) == 0 && podMatchesAll(st.affinity, st.pod) {
		return "", true
	}
	texts := make([]string, len(st.affinity))
	for i, t := range st.affinity {
		texts[i] = t.text
	}
	return fmt.Sprintf("no pod matching affinity %s in %s", strings.Join(texts, " and "), strings.Join(missing, ", ")), false
}
