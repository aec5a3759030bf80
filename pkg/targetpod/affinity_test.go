package targetpod

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	obsolete     = corev1.NodeSelectorRequirement{Key: "node-labeller.kubevirt.io/obsolete-host-model", Operator: corev1.NodeSelectorOpDoesNotExist}
	noAVX        = corev1.NodeSelectorRequirement{Key: "cpu-feature.node.kubevirt.io/avx", Operator: corev1.NodeSelectorOpDoesNotExist}
	zoneA        = corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	zoneB        = corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}
	offTheSource = corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubevirt.io/created-by": "uid-1"}},
		TopologyKey:   "kubernetes.io/hostname",
	}
)

func terms(ts ...[]corev1.NodeSelectorRequirement) *corev1.NodeSelector {
	s := &corev1.NodeSelector{}
	for _, t := range ts {
		s.NodeSelectorTerms = append(s.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: t})
	}
	return s
}

func reqs(r ...corev1.NodeSelectorRequirement) []corev1.NodeSelectorRequirement { return r }

// TestAffinity checks rows 23-25, 27 and 28.
func TestAffinity(t *testing.T) {
	twoTerms := obj{"nodeAffinity": obj{"requiredDuringSchedulingIgnoredDuringExecution": obj{"nodeSelectorTerms": arr(
		obj{"matchExpressions": arr(obj{"key": "zone", "operator": "In", "values": arr("a")})},
		obj{"matchExpressions": arr(obj{"key": "zone", "operator": "In", "values": arr("b")})},
	)}}, "podAntiAffinity": obj{"requiredDuringSchedulingIgnoredDuringExecution": arr(obj{"topologyKey": "zone",
		"labelSelector": obj{"matchLabels": obj{"app": "db"}}})}}
	vmiTerm := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, TopologyKey: "zone"}
	tests := []struct {
		name      string
		edits     []any
		c         Cluster
		required  *corev1.NodeSelector
		preferred int
		podAnti   []corev1.PodAffinityTerm
	}{
		{name: "row 24: no model, a term of its own; row 28", required: terms(reqs(obsolete)), podAnti: []corev1.PodAffinityTerm{offTheSource}},
		{name: "row 24 opposite: a named model asks nothing of the node", edits: []any{"spec.domain.cpu.model", "Haswell"},
			podAnti: []corev1.PodAffinityTerm{offTheSource}},
		{name: "rows 23, 24, 25: the VMI's terms each gain both requirements; row 28 appended to the VMI's pod anti-affinity",
			edits:    []any{"spec.affinity", twoTerms, "spec.domain.cpu.features", arr(obj{"name": "avx", "policy": "forbid"})},
			required: terms(reqs(zoneA, obsolete, noAVX), reqs(zoneB, obsolete, noAVX)),
			podAnti:  []corev1.PodAffinityTerm{vmiTerm, offTheSource}},
		{name: "row 25 opposite: a required feature is not forbidden", edits: []any{"spec.domain.cpu.model", "Haswell",
			"spec.domain.cpu.features", arr(obj{"name": "avx", "policy": "require"})}, podAnti: []corev1.PodAffinityTerm{offTheSource}},
		{name: "row 27: v1.9 with the gate prefers the architecture", c: Cluster{FeatureGates: []string{"CrossArchitectureVirtualization"}},
			edits: []any{"spec.domain.cpu.model", "Haswell"}, preferred: 1, podAnti: []corev1.PodAffinityTerm{offTheSource}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, _ := render(t, vmiObj(t, tt.edits...), Source{}, tt.c)
			a := pod.Spec.Affinity
			var required *corev1.NodeSelector
			preferred := 0
			if a.NodeAffinity != nil {
				required = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
				preferred = len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
			}
			if !reflect.DeepEqual(required, tt.required) {
				t.Errorf("required node affinity %+v, want %+v", required, tt.required)
			}
			if preferred != tt.preferred {
				t.Errorf("%d preferred terms, want %d", preferred, tt.preferred)
			}
			if a.PodAntiAffinity == nil || !reflect.DeepEqual(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, tt.podAnti) {
				t.Errorf("pod anti-affinity %+v, want %+v", a.PodAntiAffinity, tt.podAnti)
			}
		})
	}
}

// TestAffinityLeavesTheVMIAlone: row 23 deep-copies.
func TestAffinityLeavesTheVMIAlone(t *testing.T) {
	u := vmiObj(t, "spec.affinity", obj{"nodeAffinity": obj{"requiredDuringSchedulingIgnoredDuringExecution": obj{"nodeSelectorTerms": arr(
		obj{"matchExpressions": arr(obj{"key": "zone", "operator": "In", "values": arr("a")})})}}})
	before := u.DeepCopy()
	render(t, u, Source{}, Cluster{})
	if !reflect.DeepEqual(u.Object, before.Object) {
		t.Error("Render changed the VMI")
	}
}
