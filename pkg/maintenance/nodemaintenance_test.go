package maintenance

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func nmObject(group, name string, created time.Time, opts ...func(*NodeMaintenance)) *NodeMaintenance {
	nm := &NodeMaintenance{
		TypeMeta:   metav1.TypeMeta{APIVersion: group + "/v1beta1", Kind: NodeMaintenanceKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       NodeMaintenanceSpec{NodeName: "node-1", Reason: "NIC replacement"},
	}
	for _, o := range opts {
		o(nm)
	}
	return nm
}

func withFinalizer(nm *NodeMaintenance) {
	nm.Finalizers = append(nm.Finalizers, NodeMaintenanceFinalizer)
}

func beingDeleted(nm *NodeMaintenance) {
	now := metav1.Now()
	nm.DeletionTimestamp = &now
}

func TestPrimaryObject(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const medik8s, kubevirt = "nodemaintenance.medik8s.io", "nodemaintenance.kubevirt.io"
	tests := []struct {
		name string
		objs []*NodeMaintenance
		want string // ID, or "" for none
	}{
		{"none", nil, ""},
		{"oldest wins", []*NodeMaintenance{nmObject(medik8s, "b", t0.Add(time.Second)), nmObject(medik8s, "a", t0.Add(2*time.Second))},
			"nodemaintenances." + medik8s + "/b"},
		{"same time: group, then name", []*NodeMaintenance{nmObject(medik8s, "a", t0), nmObject(kubevirt, "z", t0)},
			"nodemaintenances." + kubevirt + "/z"},
		{"an object being deleted never holds the node", []*NodeMaintenance{nmObject(medik8s, "old", t0, beingDeleted), nmObject(medik8s, "new", t0.Add(time.Hour))},
			"nodemaintenances." + medik8s + "/new"},
		{"only deleted ones", []*NodeMaintenance{nmObject(medik8s, "old", t0, beingDeleted)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if p := primaryObject(tt.objs); p != nil {
				got = p.ID()
			}
			if got != tt.want {
				t.Errorf("primary = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPlanObjects(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const g = "nodemaintenance.medik8s.io"
	upd := metav1.NewTime(t0.Add(time.Minute))
	running := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerNodeMaintenance, TotalPods: 10, EvictionPods: 8,
		PendingPods: []string{"work/a"}, DrainProgress: 87, LastError: "evicting work/a: PDB", LastUpdate: &upd, StartTime: &upd}
	waiting := &selfdrain.Status{Phase: selfdrain.PhaseWaiting, Trigger: selfdrain.TriggerNodeMaintenance, LastError: "cannot take a drain slot", ErrorOnLeaseCount: 3, LastUpdate: &upd}
	ended := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerNodeMaintenance, EndTime: &upd}

	type want struct {
		id           string
		add, remove  bool
		phase        selfdrain.Phase
		status       bool
		errSubstring string
	}
	tests := []struct {
		name       string
		objs       []*NodeMaintenance
		st         *selfdrain.Status
		perr       error
		annotation bool
		want       []want
	}{
		{"new object gets the finalizer, status waits for the record",
			[]*NodeMaintenance{nmObject(g, "a", t0)}, nil, nil, false,
			[]want{{id: "a", add: true}}},
		{"primary mirrors the record",
			[]*NodeMaintenance{nmObject(g, "a", t0, withFinalizer)}, running, nil, false,
			[]want{{id: "a", status: true, phase: selfdrain.PhaseRunning, errSubstring: "PDB"}}},
		{"waiting shows as Running with the cause",
			[]*NodeMaintenance{nmObject(g, "a", t0, withFinalizer)}, waiting, nil, false,
			[]want{{id: "a", status: true, phase: selfdrain.PhaseRunning, errSubstring: "drain slot"}}},
		{"a second object is a requester of the same maintenance: finalizer and status",
			[]*NodeMaintenance{nmObject(g, "a", t0, withFinalizer), nmObject(g, "b", t0.Add(time.Second))}, running, nil, false,
			[]want{{id: "a", status: true, phase: selfdrain.PhaseRunning}, {id: "b", add: true, status: true, phase: selfdrain.PhaseRunning}}},
		{"deleted: finalizer stays while the node is still in maintenance",
			[]*NodeMaintenance{nmObject(g, "a", t0, withFinalizer, beingDeleted)}, running, nil, false, nil},
		{"deleted: finalizer goes once the maintenance is undone",
			[]*NodeMaintenance{nmObject(g, "a", t0, withFinalizer, beingDeleted)}, ended, nil, false,
			[]want{{id: "a", remove: true}}},
		{"deleted: finalizer goes when the annotation keeps the node in maintenance",
			[]*NodeMaintenance{nmObject(g, "a", t0, withFinalizer, beingDeleted)}, running, nil, true,
			[]want{{id: "a", remove: true}}},
		{"deleted: finalizer goes when another object takes over",
			[]*NodeMaintenance{nmObject(g, "a", t0, withFinalizer, beingDeleted), nmObject(g, "b", t0.Add(time.Second), withFinalizer)}, running, nil, false,
			[]want{{id: "a", remove: true}, {id: "b", status: true, phase: selfdrain.PhaseRunning}}},
		{"unreadable record: finalizer stays, status names the problem",
			[]*NodeMaintenance{nmObject(g, "a", t0, withFinalizer), nmObject(g, "d", t0, withFinalizer, beingDeleted)}, nil, errors.New("annotation node-agent.io/maintenance-status is not valid"), false,
			[]want{{id: "a", status: true, errSubstring: "not valid"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planObjects(tt.objs, tt.st, tt.perr, tt.annotation)
			if len(got) != len(tt.want) {
				t.Fatalf("%d actions, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				a := got[i]
				if a.obj.Name != w.id || a.addFinalizer != w.add || a.removeFinalizer != w.remove || (a.status != nil) != w.status {
					t.Errorf("action %d = {%s add=%t remove=%t status=%t}, want %+v", i, a.obj.Name, a.addFinalizer, a.removeFinalizer, a.status != nil, w)
					continue
				}
				if a.status == nil {
					continue
				}
				if a.status.Phase != w.phase || !strings.Contains(a.status.LastError, w.errSubstring) {
					t.Errorf("action %d status = %+v, want phase %q and lastError with %q", i, *a.status, w.phase, w.errSubstring)
				}
			}
		})
	}

	// Once written, the same record plans nothing more.
	o := nmObject(g, "a", t0, withFinalizer)
	o.Status = *mirrorStatus(NodeMaintenanceStatus{}, running, nil)
	if got := planObjects([]*NodeMaintenance{o}, running, nil, false); len(got) != 0 {
		t.Errorf("status already current, still planned %+v", got)
	}
	if o.Status.TotalPods != 10 || o.Status.EvictionPods != 8 || o.Status.DrainProgress != 87 || len(o.Status.PendingPods) != 1 {
		t.Errorf("mirrored counts = %+v", o.Status)
	}
}

// TestStatusPatchKeys checks the JSON keys against the operator's
// (totalpods is lower case there) and that empty fields are cleared.
func TestStatusPatchKeys(t *testing.T) {
	b, err := json.Marshal(statusPatch(NodeMaintenanceStatus{Phase: selfdrain.PhaseSucceeded, DrainProgress: 100, TotalPods: 3}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":{"drainProgress":100,"errorOnLeaseCount":null,"evictionPods":null,"lastError":null,"lastUpdate":null,"pendingPods":null,"phase":"Succeeded","totalpods":3}}`
	if string(b) != want {
		t.Errorf("patch = %s\nwant    %s", b, want)
	}
	// The type decodes the operator's keys.
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemaintenance.kubevirt.io/v1beta1", "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": "nm-node-1"},
		"spec":     map[string]any{"nodeName": "node-1", "reason": "NIC replacement", "evictionTimeout": "30s"},
		"status":   map[string]any{"phase": "Running", "totalpods": int64(7), "evictionPods": int64(5), "errorOnLeaseCount": int64(2)},
	}}
	nm, err := NodeMaintenanceFromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if nm.Group() != "nodemaintenance.kubevirt.io" || nm.Spec.EvictionTimeout == nil || nm.Spec.EvictionTimeout.Duration != 30*time.Second ||
		nm.Status.TotalPods != 7 || nm.Status.EvictionPods != 5 || nm.Status.ErrorOnLeaseCount != 2 {
		t.Errorf("decoded %+v", nm)
	}
}
