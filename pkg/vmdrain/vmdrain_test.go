package vmdrain

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func node(name string, ready, cordoned bool, taints []corev1.Taint, labels ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Spec: corev1.NodeSpec{Unschedulable: cordoned, Taints: taints}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
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
// cordoned, node-5 not Ready, node-6 tainted.
func cluster() (*corev1.Node, []corev1.Node) {
	source := node("node-1", true, false, nil,
		"host-model-cpu.node.kubevirt.io/EPYC-Genoa", "host-model-required-features.node.kubevirt.io/ibpb",
		"cpu-model.node.kubevirt.io/EPYC-Genoa", "cpu-model.node.kubevirt.io/Skylake-Server")
	nodes := []corev1.Node{
		source,
		node("node-2", true, false, nil, "cpu-model-migration.node.kubevirt.io/EPYC-Genoa", "cpu-feature.node.kubevirt.io/ibpb",
			"cpu-model.node.kubevirt.io/Skylake-Server", "zone=a"),
		node("node-3", true, false, nil, "cpu-model-migration.node.kubevirt.io/EPYC-Milan", "cpu-model.node.kubevirt.io/Skylake-Server", "zone=b"),
		node("node-4", true, true, nil, "cpu-model-migration.node.kubevirt.io/EPYC-Genoa", "cpu-feature.node.kubevirt.io/ibpb", "cpu-model.node.kubevirt.io/Skylake-Server"),
		node("node-5", false, false, nil, "cpu-model-migration.node.kubevirt.io/EPYC-Genoa", "cpu-feature.node.kubevirt.io/ibpb", "cpu-model.node.kubevirt.io/Skylake-Server"),
		node("node-6", true, false, []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}},
			"cpu-model-migration.node.kubevirt.io/EPYC-Genoa", "cpu-feature.node.kubevirt.io/ibpb", "cpu-model.node.kubevirt.io/Skylake-Server"),
	}
	return &nodes[0], nodes
}

func expr(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func withAffinity(v VM, terms ...corev1.NodeSelectorTerm) VM {
	v.RequiredAffinity = &corev1.NodeSelector{NodeSelectorTerms: terms}
	return v
}

func migratable(v VM) VM { v.Migratable = true; v.NotMigratable = ""; return v }

func TestPlan(t *testing.T) {
	source, nodes := cluster()
	live := func(name, model string) VM {
		return migratable(VM{Namespace: "vms", Name: name, Node: "node-1", Strategy: StrategyLiveMigrate, CPUModel: model})
	}
	for _, c := range []struct {
		name    string
		vm      VM
		d       Defaults
		nodes   []corev1.Node
		way     Way
		targets []string
		why     string
	}{
		{name: "named model offered elsewhere", vm: live("a", "Skylake-Server"), way: Migrate, targets: []string{"node-2", "node-3"},
			why: "nodes with cpu-model.node.kubevirt.io/Skylake-Server=true"},
		{name: "named model no other node offers", vm: live("b", "EPYC-Genoa"), way: NoTarget,
			why: "no other schedulable node has cpu-model.node.kubevirt.io/EPYC-Genoa=true"},
		{name: "host-model by default: the source's host model and required features", vm: live("c", ""), way: Migrate, targets: []string{"node-2"},
			why: "nodes with cpu-feature.node.kubevirt.io/ibpb=true, cpu-model-migration.node.kubevirt.io/EPYC-Genoa=true"},
		{name: "host-model, no node with the required feature", vm: live("d", HostModel), way: NoTarget,
			nodes: []corev1.Node{nodes[0], node("node-2", true, false, nil, "cpu-model-migration.node.kubevirt.io/EPYC-Genoa")},
			why:   "no other schedulable node has cpu-feature.node.kubevirt.io/ibpb=true"},
		{name: "host-model, the source's host model unknown", vm: live("e", HostModel), way: NoTarget,
			nodes: []corev1.Node{node("node-1", true, false, nil), nodes[1]}, why: "has no host-model-cpu.node.kubevirt.io/ label"},
		{name: "host-passthrough: any open node", vm: live("f", HostPassthrough), way: Migrate, targets: []string{"node-2", "node-3"}},
		{name: "a required feature", vm: func() VM { v := live("g", "Skylake-Server"); v.Features = []string{"ibpb"}; return v }(), way: Migrate, targets: []string{"node-2"}},
		{name: "nodeSelector", vm: func() VM { v := live("h", "Skylake-Server"); v.NodeSelector = map[string]string{"zone": "b"}; return v }(), way: Migrate, targets: []string{"node-3"}},
		{name: "a tolerated taint", vm: func() VM {
			v := live("i", "Skylake-Server")
			v.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
			return v
		}(), way: Migrate, targets: []string{"node-2", "node-3", "node-6"}},
		{name: "no open node at all", vm: live("j", HostPassthrough), nodes: []corev1.Node{nodes[0], nodes[3], nodes[4]}, way: NoTarget,
			why: "no other node is Ready, schedulable and free of taints it does not tolerate"},
		{name: "strategy None: stopped", vm: func() VM { v := live("k", ""); v.Strategy = StrategyNone; return v }(), way: Stopped, why: "evictionStrategy None"},
		{name: "no strategy, none in the CR: None", vm: func() VM { v := live("l", ""); v.Strategy = ""; return v }(), way: Stopped},
		{name: "no strategy, the CR's LiveMigrate", vm: func() VM { v := live("m", ""); v.Strategy = ""; return v }(), d: Defaults{Strategy: StrategyLiveMigrate}, way: Migrate, targets: []string{"node-2"}},
		{name: "the CR's CPU model", vm: live("n", ""), d: Defaults{CPUModel: "Skylake-Server"}, way: Migrate, targets: []string{"node-2", "node-3"}},
		{name: "LiveMigrate, not migratable", vm: VM{Namespace: "vms", Name: "o", Strategy: StrategyLiveMigrate, NotMigratable: "DisksNotLiveMigratable: PVC rwo is not shared"},
			way: CannotMigrate, why: "not live-migratable (DisksNotLiveMigratable: PVC rwo is not shared): LiveMigrate refuses its eviction"},
		{name: "LiveMigrateIfPossible, not migratable: stopped", vm: VM{Namespace: "vms", Name: "p", Strategy: StrategyLiveMigrateIfPossible, NotMigratable: "x"},
			way: Stopped, why: "LiveMigrateIfPossible stops it"},
		{name: "host devices", vm: func() VM { v := live("q", ""); v.HostDevices = true; return v }(), way: CannotMigrate, why: "host devices"},
		{name: "External", vm: func() VM { v := live("r", ""); v.Strategy = StrategyExternal; return v }(), way: External},
		{name: "required affinity narrows the targets", vm: withAffinity(live("s", "Skylake-Server"), expr("zone", corev1.NodeSelectorOpIn, "b")),
			way: Migrate, targets: []string{"node-3"}, why: "matching its required node affinity"},
		{name: "required affinity terms are ORed", vm: withAffinity(live("s", "Skylake-Server"), expr("zone", corev1.NodeSelectorOpIn, "b"), expr("zone", corev1.NodeSelectorOpIn, "a")),
			way: Migrate, targets: []string{"node-2", "node-3"}},
		{name: "required affinity by node name", vm: withAffinity(live("s", ""), corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-2"}}}}),
			way: Migrate, targets: []string{"node-2"}},
		{name: "required affinity that no open node matches", vm: withAffinity(live("s", "Skylake-Server"), expr("zone", corev1.NodeSelectorOpNotIn, "a", "b")),
			way: NoTarget, why: "no other schedulable node matches its required node affinity"},
		{name: "required affinity that only a cordoned node matches", vm: withAffinity(live("s", ""), corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-4"}}}}),
			way: NoTarget, why: "no other schedulable node matches its required node affinity"},
		{name: "required affinity that cannot be parsed", vm: withAffinity(live("s", ""), expr("zone", "Near", "a")),
			way: NoTarget, why: "its required node affinity matches no node: "},
		{name: "required affinity narrows before the labels are named", vm: withAffinity(live("s", "EPYC-Genoa"), expr("zone", corev1.NodeSelectorOpIn, "a")),
			way: NoTarget, why: "no other schedulable node has cpu-model.node.kubevirt.io/EPYC-Genoa=true"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := c.nodes
			if ns == nil {
				ns = nodes
			}
			src := &ns[0]
			if c.nodes == nil {
				src = source
			}
			got := Plan([]VM{c.vm}, src, ns, c.d)
			if len(got) != 1 {
				t.Fatalf("plans %d", len(got))
			}
			p := got[0]
			if p.Way != c.way || !slices.Equal(p.Targets, c.targets) || !strings.Contains(p.Why, c.why) {
				t.Errorf("way %s, targets %v, why %q; want %s, %v, containing %q", p.Way, p.Targets, p.Why, c.way, c.targets, c.why)
			}
			if held := p.Way.Held(); held != (c.way == NoTarget || c.way == CannotMigrate || c.way == Stopped) {
				t.Errorf("Held = %v for %s", held, p.Way)
			}
		})
	}
}

// A VirtualMachineInstance as KubeVirt's API writes it, read into a VM.
func TestFromUnstructured(t *testing.T) {
	const doc = `{
 "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
 "metadata": {"name": "db", "namespace": "vms", "labels": {"kubevirt.io/nodeName": "node-1"}},
 "spec": {
  "evictionStrategy": "LiveMigrate",
  "nodeSelector": {"zone": "a"},
  "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "x", "operator": "Exists"}]}]}}},
  "domain": {
   "cpu": {"model": "Skylake-Server", "features": [{"name": "ibpb"}, {"name": "avx512f", "policy": "require"}, {"name": "pcid", "policy": "disable"}, {"name": "ssbd", "policy": "force"}]},
   "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
   "resources": {"requests": {"memory": "1Gi"}}
  }
 },
 "status": {
  "nodeName": "node-1", "phase": "Running", "evacuationNodeName": "node-1",
  "conditions": [{"type": "Ready", "status": "True"}, {"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable", "message": "cannot migrate VMI: PVC root is not shared"}],
  "migrationState": {"sourceNode": "node-1", "targetNode": "node-2", "startTimestamp": "2026-11-26T10:00:00Z", "completed": false, "migrationUid": "u1"}
 }
}`
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	v, err := FromUnstructured(&unstructured.Unstructured{Object: m})
	if err != nil {
		t.Fatal(err)
	}
	if v.Key() != "vms/db" || v.Node != "node-1" || v.Strategy != StrategyLiveMigrate || v.CPUModel != "Skylake-Server" ||
		!slices.Equal(v.Features, []string{"avx512f", "ibpb", "ssbd"}) || v.NodeSelector["zone"] != "a" || len(v.Tolerations) != 1 ||
		v.RequiredAffinity == nil || len(v.RequiredAffinity.NodeSelectorTerms) != 1 || v.RequiredAffinity.NodeSelectorTerms[0].MatchExpressions[0].Key != "x" || v.HostDevices || v.Phase != "Running" || v.EvacuationNode != "node-1" {
		t.Errorf("read %+v", v)
	}
	if v.Migratable || v.NotMigratable != "DisksNotLiveMigratable: cannot migrate VMI: PVC root is not shared" {
		t.Errorf("migratable %v (%q)", v.Migratable, v.NotMigratable)
	}
	if v.Migration == nil || v.Migration.TargetNode != "node-2" || v.Migration.Completed {
		t.Errorf("migration %+v", v.Migration)
	}

	m["spec"].(map[string]any)["evictionStrategy"] = 7
	if _, err := FromUnstructured(&unstructured.Unstructured{Object: m}); err == nil || !strings.Contains(err.Error(), "vms/db") {
		t.Errorf("a strategy of the wrong type: %v, want an error naming the VMI", err)
	}
}

func TestTracker(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	now := t0
	var onNode []VM
	tr := &Tracker{
		List: func(context.Context) ([]VM, error) { return onNode, nil },
		Planned: map[string]VMPlan{
			"vms/a": {Way: Migrate, Targets: []string{"node-2"}},
			"vms/b": {Way: Stopped, Why: "evictionStrategy None: the drain stops it"},
			"vms/c": {Way: Migrate, Why: "nodes with x=true"},
		},
		Now: func() time.Time { return now },
	}
	vm := func(name string, f func(*VM)) VM {
		v := VM{Namespace: "vms", Name: name, Node: "node-1"}
		if f != nil {
			f(&v)
		}
		return v
	}
	step := func(want ...string) {
		t.Helper()
		got, err := tr.Track(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, p := range got {
			s = append(s, fmt.Sprintf("%s %s %s %s", p.VM, p.Phase, p.Target, p.Message))
		}
		if strings.Join(s, "\n") != strings.Join(want, "\n") {
			t.Errorf("at %s:\n%s\nwant\n%s", now.Sub(t0), strings.Join(s, "\n"), strings.Join(want, "\n"))
		}
	}
	onNode = []VM{vm("a", nil), vm("b", nil), vm("c", nil)}
	step("vms/a Waiting  waiting for the drain to evict its launcher pod",
		"vms/b Waiting  waiting for the drain to evict its launcher pod",
		"vms/c Waiting  waiting for the drain to evict its launcher pod")
	now = t0.Add(time.Minute)
	onNode = []VM{
		vm("a", func(v *VM) {
			v.EvacuationNode = "node-1"
			v.Migration = &MigrationState{SourceNode: "node-1", TargetNode: "node-2", StartTimestamp: t0.Add(50 * time.Second).Format(time.RFC3339)}
		}),
		vm("c", func(v *VM) {
			v.EvacuationNode = "node-1"
			v.Migration = &MigrationState{SourceNode: "node-1", TargetNode: "node-3", Failed: true, FailureReason: "target pod unschedulable"}
		}),
	}
	step("vms/a Migrating node-2 migrating to node-2",
		"vms/b Stopped  evictionStrategy None: the drain stops it",
		"vms/c MigrationFailed node-3 migration to node-3 failed: target pod unschedulable")
	now = t0.Add(2 * time.Minute)
	onNode = []VM{vm("c", func(v *VM) { v.EvacuationNode = "node-1" })}
	step("vms/a Migrated node-2 live-migrated to node-2",
		"vms/b Stopped  evictionStrategy None: the drain stops it",
		"vms/c Evacuating  marked for evacuation; no migration runs yet")
	now = t0.Add(2*time.Minute + StuckAfter)
	step("vms/a Migrated node-2 live-migrated to node-2",
		"vms/b Stopped  evictionStrategy None: the drain stops it",
		"vms/c Evacuating  has not moved in 10m0s: marked for evacuation; no migration runs yet (nodes with x=true)")
}

// A VM that left the node unseen is looked up once, wherever it runs now;
// a stopped one still on the node shows as Stopped.
func TestTrackerFindsWhereAVMWent(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	gets := 0
	tr := &Tracker{
		List: func(context.Context) ([]VM, error) {
			return []VM{{Namespace: "vms", Name: "off", Node: "node-1", Phase: "Failed"}}, nil
		},
		Get: func(_ context.Context, ns, name string) (VM, bool, error) {
			gets++
			switch name {
			case "moved":
				return VM{Namespace: ns, Name: name, Node: "node-3", Phase: "Running"}, true, nil
			case "ended":
				return VM{Namespace: ns, Name: name, Node: "node-1", Phase: "Succeeded"}, true, nil
			}
			return VM{}, false, nil
		},
		Planned: map[string]VMPlan{"vms/moved": {Way: Migrate}, "vms/ended": {Way: Stopped}, "vms/deleted": {Way: Migrate}, "vms/off": {Way: Stopped}},
		Now:     func() time.Time { return now },
		Node:    "node-1",
	}
	for range 2 {
		got, err := tr.Track(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, p := range got {
			s = append(s, p.VM+" "+p.Phase+" "+p.Target+" "+p.Message)
		}
		want := []string{"vms/deleted Stopped  deleted", "vms/ended Stopped  stopped (phase Succeeded)", "vms/moved Migrated node-3 live-migrated to node-3", "vms/off Stopped  stopped (phase Failed)"}
		if !slices.Equal(s, want) {
			t.Errorf("got\n%s\nwant\n%s", strings.Join(s, "\n"), strings.Join(want, "\n"))
		}
	}
	if gets != 3 {
		t.Errorf("%d lookups, want one for each VM that left, once", gets)
	}
}
