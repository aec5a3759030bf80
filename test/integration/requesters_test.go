package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestMaintenanceSeveralRequesters is issue 44's acceptance for item 6 on
// the real control plane: a maintenance with two requesters, an owner's
// annotation (`maintenance start --owner`) and a NodeMaintenance object,
// drains the node once; when the owner ends its request the node stays
// cordoned, drained and in the same maintenance, the record lists the
// object alone and an Event says who ended and who holds it; only when the
// object goes too does the agent undo its changes.
func TestMaintenanceSeveralRequesters(t *testing.T) {
	b := newNMBed(t, false)
	c := b.env.Client()
	ctx := context.Background()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "web", 6, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 6)
	b.addTargets(t)
	agent := startAgent(t, b.env, "node-1", nmFlag)
	agent.WaitReady(t)

	// Two requesters, one after the other, before the drain is done.
	if out, err := cli(t, b.env, "start", "node-1", "--owner", "network-team", "--reason", "switch firmware"); err != nil {
		t.Fatalf("start --owner: %v\n%s", err, out)
	}
	b.create(t, medik8sGroup, "nm-node-1", "node-1", "NIC replacement")
	objID := "nodemaintenances." + medik8sGroup + "/nm-node-1"
	testenv.WaitFor(t, 3*time.Minute, "the drain Succeeded with both requesters listed", func() (bool, error) {
		n := getNode(t, c, "node-1")
		st, err := selfdrain.ParseStatus(n)
		if err != nil || st == nil || st.Phase != selfdrain.PhaseSucceeded {
			return false, err
		}
		list, err := maintenance.ParseRequesters(n)
		return len(list) == 2, err
	})
	first := nodeStatus(t, c, "node-1")
	list, _ := maintenance.ParseRequesters(getNode(t, c, "node-1"))
	t.Logf("record %s; requesters %+v", first.Encode(), list)
	if first.Trigger != selfdrain.TriggerAnnotation || first.Reason != "switch firmware" || first.EvictionPods != 6 {
		t.Errorf("record %s; want the owner's drain of the 6 pods", first.Encode())
	}
	if list[0].Kind != maintenance.KindOwner || list[0].Name != "network-team" || list[1].Kind != maintenance.KindNodeMaintenance || list[1].Name != objID {
		t.Errorf("requesters %+v; want owner network-team, then %s", list, objID)
	}
	testenv.WaitFor(t, time.Minute, "the object mirrors the drain and holds the finalizer", func() (bool, error) {
		nm := b.get(t, medik8sGroup, "nm-node-1")
		return nm.Status.Phase == selfdrain.PhaseSucceeded && hasFinalizer(nm), nil
	})

	// The first requester ends. --wait returns once the agent lists the
	// requesters without it: by then it has acted on the removal, so a
	// wrong end of the maintenance would show below.
	out, err := cli(t, b.env, "stop", "node-1", "--owner", "network-team", "--wait")
	t.Logf("stop --owner --wait:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "node-1 stays in maintenance for nodemaintenance "+objID) {
		t.Errorf("stop --owner --wait does not say who still holds the maintenance")
	}
	node := getNode(t, c, "node-1")
	st := nodeStatus(t, c, "node-1")
	if !node.Spec.Unschedulable || !testenv.HasTaint(node, testenv.DrainTaint) || !st.Active() || st.Phase != selfdrain.PhaseSucceeded {
		t.Errorf("after the first requester ended: unschedulable=%t record %s; want the node still cordoned, tainted and in maintenance", node.Spec.Unschedulable, st.Encode())
	}
	if !st.StartTime.Equal(first.StartTime) || !st.DrainStartTime.Equal(first.DrainStartTime) {
		t.Errorf("the maintenance started again: record %s, was %s", st.Encode(), first.Encode())
	}
	if list, err := maintenance.ParseRequesters(node); err != nil || len(list) != 1 || list[0].Name != objID {
		t.Errorf("requesters %+v (%v); want %s alone", list, err, objID)
	}
	// The Event follows the list's write, through the agent's Event
	// queue: wait for it.
	ended := nodeEvent(t, c, "node-1", "MaintenanceRequesterEnded")
	if !strings.Contains(ended.Message, "owner network-team ended its request; the node stays in maintenance for nodemaintenance "+objID) {
		t.Errorf("MaintenanceRequesterEnded Event %q; want it naming who ended and who holds", ended.Message)
	}
	if evs, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=node-1,reason=MaintenanceRequesterEnded"}); err != nil || len(evs.Items) != 1 {
		t.Errorf("MaintenanceRequesterEnded Events: %v, %v; want one", evs, err)
	}
	out, err = cli(t, b.env, "status", "node-1")
	t.Logf("maintenance status node-1:\n%s", out)
	if err != nil || !strings.Contains(out, "Requesters (the maintenance ends when the last one ends its request):\n  nodemaintenance "+objID+": NIC replacement") {
		t.Errorf("status (%v) does not list the requester left", err)
	}

	// The last requester ends: now the agent undoes what it did.
	b.delete(t, medik8sGroup, "nm-node-1")
	testenv.WaitFor(t, time.Minute, "nm-node-1 gone", func() (bool, error) {
		return b.get(t, medik8sGroup, "nm-node-1") == nil, nil
	})
	testenv.WaitFor(t, time.Minute, "the requesters list removed", func() (bool, error) {
		_, ok := getNode(t, c, "node-1").Annotations[maintenance.RequestersAnnotation]
		return !ok, nil
	})
	node = getNode(t, c, "node-1")
	if node.Spec.Unschedulable || testenv.HasTaint(node, testenv.DrainTaint) {
		t.Errorf("after the last requester ended: unschedulable=%t taints=%v; want restored", node.Spec.Unschedulable, node.Spec.Taints)
	}
	if st := nodeStatus(t, c, "node-1"); st.Active() || st.EndTime == nil {
		t.Errorf("record not final: %s", st.Encode())
	}
}
