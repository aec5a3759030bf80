package targetpod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// vmiObj is a VMI as the mutating webhook leaves it: amd64, 1 vCPU,
// 1Gi requested and as guest memory, no interfaces, running on node "src".
// Each edit is a dotted path (within the object) and a value.
func vmiObj(t *testing.T, edits ...any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"namespace": "ns", "name": "vm1", "uid": "uid-1", "labels": map[string]any{"app": "db"}},
		"spec": map[string]any{
			"architecture": "amd64",
			"domain": map[string]any{
				"cpu":       map[string]any{"sockets": int64(1), "cores": int64(1), "threads": int64(1)},
				"memory":    map[string]any{"guest": "1Gi"},
				"resources": map[string]any{"requests": map[string]any{"memory": "1Gi"}},
				"devices":   map[string]any{"autoattachPodInterface": false},
			},
		},
		"status": map[string]any{"nodeName": "src"},
	}}
	for i := 0; i+1 < len(edits); i += 2 {
		path := strings.Split(edits[i].(string), ".")
		if edits[i+1] == nil {
			unstructured.RemoveNestedField(u.Object, path...)
			continue
		}
		if err := unstructured.SetNestedField(u.Object, edits[i+1], path...); err != nil {
			t.Fatalf("edit %s: %v", edits[i], err)
		}
	}
	return u
}

// obj and arr shorten map and list literals of edits.
type obj = map[string]any

func arr(items ...any) []any { return items }

func node(labels ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "src", Labels: map[string]string{corev1.LabelHostname: "src"}}}
	for i := 0; i+1 < len(labels); i += 2 {
		n.Labels[labels[i]] = labels[i+1]
	}
	return n
}

func render(t *testing.T, u *unstructured.Unstructured, src Source, c Cluster) (*corev1.Pod, []string) {
	t.Helper()
	if src.Node == nil {
		src.Node = node()
	}
	pod, notes, err := Render(u, src, c)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return pod, notes
}

func compute(pod *corev1.Pod) corev1.ResourceRequirements {
	for _, c := range pod.Spec.Containers {
		if c.Name == ComputeContainer {
			return c.Resources
		}
	}
	return corev1.ResourceRequirements{}
}

// mi is n mebibytes in bytes.
func mi(n int64) int64 { return n << 20 }

func qty(s string) resource.Quantity { return resource.MustParse(s) }

type qtyT = resource.Quantity
