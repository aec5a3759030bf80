package maintenancecli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/selfdrain/podselect"
)

// lines joins want's lines, each ended by a newline, so that a table's
// expected text reads as the table.
func lines(want ...string) string { return strings.Join(want, "\n") + "\n" }

func TestWriteStatusTable(t *testing.T) {
	running := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerAnnotation, Reason: "bios",
		TotalPods: 5, EvictionPods: 4, PendingPods: []string{"vm/a", "vm/b"}, DrainProgress: 50,
		LastError: "PodDisruptionBudget vm/pdb allows no disruption", StartTime: ptrTime(t0), PodAccess: "node"}
	ended := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerShutdown, EvictionPods: 2,
		DrainProgress: 100, StartTime: ptrTime(t0), EndTime: ptrTime(t0.Add(time.Minute))}
	cordoned := node("node-3", "1", "", nil)
	cordoned.Spec.Unschedulable = true
	broken := node("node-4", "1", "disk", nil)
	broken.Annotations[selfdrain.StatusAnnotation] = "{"
	rebooting := rebootNode("node-5", &reboot.Record{State: reboot.Pending, Reason: string(reboot.InMaintenance), Since: ptrTime(t0.Add(-time.Hour)),
		Message: "sentinel file /run/reboot-required exists; the node is under a maintenance asked for otherwise"}, corev1.ConditionTrue)
	rebooting.Annotations[selfdrain.StatusAnnotation] = running.Encode()
	tests := []struct {
		name  string
		nodes []corev1.Node
		one   bool
		want  string
	}{
		{name: "none", want: "No node is in maintenance.\n"},
		{
			name:  "every kind of row",
			nodes: []corev1.Node{*node("node-1", "1", "bios", running), *node("node-2", "1", "", ended), *cordoned},
			want: lines(
				"NODE    REQUESTED  PHASE              TRIGGER     PROGRESS  PENDING  CORDONED  STARTED               LAST ERROR",
				"node-1  bios       Running            annotation  50%       2/4      false     2026-01-01T10:00:00Z  PodDisruptionBudget vm/pdb allows no disruption",
				"node-2  -          Succeeded (ended)  shutdown    100%      0/2      false     2026-01-01T10:00:00Z  ",
				"node-3  -          -                                                 true                            ",
			),
		},
		{
			name:  "one node lists its pending pods",
			nodes: []corev1.Node{*node("node-1", "1", "bios", running)},
			one:   true,
			want: lines(
				"NODE    REQUESTED  PHASE    TRIGGER     PROGRESS  PENDING  CORDONED  STARTED               LAST ERROR",
				"node-1  bios       Running  annotation  50%       2/4      false     2026-01-01T10:00:00Z  PodDisruptionBudget vm/pdb allows no disruption",
				"",
				"Pending pods: vm/a, vm/b",
				"Pods reached as: node (the node itself, by constrained impersonation)",
			),
		},
		{
			name:  "one node shows its reboot when a coordinator reports on it",
			nodes: []corev1.Node{*rebooting},
			one:   true,
			want: lines(
				"NODE    REQUESTED  PHASE    TRIGGER     PROGRESS  PENDING  CORDONED  STARTED               LAST ERROR",
				"node-5  -          Running  annotation  50%       2/4      false     2026-01-01T10:00:00Z  PodDisruptionBudget vm/pdb allows no disruption",
				"",
				"Pending pods: vm/a, vm/b",
				"Pods reached as: node (the node itself, by constrained impersonation)",
				"Reboot required: yes (InMaintenance since 2026-01-01T09:00:00Z): sentinel file /run/reboot-required exists; the node is under a maintenance asked for otherwise",
			),
		},
		{
			name:  "one node without a maintenance status still shows its reboot",
			nodes: []corev1.Node{*rebootNode("node-6", &reboot.Record{State: reboot.NotNeeded, Reason: string(reboot.NotNeeded), Message: "the host needs no reboot"}, corev1.ConditionFalse)},
			one:   true,
			want: lines(
				"NODE    REQUESTED  PHASE  TRIGGER  PROGRESS  PENDING  CORDONED  STARTED  LAST ERROR",
				"node-6  -          -                                  false              ",
				"",
				"Reboot required: no (NotNeeded): the host needs no reboot",
			),
		},
		{
			name:  "a refused request shows as refused, and one node says why",
			nodes: []corev1.Node{*node("node-7", "1", "false", nil)},
			one:   true,
			want: lines(
				"NODE    REQUESTED        PHASE  TRIGGER  PROGRESS  PENDING  CORDONED  STARTED  LAST ERROR",
				"node-7  false (refused)  -                                  false              ",
				"",
				`Request refused, nothing changed for it: node-agent.io/maintenance="false" is refused: `+reasontext.Accepted,
			),
		},
		{
			name:  "a status that does not parse shows the error",
			nodes: []corev1.Node{*broken},
			one:   true,
			want: lines(
				"NODE    REQUESTED  PHASE  TRIGGER  PROGRESS  PENDING  CORDONED  STARTED  LAST ERROR",
				"node-4  disk       ?                                  false              annotation node-agent.io/maintenance-status is not valid status JSON (unexpected EOF); the agent will not act on it: fix it, or delete it to let the agent start afresh",
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeStatusTable(&b, tt.nodes, tt.one); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestWriteNodeMaintenanceTable(t *testing.T) {
	nm := func(name, node string, st maintenance.NodeMaintenanceStatus, deleted bool) *maintenance.NodeMaintenance {
		o := &maintenance.NodeMaintenance{
			TypeMeta:   metav1.TypeMeta{APIVersion: medik8s + "/v1beta1", Kind: maintenance.NodeMaintenanceKind},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       maintenance.NodeMaintenanceSpec{NodeName: node},
			Status:     st,
		}
		if deleted {
			o.DeletionTimestamp = ptrTime(t0)
		}
		return o
	}
	var b bytes.Buffer
	if err := writeNodeMaintenanceTable(&b, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "No NodeMaintenance object.\n"; got != want {
		t.Errorf("no objects: got %q, want %q", got, want)
	}
	b.Reset()
	objs := []*maintenance.NodeMaintenance{
		nm("nm-node-1", "node-1", maintenance.NodeMaintenanceStatus{Phase: selfdrain.PhaseRunning, DrainProgress: 25,
			PendingPods: []string{"vm/a", "vm/b", "vm/c"}, EvictionPods: 4, LastError: "waiting for a drain slot"}, false),
		nm("nm-node-2", "node-2", maintenance.NodeMaintenanceStatus{Phase: selfdrain.PhaseSucceeded, DrainProgress: 100, EvictionPods: 1}, true),
		nm("nm-gone", "node-9", maintenance.NodeMaintenanceStatus{}, true),
	}
	if err := writeNodeMaintenanceTable(&b, objs, map[string]bool{"node-1": true, "node-2": true}); err != nil {
		t.Fatal(err)
	}
	want := lines(
		"NODEMAINTENANCE                                        NODE    PHASE      PROGRESS  PENDING  LAST ERROR                NOTE",
		"nodemaintenances.nodemaintenance.medik8s.io/nm-node-1  node-1  Running    25%       3/4      waiting for a drain slot  ",
		"nodemaintenances.nodemaintenance.medik8s.io/nm-node-2  node-2  Succeeded  100%      0/1                                deleted; kept until the agent has restored the node",
		"nodemaintenances.nodemaintenance.medik8s.io/nm-gone    node-9  -          0%        0/0                                node node-9 does not exist: no agent serves this object; delete it; deleted; kept until the agent has restored the node",
	)
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestWritePlan(t *testing.T) {
	plan := []podselect.PlannedPod{
		{Pod: "kube-system/agent-x", Action: "skip", Why: "DaemonSet kube-system/agent"},
		{Pod: "vm/virt-launcher-a", Action: "evict", Blockers: []string{"PodDisruptionBudget vm/a allows no disruption now", "PodDisruptionBudget vm/all allows no disruption now"}},
		{Pod: "vm/virt-launcher-b", Action: "evict"},
		{Pod: "batch/job-1", Action: "done", Why: "finished (Succeeded)"},
	}
	for _, tt := range []struct {
		name     string
		cordoned bool
		want     string
	}{
		{name: "schedulable", want: lines(
			"Dry run: nothing changed. A drain of node-1 now would:",
			"  cordon the node (ending maintenance uncordons it)",
			"  add the drain taint (default kubevirt.io/drain=draining:NoSchedule)",
			"",
			"POD                  ACTION  NOTE",
			"kube-system/agent-x  skip    DaemonSet kube-system/agent",
			"vm/virt-launcher-a   evict   blocked now: PodDisruptionBudget vm/a allows no disruption now; PodDisruptionBudget vm/all allows no disruption now",
			"vm/virt-launcher-b   evict   ",
			"batch/job-1          done    finished (Succeeded)",
			"",
			"2 to evict, 1 to skip, 1 finished.",
		)},
		{name: "cordoned by an admin", cordoned: true, want: lines(
			"Dry run: nothing changed. A drain of node-1 now would:",
			"  leave the node cordoned (it is cordoned already, so ending maintenance keeps it cordoned)",
			"  add the drain taint (default kubevirt.io/drain=draining:NoSchedule)",
			"",
			"POD                  ACTION  NOTE",
			"kube-system/agent-x  skip    DaemonSet kube-system/agent",
			"vm/virt-launcher-a   evict   blocked now: PodDisruptionBudget vm/a allows no disruption now; PodDisruptionBudget vm/all allows no disruption now",
			"vm/virt-launcher-b   evict   ",
			"batch/job-1          done    finished (Succeeded)",
			"",
			"2 to evict, 1 to skip, 1 finished.",
		)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writePlan(&b, "node-1", tt.cordoned, plan); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}
