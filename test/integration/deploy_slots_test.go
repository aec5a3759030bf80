package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/slots"
)

// byGrantRule is the message of the rule that keeps the grant from agents.
const byGrantRule = "drain slots are granted only by node-agent-coordinator"

// testSlotPrivilege is the issue-30 acceptance check of the drain slots on
// the real control plane with deploy/ as shipped: a token bound to node-1's
// agent pod cannot take, clear, renew or forge a slot of any node, nor its
// grant, and may only ask for a slot for node-1, once. What the
// coordinator's own token may do is testCoordinatorPrivilege.
func (b *deployBed) testSlotPrivilege(t *testing.T) {
	ctx := t.Context()
	sa := b.tokenClient(t, b.boundToken(t, b.agentPod(t, "node-1")))

	// A slot held by node-2, as the coordinator writes it: its Lease and
	// its grant, answering node-2's request.
	now := time.Now().UTC().Truncate(time.Second)
	req2 := &slots.Request{Purpose: slots.PurposeMaintenance, ID: "node-2-a", RequestedAt: now}
	grant2 := &slots.Grant{ID: req2.ID, Purpose: req2.Purpose, State: slots.Granted, Slot: slots.LeaseName("node-2"), Time: now}
	if err := mergePatchNode(t, b.c, "node-2", obj{"metadata": obj{"annotations": obj{
		slots.RequestAnnotation: req2.Encode(), slots.GrantAnnotation: grant2.Encode()}}}, false); err != nil {
		t.Fatal(err)
	}
	at := metav1.NewMicroTime(now)
	held := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: slots.LeaseName("node-2"), Namespace: agentNamespace, Labels: map[string]string{slots.SlotLabel: "true"},
			Annotations: map[string]string{slots.LeaseRequestID: req2.ID, slots.LeasePurpose: string(req2.Purpose)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-2"), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &at, RenewTime: &at},
	}
	if _, err := b.c.CoordinationV1().Leases(agentNamespace).Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// t.Context() has ended by now.
		if err := b.c.CoordinationV1().Leases(agentNamespace).Delete(context.Background(), held.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the test's slot Lease: %v", err)
		}
		for _, node := range []string{"node-1", "node-2"} {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null}}}`, slots.RequestAnnotation, slots.GrantAnnotation)
			if _, err := b.c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Errorf("removing the test's request and grant from %s: %v", node, err)
			}
		}
	})

	t.Run("slot Leases", func(t *testing.T) {
		leases := sa.CoordinationV1().Leases(agentNamespace)
		_, err := leases.Get(ctx, held.Name, metav1.GetOptions{})
		wantDenied(t, "read node-2's slot Lease", err, byRBAC)
		_, err = leases.List(ctx, metav1.ListOptions{})
		wantDenied(t, "list the slot Leases", err, byRBAC)
		_, err = leases.Watch(ctx, metav1.ListOptions{})
		wantDenied(t, "watch the slot Leases", err, byRBAC)
		clear := held.DeepCopy()
		clear.Spec.HolderIdentity = nil
		_, err = leases.Update(ctx, clear, metav1.UpdateOptions{})
		wantDenied(t, "clear the holder of node-2's slot", err, byRBAC)
		forever := held.DeepCopy()
		forever.Spec.HolderIdentity = ptr.To("made-up")
		forever.Spec.RenewTime = &metav1.MicroTime{Time: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
		forever.Spec.LeaseDurationSeconds = ptr.To[int32](1<<31 - 1)
		_, err = leases.Update(ctx, forever, metav1.UpdateOptions{})
		wantDenied(t, "make a made-up holder keep node-2's slot until 9999", err, byRBAC)
		err = leases.Delete(ctx, held.Name, metav1.DeleteOptions{})
		wantDenied(t, "delete node-2's slot Lease", err, byRBAC)
		own := held.DeepCopy()
		own.Name, own.ResourceVersion, own.Spec.HolderIdentity = slots.LeaseName("node-1"), "", ptr.To("node-1")
		_, err = leases.Create(ctx, own, metav1.CreateOptions{})
		wantDenied(t, "create a slot Lease for node-1", err, byRBAC)
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-agent-coordinator", Namespace: agentNamespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1")}}, metav1.CreateOptions{})
		wantDenied(t, "take the coordinator's leader election Lease", err, byRBAC)
		if l, err := b.c.CoordinationV1().Leases(agentNamespace).Get(ctx, held.Name, metav1.GetOptions{}); err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "node-2" {
			t.Errorf("node-2's slot Lease after the attempts: %v, %v; want held by node-2", l, err)
		}
	})

	t.Run("grants", func(t *testing.T) {
		forged := &slots.Grant{ID: "x", Purpose: slots.PurposeMaintenance, State: slots.Granted, Slot: slots.LeaseName("node-1"), Time: now}
		err := mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: forged.Encode()}}}, true)
		wantDenied(t, "grant node-1 a slot on its own Node", err, byGrantRule)
		revoked := *grant2
		revoked.State, revoked.Slot = slots.Revoked, ""
		err = mergePatchNode(t, sa, "node-2", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: revoked.Encode()}}}, true)
		wantDenied(t, "revoke node-2's grant", err, byPolicy)
		err = mergePatchNode(t, sa, "node-2", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: nil}}}, true)
		wantDenied(t, "remove node-2's grant", err, byPolicy)
	})

	t.Run("requests", func(t *testing.T) {
		err := mergePatchNode(t, sa, "node-2", obj{"metadata": obj{"annotations": obj{slots.RequestAnnotation: nil}}}, true)
		wantDenied(t, "withdraw node-2's request (and so its slot)", err, byPolicy)
		other := &slots.Request{Purpose: slots.PurposeMaintenance, ID: "forged", RequestedAt: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
		err = mergePatchNode(t, sa, "node-3", obj{"metadata": obj{"annotations": obj{slots.RequestAnnotation: other.Encode()}}}, true)
		wantDenied(t, "ask for a slot for node-3", err, byPolicy)
		// Its own node's one request is its job.
		own := &slots.Request{Purpose: slots.PurposeMaintenance, ID: "node-1-a", RequestedAt: now}
		wantAllowed(t, "ask for a slot for node-1", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"annotations": obj{slots.RequestAnnotation: own.Encode()}}}, true))
	})
}
