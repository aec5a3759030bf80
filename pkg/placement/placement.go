package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Plugin is a kube-scheduler filter plugin's name.
type Plugin string

// The filter plugins this package evaluates, named as kube-scheduler names them.
const (
	NodeUnschedulable Plugin = "NodeUnschedulable"
	NodeName          Plugin = "NodeName"
	TaintToleration   Plugin = "TaintToleration"
	NodeAffinity      Plugin = "NodeAffinity"
	NodeResourcesFit  Plugin = "NodeResourcesFit"
	PodTopologySpread Plugin = "PodTopologySpread"
	InterPodAffinity  Plugin = "InterPodAffinity"
)

// podDependent lists the plugins that need every pod of the node being judged; where a node's pods are
// unknown they are not evaluated there.
var podDependent = []Plugin{NodeResourcesFit, PodTopologySpread, InterPodAffinity}

// Rejection: why one node cannot take the pod.
type Rejection struct {
	Node    string
	Plugin  Plugin
	Reasons []string // the scheduler's own reason strings, as in the PodScheduled condition's message
	Detail  string   // ours, for people: exactly what failed
}

// Result of one evaluation.
type Result struct {
	Fits       []string            // nodes that take the pod, sorted
	Unverified map[string][]Plugin // for fitting nodes whose pods are unknown: the plugins not evaluated there
	Rejected   []Rejection         // sorted by node
}

// SchedulerMessage renders the result the way kube-scheduler's PodScheduled=False message begins:
// "0/N nodes are available: <count> <reason>, ...". The scheduler (FitError.Error) counts every reason
// of every rejected node, renders each as "<count> <reason>" and sorts those strings as plain strings,
// so "10 x" sorts before "2 y"; it ends the list with a period. What follows in the real message (the
// preemption outcome) is not rendered. When some node fits there is no such message and the result is "".
// A rejection by the PreFilter stage (the pod pinned to no node at all) is printed once, without a
// count, as the scheduler does.
func (r Result) SchedulerMessage() string {
	if len(r.Fits) > 0 {
		return ""
	}
	msg := fmt.Sprintf("0/%d nodes are available:", len(r.Fits)+len(r.Rejected))
	counts := map[string]int{}
	for _, rej := range r.Rejected {
		for _, reason := range rej.Reasons {
			if isPreFilterMessage(reason) {
				return msg + " " + reason + "."
			}
			counts[reason]++
		}
	}
	if len(counts) == 0 {
		return msg
	}
	parts := make([]string, 0, len(counts))
	for reason, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, reason))
	}
	sort.Strings(parts)
	return msg + " " + strings.Join(parts, ", ") + "."
}

// nodeState is one node of the snapshot with the pods the scheduler's cache would hold for it.
type nodeState struct {
	node      *corev1.Node
	known     bool
	pods      []*corev1.Pod
	requested resources
}

// Snapshot: the cluster as the scheduler sees it for a new pod.
type Snapshot struct {
	nodes      []*nodeState // sorted by name
	byName     map[string]*nodeState
	namespaces map[string]map[string]string // namespace name -> labels
}

// NewSnapshot takes the Nodes, the Pods (any; unbound and terminal ones are ignored), the Namespaces
// (for namespaceSelector; may be nil), and known: whether a node's pods are all in pods (nil = every node's).
// Where a node's pods are unknown, NodeResourcesFit, InterPodAffinity and PodTopologySpread are not evaluated
// for that node and it is listed in Unverified if the other filters pass.
//
// The pods kept are those kube-scheduler's cache holds: its pod informer excludes phases Succeeded and
// Failed, and it counts only pods with spec.nodeName set. Pods being deleted stay counted, except by
// PodTopologySpread, which skips them itself. Pods bound to a node outside the snapshot are ignored.
// Pods given for a node whose pods are unknown still count in the topology domains (spread, affinity)
// the other nodes are judged by; those counts are then a lower bound.
func NewSnapshot(nodes []corev1.Node, pods []corev1.Pod, namespaces []corev1.Namespace, known func(node string) bool) *Snapshot {
	s := &Snapshot{byName: map[string]*nodeState{}, namespaces: map[string]map[string]string{}}
	for i := range nodes {
		n := nodes[i].DeepCopy()
		ns := &nodeState{node: n, known: known == nil || known(n.Name), requested: resources{}}
		s.nodes = append(s.nodes, ns)
		s.byName[n.Name] = ns
	}
	sort.Slice(s.nodes, func(i, j int) bool { return s.nodes[i].node.Name < s.nodes[j].node.Name })
	for i := range namespaces {
		s.namespaces[namespaces[i].Name] = namespaces[i].Labels
	}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		s.add(p.DeepCopy(), p.Spec.NodeName)
	}
	return s
}

// add counts pod (already defaulted, if it never went through the apiserver) on node.
func (s *Snapshot) add(pod *corev1.Pod, node string) {
	ns := s.byName[node]
	if ns == nil {
		return
	}
	ns.pods = append(ns.pods, pod)
	ns.requested.add(boundPodRequests(pod))
}

// Assume counts pod as bound to node from now on (requests, labels, its anti-affinity, spread counts),
// as the scheduler's cache does after binding; the plan uses it so that two VMs are not both planned
// into room for one.
func (s *Snapshot) Assume(pod *corev1.Pod, node string) {
	p := defaultedPod(pod)
	p.Spec.NodeName = node
	s.add(p, node)
}

// filterFunc is one plugin's filter: nil when the node passes.
type filterFunc func(ns *nodeState) *Rejection

// Evaluate runs the filters for pod against every node of the snapshot. pod is not modified.
//
// The filters run in the order of kube-scheduler's default plugin set (pkg/scheduler/apis/config/v1
// default_plugins.go, getDefaultPlugins, v1.37.2): NodeName, NodeUnschedulable, TaintToleration,
// NodeAffinity, [NodePorts], NodeResourcesFit, [volume plugins], PodTopologySpread, InterPodAffinity.
// As the framework's RunFilterPlugins does, a node's evaluation stops at its first failing plugin.
// Before the filters, the PreFilter stage's node-name restrictions apply (see preFilter).
func (s *Snapshot) Evaluate(pod *corev1.Pod) Result {
	p := defaultedPod(pod)
	pre := preFilter(p)
	spread := s.newSpreadState(p)
	affinity := s.newAffinityState(p)
	if pre.failMsg == "" && affinity.parseErr != nil {
		// InterPodAffinity's PreFilter rejects a pod whose affinity terms do not parse.
		pre = preFilterResult{failPlugin: InterPodAffinity, failMsg: fmt.Sprintf("parsing pod: %+v", affinity.parseErr)}
	}
	podReq := incomingRequests(p)
	filters := []struct {
		plugin Plugin
		run    filterFunc
	}{
		{NodeName, func(ns *nodeState) *Rejection { return filterNodeName(p, ns.node) }},
		{NodeUnschedulable, func(ns *nodeState) *Rejection { return filterUnschedulable(p, ns.node) }},
		{TaintToleration, func(ns *nodeState) *Rejection { return filterTaints(p, ns.node) }},
		{NodeAffinity, func(ns *nodeState) *Rejection { return filterNodeAffinity(p, ns.node) }},
		{NodeResourcesFit, func(ns *nodeState) *Rejection { return filterResources(podReq, ns) }},
		{PodTopologySpread, spread.filter},
		{InterPodAffinity, affinity.filter},
	}
	res := Result{Fits: []string{}}
	for _, ns := range s.nodes {
		if rej := pre.reject(ns.node.Name); rej != nil {
			res.Rejected = append(res.Rejected, *rej)
			continue
		}
		var rej *Rejection
		var skipped []Plugin
		for _, f := range filters {
			if !ns.known && isPodDependent(f.plugin) {
				skipped = append(skipped, f.plugin)
				continue
			}
			if rej = f.run(ns); rej != nil {
				rej.Node, rej.Plugin = ns.node.Name, f.plugin
				break
			}
		}
		if rej != nil {
			res.Rejected = append(res.Rejected, *rej)
			continue
		}
		res.Fits = append(res.Fits, ns.node.Name)
		if len(skipped) > 0 {
			if res.Unverified == nil {
				res.Unverified = map[string][]Plugin{}
			}
			res.Unverified[ns.node.Name] = skipped
		}
	}
	return res
}

func isPodDependent(p Plugin) bool {
	for _, d := range podDependent {
		if d == p {
			return true
		}
	}
	return false
}

// reject builds a rejection with one scheduler reason.
func reject(reason, detail string) *Rejection {
	return &Rejection{Reasons: []string{reason}, Detail: detail}
}
