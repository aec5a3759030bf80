package targetpod

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// affinity is section 2, in KubeVirt's order: the VMI's affinity (row 23),
// the absent-label requirements (rows 24, 25), the preferred architecture
// (row 27), then the migration's pod anti-affinity (row 28).
func (r *renderer) affinity(pod *corev1.Pod) *corev1.Affinity {
	v := r.v
	var a *corev1.Affinity
	if v.Spec.Affinity != nil {
		a = v.Spec.Affinity.DeepCopy() // row 23
	}
	// Row 24: host-model, or no model at all, keeps off nodes whose host
	// model is obsolete.
	if m := v.model(); m == "" || m == hostModel {
		a = rejectLabel(a, kubevirtlabels.ObsoleteHostModelLabel)
	}
	// Row 25: each forbidden feature must be absent.
	for _, f := range v.cpuFeatures() {
		if f.Policy == "forbid" {
			a = rejectLabel(a, kubevirtlabels.CPUFeatureLabelPrefix+f.Name)
		}
	}
	// Row 26 (v1.9.0): persistent reservations need the PVCs' UIDs, which
	// are not among Render's inputs.
	if r.rel.atLeast(9, 0) && r.hasReservation() {
		r.note("a LUN disk with a persistent reservation: the pr.kubevirt.io/<PVC UID> label and its pod anti-affinity (row 26) are not rendered")
	}
	// Row 27 (v1.9.0, cross-architecture gate): prefer nodes of the VMI's
	// architecture. Scoring only.
	if r.rel.atLeast(9, 0) && r.gate(crossArchGate) && v.Spec.Architecture != "" {
		a = preferArch(a, strings.ToLower(v.Spec.Architecture))
	}
	return keepOffSource(a, v.Metadata.UID) // row 28
}

// rejectLabel is modifyNodeAffintyToRejectLabel: a DoesNotExist
// requirement on key joins every required node-selector term (they are
// ORed, so each must carry it); with no required terms it becomes the one
// term.
func rejectLabel(a *corev1.Affinity, key string) *corev1.Affinity {
	req := corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpDoesNotExist}
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := a.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{req}}},
		}
		return a
	}
	// An existing but empty list of terms stays empty, as in KubeVirt
	// (such an affinity is refused by the apiserver anyway).
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, req)
	}
	return a
}

// preferArch is row 27: a weight-100 preferred term for the architecture.
func preferArch(a *corev1.Affinity, arch string) *corev1.Affinity {
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{arch}},
		}}})
	return a
}

// keepOffSource is row 28: a required pod anti-affinity term against any
// pod created by the same VMI, by hostname label, appended to the VMI's own.
func keepOffSource(a *corev1.Affinity, uid string) *corev1.Affinity {
	term := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{kubevirtlabels.CreatedByLabel: uid}},
		TopologyKey:   corev1.LabelHostname,
	}
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, term)
	return a
}
