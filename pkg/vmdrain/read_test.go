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

// heldVMI is a VMI on node whose strategy alone decides its way
// (evictionStrategy None: the drain stops it).
func heldVMI(name, node string) *unstructured.Unstructured {
	u := vmiObject(name, node)
	if err := unstructured.SetNestedField(u.Object, "None", "spec", "evictionStrategy"); err != nil {
		panic(err)
	}
	return u
}

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
		// podsLists: the pods are read only for a plan that places a VM.
		podsLists int
	}{
		{name: "VMIs not served", served: false},
		{name: "no VM on the node", served: true, vmis: []runtime.Object{vmiObject("elsewhere", "node-2")}},
		{name: "a VM on the node", served: true, vmis: []runtime.Object{vmiObject("db", "node-1"), vmiObject("elsewhere", "node-2")}, plans: 1, nodesLists: 1, podsLists: 1},
		{name: "only a VM that its strategy stops", served: true, vmis: []runtime.Object{heldVMI("db", "node-1")}, plans: 1},
		{name: "a VM stopped and one that migrates", served: true, vmis: []runtime.Object{heldVMI("db", "node-1"), vmiObject("web", "node-1")}, plans: 2, nodesLists: 1, podsLists: 1},
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
			lists, podLists := 0, 0
			for _, a := range cs.Actions() {
				if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
					lists++
				}
				if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
					podLists++
				}
			}
			if r.Served != c.served || len(r.Plans) != c.plans || lists != c.nodesLists || podLists != c.podsLists {
				t.Errorf("served %v, %d plans, %d lists of Nodes, %d of pods; want %v, %d, %d, %d",
					r.Served, len(r.Plans), lists, podLists, c.served, c.plans, c.nodesLists, c.podsLists)
			}
			for _, p := range r.Plans {
				if p.Strategy == StrategyNone {
					if p.Way != Stopped {
						t.Errorf("plan of %s: %s; want Stopped by its strategy", p.VM.Key(), p.Way)
					}
				} else if p.Way != Migrate || len(p.Targets) != 2 {
					t.Errorf("plan of %s: %s to %v; want a migration to node-2 and node-3", p.VM.Key(), p.Way, p.Targets)
				}
			}
		})
	}
}
