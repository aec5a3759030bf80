package vmdrain

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

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
