package vmdrain

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/placement"
)

// node is a Node that a VM's launcher pod could run on: schedulable for
// KubeVirt, 16 CPUs, 8Gi of memory and KubeVirt's device plugins, with
// labels ("key" means key=true) and taints.
func node(name string, cordoned bool, taints []corev1.Taint, labels ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubevirt.io/schedulable": "true", corev1.LabelHostname: name}},
		Spec: corev1.NodeSpec{Unschedulable: cordoned, Taints: taints}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		"devices.kubevirt.io/kvm": resource.MustParse("1k"), "devices.kubevirt.io/tun": resource.MustParse("1k"),
		"devices.kubevirt.io/vhost-net": resource.MustParse("1k")}
	n.Status.Capacity = n.Status.Allocatable.DeepCopy()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			v = "true"
		}
		n.Labels[k] = v
	}
	return n
}

// The cluster: node-1 drains (host model EPYC-Genoa, which requires ibpb);
// node-2 takes Genoa host-model guests; node-3 takes Milan ones; node-4 is
// cordoned, node-5 not Ready (the node lifecycle controller's taint),
// node-6 tainted.
func cluster() (*corev1.Node, []corev1.Node) {
	all := []string{"cpu-model-migration.node.kubevirt.io/EPYC-Genoa", "cpu-feature.node.kubevirt.io/ibpb", "cpu-model.node.kubevirt.io/Skylake-Server"}
	nodes := []corev1.Node{
		node("node-1", false, nil,
			"host-model-cpu.node.kubevirt.io/EPYC-Genoa", "host-model-required-features.node.kubevirt.io/ibpb",
			"cpu-model.node.kubevirt.io/EPYC-Genoa", "cpu-model.node.kubevirt.io/Skylake-Server"),
		node("node-2", false, nil, append(slices.Clone(all), "zone=a")...),
		node("node-3", false, nil, "cpu-model-migration.node.kubevirt.io/EPYC-Milan", "cpu-model.node.kubevirt.io/Skylake-Server", "zone=b"),
		node("node-4", true, nil, all...),
		node("node-5", false, []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}, all...),
		node("node-6", false, []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}, all...),
	}
	return &nodes[0], nodes
}

// testVM is a running VMI on node-1 with spec's fields over a LiveMigrate
// strategy and a 1Gi guest; migratable.
func testVM(name string, spec map[string]any) VM {
	s := map[string]any{"evictionStrategy": StrategyLiveMigrate,
		"domain": map[string]any{"resources": map[string]any{"requests": map[string]any{"memory": "1Gi"}}}}
	for k, v := range spec {
		s[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name, "namespace": "vms", "uid": "uid-" + name, "labels": map[string]any{NodeNameLabel: "node-1"}},
		"spec":     s,
		"status": map[string]any{"nodeName": "node-1", "phase": "Running",
			"conditions": []any{map[string]any{"type": "LiveMigratable", "status": "True"}}},
	}}
	v, err := FromUnstructured(u)
	if err != nil {
		panic(err)
	}
	return v
}

func domain(cpu map[string]any, memory string) map[string]any {
	return map[string]any{"domain": map[string]any{"cpu": cpu, "resources": map[string]any{"requests": map[string]any{"memory": memory}}}}
}

func model(m string) map[string]any { return domain(map[string]any{"model": m}, "1Gi") }

func rejectedBy(p VMPlan, n string) placement.Plugin {
	for _, r := range p.Placement.Rejected {
		if r.Node == n {
			return r.Plugin
		}
	}
	return ""
}

func TestPlan(t *testing.T) {
	source, nodes := cluster()
	for _, c := range []struct {
		name     string
		vm       VM
		d        Defaults
		way      Way
		targets  []string
		why      string
		rejected map[string]placement.Plugin
	}{
		{name: "named model offered elsewhere", vm: testVM("a", model("Skylake-Server")), way: Migrate, targets: []string{"node-2", "node-3"},
			why: "planned to node-2", rejected: map[string]placement.Plugin{"node-4": placement.NodeUnschedulable, "node-5": placement.TaintToleration, "node-6": placement.TaintToleration}},
		{name: "named model no other node offers", vm: testVM("b", model("EPYC-Genoa")), way: NoTarget,
			why: "no other node passes kube-scheduler's filters", rejected: map[string]placement.Plugin{"node-2": placement.NodeAffinity, "node-3": placement.NodeAffinity}},
		{name: "host-model by default: the source's host model and required features", vm: testVM("c", nil), way: Migrate, targets: []string{"node-2"},
			rejected: map[string]placement.Plugin{"node-3": placement.NodeAffinity}},
		{name: "host-passthrough: every open node", vm: testVM("f", model(HostPassthrough)), way: Migrate, targets: []string{"node-2", "node-3"}},
		{name: "a required feature", vm: testVM("g", domain(map[string]any{"model": "Skylake-Server", "features": []any{map[string]any{"name": "ibpb"}}}, "1Gi")),
			way: Migrate, targets: []string{"node-2"}},
		{name: "a forced feature needs no label", vm: testVM("g2", domain(map[string]any{"model": "Skylake-Server", "features": []any{map[string]any{"name": "ibpb", "policy": "force"}}}, "1Gi")),
			way: Migrate, targets: []string{"node-2", "node-3"}},
		{name: "a forbidden feature must be absent", vm: testVM("g3", domain(map[string]any{"model": "Skylake-Server", "features": []any{map[string]any{"name": "ibpb", "policy": "forbid"}}}, "1Gi")),
			way: Migrate, targets: []string{"node-3"}},
		{name: "nodeSelector", vm: testVM("h", map[string]any{"domain": model("Skylake-Server")["domain"], "nodeSelector": map[string]any{"zone": "b"}}),
			way: Migrate, targets: []string{"node-3"}},
		{name: "a tolerated taint", vm: testVM("i", map[string]any{"domain": model("Skylake-Server")["domain"],
			"tolerations": []any{map[string]any{"key": "gpu", "operator": "Exists"}}}), way: Migrate, targets: []string{"node-2", "node-3", "node-6"}},
		{name: "more memory than any node has", vm: testVM("big", domain(map[string]any{"model": "Skylake-Server"}, "16Gi")), way: NoTarget,
			why: "NodeResourcesFit", rejected: map[string]placement.Plugin{"node-2": placement.NodeResourcesFit, "node-3": placement.NodeResourcesFit}},
		{name: "its own scheduler", vm: testVM("sch", map[string]any{"domain": model("Skylake-Server")["domain"], "schedulerName": "other"}), way: Migrate,
			why: `scheduled by "other"`},
		{name: "strategy None: stopped", vm: testVM("k", map[string]any{"evictionStrategy": StrategyNone}), way: Stopped, why: "evictionStrategy None"},
		{name: "no strategy, none in the CR: None", vm: func() VM { v := testVM("l", nil); v.Strategy = ""; return v }(), way: Stopped},
		{name: "no strategy, the CR's LiveMigrate", vm: func() VM { v := testVM("m", nil); v.Strategy = ""; return v }(), d: Defaults{Strategy: StrategyLiveMigrate},
			way: Migrate, targets: []string{"node-2"}},
		{name: "the CR's CPU model", vm: testVM("n", nil), d: Defaults{CPUModel: "Skylake-Server"}, way: Migrate, targets: []string{"node-2", "node-3"}},
		{name: "LiveMigrate, not migratable", vm: VM{Namespace: "vms", Name: "o", Strategy: StrategyLiveMigrate, NotMigratable: "DisksNotLiveMigratable: PVC rwo is not shared"},
			way: CannotMigrate, why: "not live-migratable (DisksNotLiveMigratable: PVC rwo is not shared): LiveMigrate refuses its eviction"},
		{name: "LiveMigrateIfPossible, not migratable: stopped", vm: VM{Namespace: "vms", Name: "p", Strategy: StrategyLiveMigrateIfPossible, NotMigratable: "x"},
			way: Stopped, why: "LiveMigrateIfPossible stops it"},
		{name: "host devices", vm: func() VM { v := testVM("q", nil); v.HostDevices = true; return v }(), way: CannotMigrate, why: "host devices"},
		{name: "External", vm: testVM("r", map[string]any{"evictionStrategy": StrategyExternal}), way: External},
		{name: "not read whole", vm: VM{Namespace: "vms", Name: "s", Strategy: StrategyLiveMigrate, Migratable: true}, way: NoTarget, why: "not read whole"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Plan([]VM{c.vm}, source, View{Nodes: nodes}, c.d)
			if len(got) != 1 {
				t.Fatalf("plans %d", len(got))
			}
			p := got[0]
			if p.Way != c.way || !slices.Equal(p.Targets, c.targets) || !strings.Contains(p.Why, c.why) {
				t.Errorf("way %s, targets %v, why %q; want %s, %v, containing %q", p.Way, p.Targets, p.Why, c.way, c.targets, c.why)
			}
			for n, want := range c.rejected {
				if got := rejectedBy(p, n); got != want {
					t.Errorf("%s rejected by %q, want %q (%+v)", n, got, want, p.Placement.Rejected)
				}
			}
			if held := p.Way.Held(); held != (c.way == NoTarget || c.way == CannotMigrate || c.way == Stopped) {
				t.Errorf("Held = %v for %s", held, p.Way)
			}
		})
	}
}

// Two VMs that each fit alone on the one node that takes them, with room
// for one: the first is planned there, the second has no target, and says
// that node lacks the memory. Their launcher pods, on node-1, keep the
// targets off node-1 by KubeVirt's anti-affinity.
func TestPlanCountsEachVMWhereItGoes(t *testing.T) {
	source, nodes := cluster()
	a, b := testVM("a", domain(map[string]any{}, "5Gi")), testVM("b", domain(map[string]any{}, "5Gi"))
	c := testVM("c", model(HostPassthrough))
	var pods []corev1.Pod
	for _, v := range []VM{a, b, c} {
		pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-" + v.Name, Namespace: "vms",
			Labels: map[string]string{kubevirtlabels.CreatedByLabel: v.UID}}, Spec: corev1.PodSpec{NodeName: "node-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	vms := []VM{b, c, a}
	AttachLaunchers(vms, pods)
	if vms[0].Launcher == nil || vms[0].Launcher.Name != "virt-launcher-b" {
		t.Fatalf("launcher of b: %v", vms[0].Launcher)
	}
	got := Plan(vms, source, View{Nodes: nodes, Pods: pods}, Defaults{})
	for _, p := range got {
		t.Logf("%s: %s %v: %s", p.VM.Key(), p.Way, p.Targets, p.Why)
	}
	if got[0].VM.Name != "a" || got[0].Way != Migrate || got[0].PlannedTo != "node-2" {
		t.Errorf("vms/a: %s to %q, want migrate to node-2", got[0].Way, got[0].PlannedTo)
	}
	if got[1].Way != NoTarget || rejectedBy(got[1], "node-2") != placement.NodeResourcesFit || !strings.Contains(got[1].Why, "node-2: NodeResourcesFit") {
		t.Errorf("vms/b: %s, rejected %+v: want no target, node-2 by NodeResourcesFit", got[1].Way, got[1].Placement.Rejected)
	}
	// host-passthrough: node-1 passes every filter but the anti-affinity.
	if rejectedBy(got[2], "node-1") != placement.InterPodAffinity {
		t.Errorf("node-1 rejected by %q, want InterPodAffinity (KubeVirt's anti-affinity on its launcher pod)", rejectedBy(got[2], "node-1"))
	}
	if strings.Contains(fmt.Sprint(got[2].Notes), "launcher pod was not found") {
		t.Errorf("notes %v: the launcher pod was given", got[2].Notes)
	}
}
