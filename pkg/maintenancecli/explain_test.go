package maintenancecli

import (
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
)

// asks adds to n a drain slot request and the coordinator's answer g
// (none when nil).
func asks(n *corev1.Node, g *slots.Grant) *corev1.Node {
	req := &slots.Request{Purpose: slots.PurposeMaintenance, ID: n.Name + "-1", RequestedAt: t0}
	n.Annotations[slots.RequestAnnotation] = req.Encode()
	if g != nil {
		g.ID, g.Purpose = req.ID, req.Purpose
		n.Annotations[slots.GrantAnnotation] = g.Encode()
	}
	return n
}

func slotLease(node string, at time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: slots.LeaseName(node), Namespace: "node-agent",
			Labels:      map[string]string{slots.SlotLabel: "true"},
			Annotations: map[string]string{slots.LeasePurpose: string(slots.PurposeMaintenance)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), AcquireTime: ptr.To(metav1.NewMicroTime(at))},
	}
}

// TestStatusExplainsTheWait: status of one node says what its maintenance
// waits for: the agent's words, the coordinator's answer, its place in the
// queue and who holds the slots for how long; and, for a drain that runs,
// the pods and budgets that hold it.
func TestStatusExplainsTheWait(t *testing.T) {
	now := t0.Add(10 * time.Minute)
	reason := "pool default: 1 of 1 nodes drain (limit); slots held by node-1 since 2026-01-01T10:00:00Z; place 2 in the queue of pool default"
	waiting := &selfdrain.Status{Phase: selfdrain.PhaseWaiting, Trigger: selfdrain.TriggerAnnotation, Reason: "bios",
		StartTime: ptrTime(t0), LastError: "waiting for a drain slot from the coordinator: " + reason}
	running := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerAnnotation, Reason: "disk",
		StartTime: ptrTime(t0), EvictionPods: 1, PendingPods: []string{"work/db-0"},
		Blockers: []selfdrain.Blocker{{Pod: "work/db-0", Reason: selfdrain.BlockerPodDisruptionBudget, PodDisruptionBudget: "work/db",
			Detail: "The disruption budget db needs 1 healthy pods and has 1 currently"}}}
	h := newHarness(t, false,
		asks(node("node-1", "1", "disk", running), &slots.Grant{State: slots.Granted, Slot: slots.LeaseName("node-1"), Time: t0}),
		asks(node("node-2", "1", "bios", waiting), &slots.Grant{State: slots.Queued, Reason: reason, Time: t0.Add(2 * time.Minute)}),
		asks(node("node-3", "1", "other", nil), &slots.Grant{State: slots.Queued, Reason: "x", Time: t0.Add(time.Minute)}),
		asks(node("node-4", "1", "later", nil), &slots.Grant{State: slots.Queued, Reason: "x", Time: t0.Add(3 * time.Minute)}),
		slotLease("node-1", t0))
	h.client.SlotsNamespace = "node-agent"
	h.clock.SetTime(now)

	if err := h.client.Status(t.Context(), "node-2", APIAnnotation); err != nil {
		t.Fatal(err)
	}
	out := h.out.String()
	t.Logf("status node-2:\n%s", out)
	for _, want := range []string{
		"Drain slot (maintenance): queued by the coordinator since 2026-01-01T10:02:00Z (8m ago), place 2 of 3 queued in the cluster\n",
		"  the coordinator's answer: " + reason + "\n",
		"Drain slots held (Leases in namespace node-agent):",
		"node-1  maintenance  held for 10m, since 2026-01-01T10:00:00Z",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status node-2 does not say %q:\n%s", want, out)
		}
	}

	h.out.Reset()
	if err := h.client.Status(t.Context(), "node-1", APIAnnotation); err != nil {
		t.Fatal(err)
	}
	out = h.out.String()
	t.Logf("status node-1:\n%s", out)
	for _, want := range []string{
		"Drain slot (maintenance): held since 2026-01-01T10:00:00Z (10m), slot Lease node-agent-drain-slot-node-1",
		"node-1 (this node)",
		"Blocking the drain:",
		"work/db-0  PodDisruptionBudget work/db  The disruption budget db needs 1 healthy pods and has 1 currently",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status node-1 does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Waits for") {
		t.Errorf("status node-1, which drains, says it waits:\n%s", out)
	}

	// A gate holds node-3: the agent's words are shown.
	gated := &selfdrain.Status{Phase: selfdrain.PhaseWaiting, Trigger: selfdrain.TriggerAnnotation, Reason: "gate",
		StartTime: ptrTime(t0), LastError: "waiting for maintenance gates: ceph-healthy: ceph_health_status > 0 answered 1"}
	h = newHarness(t, false, node("node-3", "1", "gate", gated))
	if err := h.client.Status(t.Context(), "node-3", APIAnnotation); err != nil {
		t.Fatal(err)
	}
	if want := "Waits for: " + gated.LastError; !strings.Contains(h.out.String(), want) {
		t.Errorf("status node-3 does not say %q:\n%s", want, h.out.String())
	}
}

// A node that asks for nothing gets no explanation, and reads no Lease.
func TestStatusExplainsNothingWithoutARequest(t *testing.T) {
	h := newHarness(t, false, node("node-1", "1", "", nil))
	h.client.SlotsNamespace = "node-agent"
	if err := h.client.Status(t.Context(), "node-1", APIAnnotation); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(h.out.String(), "Drain slot") {
		t.Errorf("status of a node that asks for no slot:\n%s", h.out.String())
	}
	for _, a := range h.kube.Actions() {
		if a.GetResource().Resource == "leases" {
			t.Errorf("read Leases for a node that asks for no slot: %v", a)
		}
	}
}

// A user who may not list the Leases or the Nodes still sees the node's
// own record and answer, with a note of what could not be read.
func TestStatusNotesWhatItCannotList(t *testing.T) {
	h := newHarness(t, false, asks(node("node-2", "1", "bios", nil), &slots.Grant{State: slots.Queued, Reason: "pool default: full", Time: t0}))
	h.client.SlotsNamespace = "node-agent"
	for _, resource := range []string{"leases", "nodes"} {
		h.kube.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("not for you"))
		})
	}
	if err := h.client.Status(t.Context(), "node-2", APIAnnotation); err != nil {
		t.Fatal(err)
	}
	out := h.out.String()
	for _, want := range []string{
		"its place is unknown: cannot list the Nodes: ",
		"the coordinator's answer: pool default: full",
		"Drain slots held: cannot list the slot Leases in namespace node-agent: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status node-2 does not say %q:\n%s", want, out)
		}
	}
}
