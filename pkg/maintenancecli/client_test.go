package maintenancecli

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

func TestParseAPI(t *testing.T) {
	for _, tt := range []struct {
		in        string
		allowBoth bool
		want      API
		wantErr   bool
	}{
		{in: "annotation", want: APIAnnotation},
		{in: "nodemaintenance", want: APINodeMaintenance},
		{in: "", allowBoth: true, want: ""},
		{in: "", wantErr: true},
		{in: "NodeMaintenance", allowBoth: true, wantErr: true},
	} {
		got, err := ParseAPI(tt.in, tt.allowBoth)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseAPI(%q, %t) = %q, %v", tt.in, tt.allowBoth, got, err)
		}
	}
}

func TestStart(t *testing.T) {
	t.Run("annotation", func(t *testing.T) {
		h := newHarness(t, true, node("node-1", "1", "", nil))
		if err := h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "BIOS update", API: APIAnnotation}); err != nil {
			t.Fatal(err)
		}
		n, err := h.kube.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Annotations[selfdrain.MaintenanceAnnotation]; got != "BIOS update" {
			t.Errorf("annotation %q", got)
		}
		if got, want := h.err.String(), "maintenance of node-1 requested: BIOS update\n"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
		if h.dynamicCalls != 0 {
			t.Error("the annotation API built a dynamic client")
		}
	})
	t.Run("a reason the agent refuses changes nothing", func(t *testing.T) {
		h := newHarness(t, true, node("node-1", "1", "", nil))
		err := h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "false", API: APIAnnotation})
		if err == nil || !strings.Contains(err.Error(), `node-agent.io/maintenance="false" is refused`) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("error %v", err)
		}
		for _, a := range h.kube.Actions() {
			if a.GetVerb() == "patch" {
				t.Errorf("the Node was patched: %v", a)
			}
		}
	})
	t.Run("nodemaintenance", func(t *testing.T) {
		h := newHarness(t, true, node("node-1", "1", "", nil))
		if err := h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "BIOS update", API: APINodeMaintenance}); err != nil {
			t.Fatal(err)
		}
		objs, err := maintenance.ListNodeMaintenances(t.Context(), h.dyn, []string{medik8s}, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || objs[0].Name != "nm-node-1" || objs[0].Spec.NodeName != "node-1" || objs[0].Spec.Reason != "BIOS update" {
			t.Errorf("objects %+v, want nm-node-1 for node-1", objs)
		}
		if got, want := h.err.String(), "maintenance of node-1 requested with nodemaintenances.nodemaintenance.medik8s.io/nm-node-1: BIOS update\n"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("nodemaintenance not served", func(t *testing.T) {
		h := newHarness(t, false, node("node-1", "1", "", nil))
		err := h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "x", API: APINodeMaintenance})
		if err == nil || !strings.Contains(err.Error(), "serves no NodeMaintenance API") || !strings.Contains(err.Error(), "--api annotation") {
			t.Errorf("error %v", err)
		}
	})
}

func TestStopNodeMaintenanceWithoutObjects(t *testing.T) {
	h := newHarness(t, true, node("node-1", "1", "", nil), nodeMaintenance("nm-node-2", "node-2", nil))
	err := h.client.Stop(t.Context(), StopOptions{Node: "node-1", API: APINodeMaintenance})
	if err == nil || err.Error() != "no NodeMaintenance object names node-1" {
		t.Errorf("error %v", err)
	}
}

func TestStatus(t *testing.T) {
	running := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerNodeMaintenance, StartTime: ptrTime(t0),
		EvictionPods: 2, PendingPods: []string{"vm/a"}, DrainProgress: 50}
	objs := []runtime.Object{
		node("node-1", "1", "", running),
		node("node-2", "1", "", nil), // not in maintenance: not listed
		nodeMaintenance("nm-node-1", "node-1", map[string]any{"phase": "Running", "drainProgress": int64(50),
			"pendingPods": []any{"vm/a"}, "evictionPods": int64(2)}),
		nodeMaintenance("nm-node-9", "node-9", nil),
	}
	nodeTable := lines(
		"NODE    REQUESTED  PHASE    TRIGGER          PROGRESS  PENDING  CORDONED  STARTED               LAST ERROR",
		"node-1  -          Running  nodemaintenance  50%       1/2      false     2026-01-01T10:00:00Z  ",
	)
	nmTable := lines(
		"NODEMAINTENANCE                                        NODE    PHASE    PROGRESS  PENDING  LAST ERROR  NOTE",
		"nodemaintenances.nodemaintenance.medik8s.io/nm-node-1  node-1  Running  50%       1/2                  ",
		"nodemaintenances.nodemaintenance.medik8s.io/nm-node-9  node-9  -        0%        0/0                  node node-9 does not exist: no agent serves this object; delete it",
	)
	tests := []struct {
		name    string
		served  bool
		node    string
		api     API
		want    string
		wantErr string
	}{
		{name: "both APIs", served: true, want: nodeTable + "\n" + nmTable},
		{name: "both APIs, none served", want: nodeTable},
		{name: "annotation only", served: true, api: APIAnnotation, want: nodeTable},
		{name: "nodemaintenance only", served: true, api: APINodeMaintenance, want: "\n" + nmTable},
		{name: "nodemaintenance not served", api: APINodeMaintenance, wantErr: "the cluster serves no NodeMaintenance API"},
		{name: "a node that does not exist", served: true, node: "node-9", want: "Node node-9 does not exist.\n\n" + lines(
			"NODEMAINTENANCE                                        NODE    PHASE  PROGRESS  PENDING  LAST ERROR  NOTE",
			"nodemaintenances.nodemaintenance.medik8s.io/nm-node-9  node-9  -      0%        0/0                  node node-9 does not exist: no agent serves this object; delete it",
		)},
		{name: "a node that does not exist, annotation only", served: true, node: "node-9", api: APIAnnotation, wantErr: "reading Node node-9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.served, objs...)
			err := h.client.Status(t.Context(), tt.node, tt.api)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := h.out.String(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestDryRun(t *testing.T) {
	pod := func(ns, name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	cordoned := node("node-1", "1", "", nil)
	cordoned.Spec.Unschedulable = true
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vm", Name: "vms"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrIntStr(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubevirt.io": "virt-launcher"}}},
	}
	h := newHarness(t, false, cordoned, pdb,
		pod("vm", "virt-launcher-a", map[string]string{"kubevirt.io": "virt-launcher"}),
		pod("web", "nginx", nil))
	if err := h.client.DryRun(t.Context(), "node-1", ""); err != nil {
		t.Fatal(err)
	}
	want := lines(
		"Dry run: nothing changed. A drain of node-1 now would:",
		"  leave the node cordoned (it is cordoned already, so ending maintenance keeps it cordoned)",
		"  add the drain taint (default kubevirt.io/drain=draining:NoSchedule)",
		"",
		"POD                 ACTION  NOTE",
		"vm/virt-launcher-a  evict   blocked now: PodDisruptionBudget vm/vms allows no disruption now",
		"web/nginx           evict   ",
		"",
		"2 to evict, 0 to skip, 0 finished.",
	)
	if got := h.out.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for _, a := range h.kube.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" {
			t.Errorf("a dry run did %s %s", v, a.GetResource().Resource)
		}
	}
}

func ptrIntStr(v intstr.IntOrString) *intstr.IntOrString { return &v }
