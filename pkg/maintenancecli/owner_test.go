package maintenancecli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// --owner requests and ends one owner's maintenance, and leaves the
// maintenance annotation alone.
func TestStartStopAsOwner(t *testing.T) {
	h := newHarness(t, true, node("node-1", "1", "kernel", nil))
	if err := h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "switch firmware", API: APIAnnotation, Owner: "network-team"}); err != nil {
		t.Fatal(err)
	}
	n, err := h.kube.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Annotations[maintenance.OwnerAnnotationPrefix+"network-team"]; got != "switch firmware" {
		t.Errorf("owner annotation %q", got)
	}
	if got := n.Annotations[selfdrain.MaintenanceAnnotation]; got != "kernel" {
		t.Errorf("maintenance annotation %q, want it untouched", got)
	}
	if err := h.client.Stop(t.Context(), StopOptions{Node: "node-1", API: APIAnnotation, Owner: "network-team"}); err != nil {
		t.Fatal(err)
	}
	n, err = h.kube.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Annotations[maintenance.OwnerAnnotationPrefix+"network-team"]; ok || n.Annotations[selfdrain.MaintenanceAnnotation] != "kernel" {
		t.Errorf("annotations after stop --owner: %v; want the owner's gone, the maintenance annotation kept", n.Annotations)
	}
}

func TestOwnerRefusedBeforeAnyChange(t *testing.T) {
	h := newHarness(t, true, node("node-1", "1", "", nil))
	for _, err := range []error{
		h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "x", API: APIAnnotation, Owner: "has space"}),
		h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "x", API: APINodeMaintenance, Owner: "team"}),
		h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "no", API: APIAnnotation, Owner: "team"}),
		h.client.Stop(t.Context(), StopOptions{Node: "node-1", API: APINodeMaintenance, Owner: "team"}),
	} {
		if err == nil {
			t.Error("accepted")
		}
	}
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("the Node was patched: %v", a)
		}
	}
}

// The status of one node lists who holds its maintenance; the list of all
// nodes names them under the table, and takes in a node that only an owner
// asks into maintenance.
func TestStatusListsRequesters(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	list := `[{"kind":"owner","name":"network-team","reason":"switch firmware","since":"2026-01-01T00:00:00Z"},` +
		`{"kind":"nodemaintenance","name":"nodemaintenances.nodemaintenance.medik8s.io/nm-1","reason":"NIC"}]`
	st := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, Reason: "switch firmware", StartTime: &since}
	n := node("node-1", "1", "", st)
	n.Annotations[maintenance.OwnerAnnotationPrefix+"network-team"] = "switch firmware"
	n.Annotations[maintenance.RequestersAnnotation] = list
	var out bytes.Buffer
	if err := writeStatusTable(&out, []corev1.Node{*n}, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Requesters (the maintenance ends when the last one ends its request):",
		"  owner network-team: switch firmware (since 2026-01-01T00:00:00Z)",
		"  nodemaintenance nodemaintenances.nodemaintenance.medik8s.io/nm-1: NIC",
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := writeStatusTable(&out, []corev1.Node{*n}, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nRequesters:\nnode-1: owner network-team, nodemaintenance nodemaintenances.nodemaintenance.medik8s.io/nm-1\n") {
		t.Errorf("all-nodes status lacks the requesters:\n%s", out.String())
	}

	only := node("node-2", "1", "", nil)
	only.Annotations[maintenance.OwnerAnnotationPrefix+"storage"] = "disk swap"
	h := newHarness(t, true, node("node-1", "1", "", nil), only)
	nodes, _, err := h.client.nodesInMaintenance(t.Context(), "", false)
	if err != nil || len(nodes) != 1 || nodes[0].Name != "node-2" {
		t.Errorf("nodes in maintenance = %d, %v; want node-2, asked by an owner alone", len(nodes), err)
	}
}
