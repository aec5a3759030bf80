package testenv

import (
	"net/http"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func TestStandInVerdict(t *testing.T) {
	for _, c := range []struct {
		strategy   string
		migratable bool
		want       evictionVerdict
	}{
		{"LiveMigrate", true, evictEvacuate},
		{"LiveMigrateIfPossible", true, evictEvacuate},
		{"LiveMigrate", false, evictRefuse},
		{"LiveMigrateIfPossible", false, evictAllow},
		{"None", true, evictAllow},
		{"External", true, evictAllow},
		{"", true, evictAllow},
	} {
		if got := verdictFor(c.strategy, c.migratable); got != c.want {
			t.Errorf("verdictFor(%q, %v) = %v, want %v", c.strategy, c.migratable, got, c.want)
		}
	}
}

func TestStandInMigrationStateClearsEarlierFields(t *testing.T) {
	m := &standInMigration{uid: "u", source: "node-1", started: "2026-01-01T00:00:00Z"}
	st := migrationState(m, map[string]any{"failed": true, "failureReason": "no target node"})
	for field, want := range map[string]any{"sourceNode": "node-1", "targetNode": nil, "migrationUid": "u",
		"completed": nil, "endTimestamp": nil, "failed": true, "failureReason": "no target node"} {
		if got, ok := st[field]; !ok || got != want {
			t.Errorf("migrationState[%q] = %v (present %v), want %v", field, got, ok, want)
		}
	}
}

// standInFake is a KubeVirtStandIn on fake clients, without webhook server
// or goroutine: the test calls admit and sync itself.
func standInFake(t *testing.T, vmiAnnotations map[string]string) (*KubeVirtStandIn, *unstructured.Unstructured) {
	vmi := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "a", "namespace": "vms", "uid": "vmi-uid", "labels": map[string]any{vmiNodeLabel: "node-1"}},
		"spec":     map[string]any{"evictionStrategy": "LiveMigrate"},
		"status": map[string]any{"nodeName": "node-1", "phase": "Running",
			"conditions": []any{map[string]any{"type": "LiveMigratable", "status": "True"}}},
	}}
	vmi.SetAnnotations(vmiAnnotations)
	pod := launcherPod(vmi, "node-1")
	pod.Name = "virt-launcher-a-old"
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		VMIResource: "VirtualMachineInstanceList", VMIMResource: "VirtualMachineInstanceMigrationList"}, vmi)
	k := &KubeVirtStandIn{tb: t, o: KubeVirtStandInOptions{MigrationDelay: time.Second, RetryDelay: time.Second},
		client: fake.NewClientset(pod), dyn: dyn,
		active: map[types.UID]*standInMigration{}, retryAt: map[types.UID]time.Time{}, seq: map[string]int{}}
	return k, vmi
}

func (k *KubeVirtStandIn) getVMI(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	u, err := k.dyn.Resource(VMIResource).Namespace("vms").Get(t.Context(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestStandInEvictionEvacuatesAndMigrates(t *testing.T) {
	k, _ := standInFake(t, map[string]string{MigrationTargetAnnotation: "node-2"})
	resp := k.admit(t.Context(), &admissionv1.AdmissionRequest{Name: "virt-launcher-a-old", Namespace: "vms"})
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusTooManyRequests {
		t.Fatalf("admit = %+v, want a 429 denial", resp)
	}
	if evac, _, _ := unstructured.NestedString(k.getVMI(t).Object, "status", "evacuationNodeName"); evac != "node-1" {
		t.Fatalf("evacuationNodeName = %q, want node-1", evac)
	}
	t0 := time.Now()
	k.sync(t.Context(), t0)
	st, _, _ := unstructured.NestedMap(k.getVMI(t).Object, "status", "migrationState")
	if st["sourceNode"] != "node-1" || st["targetNode"] != "node-2" || st["completed"] != nil {
		t.Fatalf("migrationState after start = %v", st)
	}
	if _, err := k.dyn.Resource(VMIMResource).Namespace("vms").Get(t.Context(), "evacuation-a-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("VMIM: %v", err)
	}
	k.sync(t.Context(), t0.Add(2*time.Second))
	vmi := k.getVMI(t)
	st, _, _ = unstructured.NestedMap(vmi.Object, "status", "migrationState")
	node, _, _ := unstructured.NestedString(vmi.Object, "status", "nodeName")
	_, evacSet, _ := unstructured.NestedString(vmi.Object, "status", "evacuationNodeName")
	if st["completed"] != true || node != "node-2" || evacSet || vmi.GetLabels()[vmiNodeLabel] != "node-2" {
		t.Fatalf("VMI after completion: node %q, evacuation set %v, labels %v, migrationState %v", node, evacSet, vmi.GetLabels(), st)
	}
	pods, err := k.client.CoreV1().Pods("vms").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "node-2" || pods.Items[0].Annotations[domainAnnot] != "a" {
		t.Fatalf("launcher pods after completion: %+v", pods.Items)
	}
	want := []string{"evict vms/a: 429 evacuation", "migrate vms/a node-1->node-2 started", "migrate vms/a node-1->node-2 completed"}
	if got := k.Events(); !slices.Equal(got, want) {
		t.Errorf("Events() = %q, want %q", got, want)
	}
}

func TestStandInAbortWithEvacuationLeftRestarts(t *testing.T) {
	k, _ := standInFake(t, map[string]string{MigrationTargetAnnotation: "node-2"})
	k.admit(t.Context(), &admissionv1.AdmissionRequest{Name: "virt-launcher-a-old", Namespace: "vms"})
	t0 := time.Now()
	k.sync(t.Context(), t0)
	if err := k.dyn.Resource(VMIMResource).Namespace("vms").Delete(t.Context(), "evacuation-a-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	k.sync(t.Context(), t0.Add(100*time.Millisecond))
	st, _, _ := unstructured.NestedMap(k.getVMI(t).Object, "status", "migrationState")
	if st["failed"] != true || st["failureReason"] != "aborted: migration object deleted" {
		t.Fatalf("migrationState after abort = %v", st)
	}
	k.sync(t.Context(), t0.Add(500*time.Millisecond)) // within RetryDelay: nothing
	k.sync(t.Context(), t0.Add(1500*time.Millisecond))
	want := []string{"evict vms/a: 429 evacuation", "migrate vms/a node-1->node-2 started",
		"migrate vms/a node-1->node-2 aborted", "migrate vms/a node-1->node-2 started"}
	if got := k.Events(); !slices.Equal(got, want) {
		t.Errorf("Events() = %q, want %q", got, want)
	}
	if _, err := k.dyn.Resource(VMIMResource).Namespace("vms").Get(t.Context(), "evacuation-a-2", metav1.GetOptions{}); err != nil {
		t.Errorf("second VMIM: %v", err)
	}
}

func TestStandInNoTargetFails(t *testing.T) {
	k, _ := standInFake(t, nil)
	k.admit(t.Context(), &admissionv1.AdmissionRequest{Name: "virt-launcher-a-old", Namespace: "vms"})
	k.sync(t.Context(), time.Now())
	st, _, _ := unstructured.NestedMap(k.getVMI(t).Object, "status", "migrationState")
	if st["failed"] != true || st["failureReason"] != "no target node" {
		t.Fatalf("migrationState = %v", st)
	}
	want := []string{"evict vms/a: 429 evacuation", "migrate vms/a node-1-> started", "migrate vms/a node-1-> failed"}
	if got := k.Events(); !slices.Equal(got, want) {
		t.Errorf("Events() = %q, want %q", got, want)
	}
}

func TestStandInEvictionOfOtherPodsAllowed(t *testing.T) {
	k, _ := standInFake(t, nil)
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "vms"}}
	if _, err := k.client.CoreV1().Pods("vms").Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "missing"} {
		if resp := k.admit(t.Context(), &admissionv1.AdmissionRequest{Name: name, Namespace: "vms"}); !resp.Allowed {
			t.Errorf("eviction of %s: %+v, want allowed", name, resp)
		}
	}
}
