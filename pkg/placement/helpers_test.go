package placement

import (
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mkNode builds a schedulable node with 4 cpu, 8Gi memory and room for 110 pods.
func mkNode(name string, lbls map[string]string, mods ...func(*corev1.Node)) corev1.Node {
	l := map[string]string{corev1.LabelHostname: name}
	for k, v := range lbls {
		l[k] = v
	}
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    apiresource.MustParse("4"),
			corev1.ResourceMemory: apiresource.MustParse("8Gi"),
			corev1.ResourcePods:   apiresource.MustParse("110"),
		}},
	}
	for _, m := range mods {
		m(&n)
	}
	return n
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func withTaint(key, value string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

func withAllocatable(name corev1.ResourceName, q string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Status.Allocatable[name] = apiresource.MustParse(q) }
}

// mkPod builds a pod in namespace "vms" with one container.
func mkPod(name string, lbls map[string]string, mods ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vms", Labels: lbls},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
	}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func on(node string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

func inNamespace(ns string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Namespace = ns } }

func requests(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = resourceList(kv...) }
}

func limits(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Limits = resourceList(kv...) }
}

func resourceList(kv ...string) corev1.ResourceList {
	rl := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		rl[corev1.ResourceName(kv[i])] = apiresource.MustParse(kv[i+1])
	}
	return rl
}

func tolerate(key string, op corev1.TolerationOperator, effect corev1.TaintEffect) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: op, Effect: effect})
	}
}

func nodeSelector(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func ensureAffinity(p *corev1.Pod) *corev1.Affinity {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	return p.Spec.Affinity
}

func nodeAffinity(reqs ...corev1.NodeSelectorRequirement) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		ensureAffinity(p).NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}},
		}}
	}
}

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func term(topologyKey string, matchLabels map[string]string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{TopologyKey: topologyKey, LabelSelector: &metav1.LabelSelector{MatchLabels: matchLabels}}
}

func podAffinity(terms ...corev1.PodAffinityTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		ensureAffinity(p).PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func podAntiAffinity(terms ...corev1.PodAffinityTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		ensureAffinity(p).PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func spread(key string, maxSkew int32, matchLabels map[string]string, mods ...func(*corev1.TopologySpreadConstraint)) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		c := corev1.TopologySpreadConstraint{MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: matchLabels}}
		for _, m := range mods {
			m(&c)
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	}
}

const zone = corev1.LabelTopologyZone

func nodes(ns ...corev1.Node) []corev1.Node { return ns }

func pods(ps ...corev1.Pod) []corev1.Pod { return ps }
