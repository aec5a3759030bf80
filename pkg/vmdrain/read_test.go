package vmdrain

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

func vmiObject(name, node string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name, "namespace": "vms", "labels": map[string]any{NodeNameLabel: node}},
		"spec":     map[string]any{"evictionStrategy": "LiveMigrate", "domain": map[string]any{"cpu": map[string]any{"model": "Skylake-Server"}}},
		"status": map[string]any{"nodeName": node, "phase": "Running",
			"conditions": []any{map[string]any{"type": "LiveMigratable", "status": "True"}}},
	}}
}

// Read plans the VMs on the node from the VMIs, the Nodes and the KubeVirt
// CR; on a node without VMs it stops at the list of VMIs, so that a
// reboot's blocker check of such a node costs one list and one discovery.
func TestRead(t *testing.T) {
	_, nodes := cluster()
	for _, c := range []struct {
		name       string
		served     bool
		vmis       []runtime.Object
		plans      int
		nodesLists int
	}{
		{name: "VMIs not served", served: false},
		{name: "no VM on the node", served: true, vmis: []runtime.Object{vmiObject("elsewhere", "node-2")}},
		{name: "a VM on the node", served: true, vmis: []runtime.Object{vmiObject("db", "node-1"), vmiObject("elsewhere", "node-2")}, plans: 1, nodesLists: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := make([]runtime.Object, len(nodes))
			for i := range nodes {
				objs[i] = &nodes[i]
			}
			cs := k8sfake.NewClientset(objs...)
			if c.served {
				cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
					GroupVersion: GVR.GroupVersion().String(), APIResources: []metav1.APIResource{{Name: GVR.Resource, Namespaced: true, Kind: "VirtualMachineInstance"}}}}
			}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{GVR: "VirtualMachineInstanceList"}, c.vmis...)
			r, err := Read(context.Background(), kubetest.Wrap(cs), dyn, "node-1", nil)
			if err != nil {
				t.Fatal(err)
			}
			lists := 0
			for _, a := range cs.Actions() {
				if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
					lists++
				}
			}
			if r.Served != c.served || len(r.Plans) != c.plans || lists != c.nodesLists {
				t.Errorf("served %v, %d plans, %d lists of Nodes; want %v, %d, %d", r.Served, len(r.Plans), lists, c.served, c.plans, c.nodesLists)
			}
			if c.plans > 0 && (r.Plans[0].Way != Migrate || len(r.Plans[0].Targets) != 2) {
				t.Errorf("plan %+v; want a migration to node-2 and node-3", r.Plans[0])
			}
		})
	}
}
