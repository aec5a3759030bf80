package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FreeMemory counts the bound pods' requests and the pods Assume adds (a
// limit standing in for an unset request, as the apiserver would have
// defaulted it); a node outside the snapshot is false.
func TestFreeMemory(t *testing.T) {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("10")}
	pod := func(name, node string, limit string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}}}}}}
	}
	a := pod("a", "n", "1Gi")
	a.Spec.Containers[0].Resources.Requests = a.Spec.Containers[0].Resources.Limits
	s := NewSnapshot([]corev1.Node{n}, []corev1.Pod{a}, nil, nil)
	if free, ok := s.FreeMemory("n"); !ok || free != 7<<30 {
		t.Errorf("free %d, %v; want 7Gi", free, ok)
	}
	b := pod("b", "", "2Gi")
	s.Assume(&b, "n")
	if free, _ := s.FreeMemory("n"); free != 5<<30 {
		t.Errorf("after Assume: free %d, want 5Gi", free)
	}
	if _, ok := s.FreeMemory("other"); ok {
		t.Error("a node outside the snapshot has free memory")
	}
}
