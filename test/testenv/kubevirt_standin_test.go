package testenv

import (
	"slices"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// standInCRDs are minimal VMI and VMIM CRDs: KubeVirt's group, names and
// scope, a status subresource, and any fields.
const standInCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: virtualmachineinstances.kubevirt.io}
spec:
  group: kubevirt.io
  names: {kind: VirtualMachineInstance, listKind: VirtualMachineInstanceList, plural: virtualmachineinstances, singular: virtualmachineinstance}
  scope: Namespaced
  versions:
    - {name: v1, served: true, storage: true, subresources: {status: {}}, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: virtualmachineinstancemigrations.kubevirt.io}
spec:
  group: kubevirt.io
  names: {kind: VirtualMachineInstanceMigration, listKind: VirtualMachineInstanceMigrationList, plural: virtualmachineinstancemigrations, singular: virtualmachineinstancemigration}
  scope: Namespaced
  versions:
    - {name: v1, served: true, storage: true, subresources: {status: {}}, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`

// TestKubeVirtStandIn evicts a live-migratable VM's launcher pod through the
// Eviction API: the stand-in's webhook refuses it with 429 and the VM moves
// to the node its annotation names; a VM that cannot migrate is refused too.
func TestKubeVirtStandIn(t *testing.T) {
	env := StartForTest(t, DefaultOptions())
	ctx, c := t.Context(), env.Client()
	dyn, err := dynamic.NewForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, doc := range strings.Split(standInCRDs, "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := crds.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.AddNodes(ctx, []string{"node-1", "node-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.CreateNamespace(ctx, "vms"); err != nil {
		t.Fatal(err)
	}
	kv := StartKubeVirtStandIn(t, env, KubeVirtStandInOptions{MigrationDelay: 500 * time.Millisecond})
	kv.CreateVM(ctx, t, "vms", "a", "node-1", map[string]any{"evictionStrategy": "LiveMigrate"}, true,
		map[string]string{MigrationTargetAnnotation: "node-2"})
	kv.CreateVM(ctx, t, "vms", "pinned", "node-1", map[string]any{"evictionStrategy": "LiveMigrate"}, false, nil)
	WaitRunningOn(ctx, t, c, "vms", "node-1", 2)

	pods, err := PodsOn(ctx, c, "vms", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		err := c.PolicyV1().Evictions("vms").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "vms"}})
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("eviction of %s (VMI %s): %v, want 429", p.Name, p.Annotations["kubevirt.io/domain"], err)
		}
		t.Logf("eviction of %s: %v", p.Name, err)
	}

	vmis := dyn.Resource(VMIResource).Namespace("vms")
	WaitFor(t, time.Minute, "VMI vms/a migrated to node-2", func() (bool, error) {
		u, err := vmis.Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node, _, _ := unstructured.NestedString(u.Object, "status", "nodeName")
		done, _, _ := unstructured.NestedBool(u.Object, "status", "migrationState", "completed")
		return node == "node-2" && done && u.GetLabels()["kubevirt.io/nodeName"] == "node-2", nil
	})
	WaitRunningOn(ctx, t, c, "vms", "node-2", 1)
	WaitRunningOn(ctx, t, c, "vms", "node-1", 1) // pinned stays
	u, err := vmis.Get(ctx, "pinned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if evac, _, _ := unstructured.NestedString(u.Object, "status", "evacuationNodeName"); evac != "" {
		t.Errorf("pinned: evacuationNodeName %q, want none", evac)
	}
	want := []string{"evict vms/pinned: 429 not migratable", "evict vms/a: 429 evacuation",
		"migrate vms/a node-1->node-2 started", "migrate vms/a node-1->node-2 completed"}
	got := kv.Events()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("events %q lack %q", got, w)
		}
	}
}
