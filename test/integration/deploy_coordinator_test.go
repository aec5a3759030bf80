package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// The drain slots' part of deploy/: the coordinator's Deployment, what its
// identity may and may not do, what the agent's identity may not do to the
// slot Leases, and the coordinator at work as deploy/ runs it.

// The policies of the drain slots: the coordinator's on Nodes, and the
// agent's on Leases.
const (
	coordinatorPolicy = "node-agent-coordinator-grant-only"
	slotLeasePolicy   = "node-agent-slot-leases"
	// coordinatorNode is where the test places the coordinator's pods
	// (placeCoordinator): no subtest drains it.
	coordinatorNode = "node-3"
)

// Messages of the layers that refuse the coordinator and the agent's Lease
// writes.
const (
	byCoordinatorRBAC   = `User "` + coordinatorUser + `" cannot`
	byCoordinatorPolicy = `ValidatingAdmissionPolicy '` + coordinatorPolicy + `'`
	// byCoordinatorEventsPolicy: deploy/coordinator.yaml's Events policy.
	byCoordinatorEventsPolicy = `ValidatingAdmissionPolicy 'node-agent-coordinator-own-events'`
	bySlotLeasePolicy         = `ValidatingAdmissionPolicy '` + slotLeasePolicy + `'`
)

// placeCoordinator lets the coordinator's Deployment run on coordinatorNode,
// and waits for its replicas there. kwok's Nodes carry the taint
// kwok.x-k8s.io/node, which the shipped Deployment rightly does not
// tolerate; and the drains of node-1 and node-2 below would evict a
// coordinator pod from those nodes, which ends the token bound to it that
// the coordinator process runs with (a real coordinator goes with its pod,
// and its successor has a token of its own; a test process cannot follow).
// So the admin adds a toleration and a node selector, as one would to keep
// the coordinator on some nodes.
func (b *deployBed) placeCoordinator(t *testing.T) {
	t.Helper()
	patch, err := json.Marshal(obj{"spec": obj{"template": obj{"spec": obj{
		"tolerations":  []corev1.Toleration{testenv.KwokToleration()},
		"nodeSelector": obj{corev1.LabelHostname: coordinatorNode},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.AppsV1().Deployments(agentNamespace).Patch(t.Context(), "node-agent-coordinator", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "both node-agent-coordinator pods running on "+coordinatorNode, func() (bool, error) {
		dep, err := b.c.AppsV1().Deployments(agentNamespace).Get(t.Context(), "node-agent-coordinator", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods := coordinatorPods(t, b.env)
		for _, p := range pods {
			if p.Spec.NodeName != coordinatorNode {
				return false, nil
			}
		}
		return len(pods) == int(ptr.Deref(dep.Spec.Replicas, 1)) && dep.Status.UpdatedReplicas == ptr.Deref(dep.Spec.Replicas, 1), nil
	})
	var pdb *policyv1.PodDisruptionBudget
	testenv.WaitFor(t, time.Minute, "the coordinator's PodDisruptionBudget to allow one disruption", func() (bool, error) {
		var err error
		pdb, err = b.c.PolicyV1().PodDisruptionBudgets(agentNamespace).Get(t.Context(), "node-agent-coordinator", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pdb.Status.ExpectedPods == 2 && pdb.Status.DisruptionsAllowed == 1, nil
	})
	t.Logf("node-agent-coordinator: 2 pods on %s, PodDisruptionBudget allows %d disruption", coordinatorNode, pdb.Status.DisruptionsAllowed)
}

// testSlotLeasePolicy: should the agent's ServiceAccount ever be granted
// Leases (here for a moment, in node-agent), the policy still refuses it
// every write to a slot Lease (by name or by label) and to the election
// Lease, and leaves other Leases alone.
func (b *deployBed) testSlotLeasePolicy(t *testing.T) {
	ctx := t.Context()
	sa := b.tokenClient(t, b.boundToken(t, b.agentPod(t, "node-1")))
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-leases", Namespace: agentNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update", "delete"}}}}
	bind := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-leases", Namespace: agentNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: agentServiceAccount}}}
	if _, err := b.c.RbacV1().Roles(agentNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.RbacV1().RoleBindings(agentNamespace).Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A slot Lease as the coordinator writes it, held by node-2.
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: slots.LeaseName("node-2"), Namespace: agentNamespace, Labels: map[string]string{slots.SlotLabel: "true"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-2"), LeaseDurationSeconds: ptr.To[int32](60)}}
	held, err := b.c.CoordinationV1().Leases(agentNamespace).Create(ctx, held, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = b.c.CoordinationV1().Leases(agentNamespace).Delete(context.Background(), held.Name, metav1.DeleteOptions{})
		_ = b.c.RbacV1().RoleBindings(agentNamespace).Delete(context.Background(), bind.Name, metav1.DeleteOptions{})
		_ = b.c.RbacV1().Roles(agentNamespace).Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	}()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	lease := func(name string, labels map[string]string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agentNamespace, Labels: labels},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1"), LeaseDurationSeconds: ptr.To[int32](1 << 30)}}
	}
	// Other Leases pass the policy: RBAC alone decides there.
	testenv.WaitFor(t, 30*time.Second, "RBAC to allow the agent Leases in "+agentNamespace, func() (bool, error) {
		_, err := sa.CoordinationV1().Leases(agentNamespace).Create(ctx, lease("deploy-test-unrelated", nil), dry)
		return err == nil, nil
	})
	t.Logf("allowed: create an unrelated Lease (dry run)")

	const rule = "are written only by node-agent-coordinator"
	for _, l := range []*coordinationv1.Lease{
		lease(slots.LeaseName("node-1"), nil),
		lease(coordinatorElectionLease, nil),
		lease(slots.LastRebootLease, nil),
		lease("deploy-test-labelled", map[string]string{slots.SlotLabel: "true"}),
	} {
		_, err := sa.CoordinationV1().Leases(agentNamespace).Create(ctx, l, dry)
		wantDenied(t, fmt.Sprintf("create the Lease %s (labels %v; dry run)", l.Name, l.Labels), err, bySlotLeasePolicy)
		if err != nil && !strings.Contains(err.Error(), rule) {
			t.Errorf("the refusal does not name the rule: %v", err)
		}
	}
	generated := lease("", nil)
	generated.GenerateName = slots.SlotPrefix
	_, err = sa.CoordinationV1().Leases(agentNamespace).Create(ctx, generated, dry)
	wantDenied(t, "create a Lease named from generateName "+slots.SlotPrefix+" (dry run)", err, rule)

	mine := held.DeepCopy()
	mine.Spec.HolderIdentity = ptr.To("node-1")
	_, err = sa.CoordinationV1().Leases(agentNamespace).Update(ctx, mine, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	wantDenied(t, "take node-2's slot Lease (dry run)", err, rule)
	unlabelled := held.DeepCopy()
	unlabelled.Labels = nil
	_, err = sa.CoordinationV1().Leases(agentNamespace).Update(ctx, unlabelled, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	wantDenied(t, "remove the slot label of node-2's slot Lease (dry run)", err, rule)
	err = sa.CoordinationV1().Leases(agentNamespace).Delete(ctx, held.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	wantDenied(t, "delete node-2's slot Lease (dry run)", err, rule)
	if l, err := b.c.CoordinationV1().Leases(agentNamespace).Get(ctx, held.Name, metav1.GetOptions{}); err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "node-2" {
		t.Errorf("node-2's slot Lease changed: %v %v", l, err)
	}
}

// testCoordinatorPrivilege: with a token bound to one of the coordinator's
// pods, its identity may read every Node, write the drain slot grant on
// any, write the slot and election Leases in node-agent, and list a node's
// pods (pkg/recovery); and nothing else of a Node, no Node's status or
// existence, and no pod beyond a list.
func (b *deployBed) testCoordinatorPrivilege(t *testing.T) {
	ctx := t.Context()
	pods := coordinatorPods(t, b.env)
	if len(pods) == 0 {
		t.Fatal("no running node-agent-coordinator pod")
	}
	pod := &pods[0]
	cs := b.tokenClient(t, coordinatorToken(t, b.env, pod))
	who := whoAmI(t, cs)
	t.Logf("token bound to pod %s/%s authenticates as %s, %s=%v", pod.Namespace, pod.Name, who.Username, nodeNameExtra, who.Extra[nodeNameExtra])
	if who.Username != coordinatorUser {
		t.Fatalf("token user %s, want %s", who.Username, coordinatorUser)
	}
	annotate := func(key string, value any) obj { return obj{"metadata": obj{"annotations": obj{key: value}}} }
	grant := (&slots.Grant{ID: "deploy-test", Purpose: slots.PurposeMaintenance, State: slots.Granted, Slot: slots.LeaseName("node-2"), Time: time.Now().UTC().Truncate(time.Second)}).Encode()

	testenv.WaitFor(t, time.Minute, "the coordinator's policy in force", func() (bool, error) {
		err := mergePatchNode(t, cs, "node-2", obj{"metadata": obj{"labels": obj{"deploy-test": "probe"}}}, true)
		return err != nil && strings.Contains(err.Error(), byCoordinatorPolicy), nil
	})
	node2Before := getNode(t, b.c, "node-2")

	t.Run("allowed", func(t *testing.T) {
		wantAllowed(t, "grant node-2 a drain slot", mergePatchNode(t, cs, "node-2", annotate(slots.GrantAnnotation, grant), false))
		wantAllowed(t, "remove the grant again", mergePatchNode(t, cs, "node-2", annotate(slots.GrantAnnotation, nil), false))
		_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		wantAllowed(t, "list every Node", err)
		w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
		wantAllowed(t, "watch every Node", err)
		if err == nil {
			w.Stop()
		}

		leases := cs.CoordinationV1().Leases(agentNamespace)
		_, err = cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-2"})
		wantAllowed(t, "list node-2's pods (a recovering node's DaemonSet pods, slots.pools[].recoveryBound)", err)
		_, err = leases.List(ctx, metav1.ListOptions{LabelSelector: slots.SlotLabel + "=true"})
		wantAllowed(t, "list the slot Leases", err)
		slot := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: slots.LeaseName("node-2"), Labels: map[string]string{slots.SlotLabel: "true"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-2"), LeaseDurationSeconds: ptr.To[int32](60)}}
		_, err = leases.Create(ctx, slot, metav1.CreateOptions{})
		wantAllowed(t, "create node-2's slot Lease", err)
		_, err = leases.Patch(ctx, slot.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+slots.LeaseRecoveringSince+`":"2026-01-01T00:00:00Z"}}}`), metav1.PatchOptions{})
		wantAllowed(t, "patch it (record its holder's recovery)", err)
		wantAllowed(t, "delete it", leases.Delete(ctx, slot.Name, metav1.DeleteOptions{}))

		election := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: coordinatorElectionLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod.Name), LeaseDurationSeconds: ptr.To[int32](15)}}
		_, err = leases.Create(ctx, election, metav1.CreateOptions{})
		wantAllowed(t, "create the election Lease", err)
		got, err := leases.Get(ctx, coordinatorElectionLease, metav1.GetOptions{})
		wantAllowed(t, "get it", err)
		if err == nil {
			got.Spec.HolderIdentity = ptr.To("")
			_, err = leases.Update(ctx, got, metav1.UpdateOptions{})
			wantAllowed(t, "update it (give the lead up)", err)
		}
		// The coordinator started later campaigns afresh.
		if err := b.c.CoordinationV1().Leases(agentNamespace).Delete(ctx, coordinatorElectionLease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}

		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-2.", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-2", UID: "node-2"}, Reason: "DeployTest", Message: "deploy test", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "node-agent-coordinator"}}
		_, err = cs.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
		wantAllowed(t, "create an Event about node-2 in default", err)
	})

	t.Run("denied", func(t *testing.T) {
		const grantOnly = "may change only the annotation " + slots.GrantAnnotation
		wantDenied(t, "label node-2", mergePatchNode(t, cs, "node-2", obj{"metadata": obj{"labels": obj{"team": "virt"}}}, false), "may not change a Node's labels")
		wantDenied(t, "annotate node-2", mergePatchNode(t, cs, "node-2", annotate("example.com/note", "x"), false), grantOnly)
		request := (&slots.Request{Purpose: slots.PurposeMaintenance, ID: "forged", RequestedAt: time.Now().UTC().Truncate(time.Second)}).Encode()
		wantDenied(t, "write a drain slot request on node-2 (the agent's)", mergePatchNode(t, cs, "node-2", annotate(slots.RequestAnnotation, request), false), grantOnly)
		wantDenied(t, "remove node-2's kwok annotation", mergePatchNode(t, cs, "node-2", annotate(testenv.KwokNodeAnnotation, nil), false), grantOnly)
		wantDenied(t, "cordon node-2", mergePatchNode(t, cs, "node-2", obj{"spec": obj{"unschedulable": true}}, false), "may not change a Node's spec")
		wantDenied(t, "add a finalizer to node-2", mergePatchNode(t, cs, "node-2", obj{"metadata": obj{"finalizers": []string{"example.com/hold"}}}, false), "finalizers or owner references")
		wantDenied(t, "grant and cordon node-2 in one patch", mergePatchNode(t, cs, "node-2", obj{
			"metadata": obj{"annotations": obj{slots.GrantAnnotation: grant}}, "spec": obj{"unschedulable": true}}, false), "may not change a Node's spec")

		_, err := cs.CoreV1().Nodes().PatchStatus(ctx, "node-2", fmt.Appendf(nil, `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"x"}]}}`))
		wantDenied(t, "write node-2's status", err, byCoordinatorRBAC+` patch resource "nodes/status"`)
		_, err = cs.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
		wantDenied(t, "get node-2 (the informer lists and watches)", err, byCoordinatorRBAC+` get resource "nodes"`)
		_, err = cs.CoreV1().Nodes().Update(ctx, node2Before, metav1.UpdateOptions{})
		wantDenied(t, "update (not patch) node-2", err, byCoordinatorRBAC+` update resource "nodes"`)
		err = cs.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{})
		wantDenied(t, "delete node-2", err, byCoordinatorRBAC+` delete resource "nodes"`)

		leases := cs.CoordinationV1().Leases(agentNamespace)
		_, err = leases.Get(ctx, slots.LeaseName("node-2"), metav1.GetOptions{})
		wantDenied(t, "get a slot Lease (only the election Lease by name)", err, byCoordinatorRBAC+` get resource "leases"`)
		_, err = leases.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: slots.LeaseName("node-2"), Namespace: agentNamespace}}, metav1.UpdateOptions{})
		wantDenied(t, "update a slot Lease (slots are created and deleted whole)", err, byCoordinatorRBAC+` update resource "leases"`)
		_, err = leases.Watch(ctx, metav1.ListOptions{})
		wantDenied(t, "watch the Leases", err, byCoordinatorRBAC+` watch resource "leases"`)
		_, err = cs.CoordinationV1().Leases("work").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		wantDenied(t, "create a Lease outside node-agent", err, byCoordinatorRBAC+` create resource "leases"`)
		_, err = cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, "node-2", metav1.GetOptions{})
		wantDenied(t, "get node-2's heartbeat Lease", err, byCoordinatorRBAC+` get resource "leases"`)

		_, err = cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-2"})
		wantDenied(t, "watch pods (it lists a recovering node's, slots.pools[].recoveryBound)", err, byCoordinatorRBAC+` watch resource "pods"`)
		_, err = cs.CoreV1().Pods(agentNamespace).Get(ctx, b.agentPod(t, "node-2").Name, metav1.GetOptions{})
		wantDenied(t, "get a pod", err, byCoordinatorRBAC+` get resource "pods"`)
		err = cs.PolicyV1().Evictions(agentNamespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: b.agentPod(t, "node-2").Name, Namespace: agentNamespace}})
		wantDenied(t, "evict a pod", err, byCoordinatorRBAC+` create resource "pods/eviction"`)
		_, err = cs.CoreV1().Events("work").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "x."},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "work", Name: "x"}}, metav1.CreateOptions{})
		wantDenied(t, "create an Event outside default", err, byCoordinatorRBAC+` create resource "events"`)
		_, err = cs.CoreV1().ConfigMaps(agentNamespace).Get(ctx, "node-agent-config", metav1.GetOptions{})
		wantDenied(t, "get the ConfigMap (it is mounted, not read through the API)", err, byCoordinatorRBAC+` get resource "configmaps"`)
	})

	// Confined like the agent (issue 40): Events only about Nodes, only as
	// itself, never another component's; no Node field but the grant, its
	// managedFields included.
	t.Run("denied by its own-events and grant-only policies", func(t *testing.T) {
		events := cs.CoreV1().Events(metav1.NamespaceDefault)
		asKubelet := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-2.", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-2", UID: "node-2"}, Reason: "NodeNotReady", Message: "forged", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "kubelet", Host: "node-2"}}
		_, err := events.Create(ctx, asKubelet, metav1.CreateOptions{})
		wantDenied(t, "create a kubelet Event about node-2", err, byCoordinatorEventsPolicy)
		aboutPod := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "x.", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: metav1.NamespaceDefault, Name: "x"}, Reason: "DeployTest", Message: "forged", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "node-agent-coordinator"}}
		_, err = events.Create(ctx, aboutPod, metav1.CreateOptions{})
		wantDenied(t, "create an Event about a Pod", err, "may record Events only about Nodes")

		// Another component's Event, recorded by the admin: the
		// coordinator may not rewrite it.
		theirs, err := b.c.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, asKubelet, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = b.c.CoreV1().Events(metav1.NamespaceDefault).Delete(context.Background(), theirs.Name, metav1.DeleteOptions{})
		}()
		_, err = events.Patch(ctx, theirs.Name, types.MergePatchType, []byte(`{"message":"rewritten","count":7}`), metav1.PatchOptions{})
		wantDenied(t, "rewrite the kubelet's Event", err, "may change only the Events it recorded about a Node")
		_, err = events.Patch(ctx, theirs.Name, types.MergePatchType, []byte(`{"source":{"component":"node-agent-coordinator","host":""},"message":"taken over"}`), metav1.PatchOptions{})
		wantDenied(t, "take the kubelet's Event over as its own", err, "may change only the Events it recorded about a Node")

		managers := func(n *corev1.Node) []string {
			var m []string
			for _, f := range n.ManagedFields {
				m = append(m, f.Manager+"/"+string(f.Operation)+"/"+f.Subresource)
			}
			slices.Sort(m)
			return m
		}
		before := getNode(t, b.c, "node-2")
		if len(managers(before)) == 0 {
			t.Fatal("node-2 has no managedFields to keep")
		}
		const keep = "may not change a Node's metadata.managedFields"
		wantDenied(t, "clear node-2's managedFields", mergePatchNode(t, cs, "node-2", obj{"metadata": obj{"managedFields": []obj{{}}}}, false), keep)
		wantDenied(t, "clear node-2's managedFields beside a grant", mergePatchNode(t, cs, "node-2", obj{"metadata": obj{
			"managedFields": []obj{{}}, "annotations": obj{slots.GrantAnnotation: grant}}}, false), keep)
		wantDenied(t, "set node-2's generateName", mergePatchNode(t, cs, "node-2", obj{"metadata": obj{"generateName": "forged-"}}, false), keep)
		if after := getNode(t, b.c, "node-2"); !slices.Equal(managers(after), managers(before)) {
			t.Errorf("node-2's field managers changed: %v, were %v", managers(after), managers(before))
		}
	})

	// The policy refuses a Node's deletion and its status on its own,
	// should RBAC ever allow them: grant both for a moment and try with a
	// dry run.
	t.Run("denied by the policy alone", func(t *testing.T) {
		grant := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-coordinator-nodes"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"delete"}},
				{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
			}}
		bind := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-coordinator-nodes"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: grant.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: coordinatorServiceAccount}}}
		if _, err := b.c.RbacV1().ClusterRoles().Create(ctx, grant, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.RbacV1().ClusterRoleBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = b.c.RbacV1().ClusterRoleBindings().Delete(context.Background(), bind.Name, metav1.DeleteOptions{})
			_ = b.c.RbacV1().ClusterRoles().Delete(context.Background(), grant.Name, metav1.DeleteOptions{})
		}()
		dry := []string{metav1.DryRunAll}
		var last error
		testenv.WaitFor(t, 30*time.Second, "RBAC to allow the delete", func() (bool, error) {
			last = cs.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{DryRun: dry})
			return last == nil || !strings.Contains(last.Error(), byCoordinatorRBAC), nil
		})
		wantDenied(t, "delete node-2 with RBAC allowing it (dry run)", last, "never deletes Nodes")
		_, err := cs.CoreV1().Nodes().Patch(ctx, "node-2", types.StrategicMergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"x"}]}}`), metav1.PatchOptions{DryRun: dry}, "status")
		wantDenied(t, "write node-2's status with RBAC allowing it (dry run)", err, "never writes a Node's status")
	})

	node2 := getNode(t, b.c, "node-2")
	if !maps.Equal(node2.Labels, node2Before.Labels) || !maps.Equal(node2.Annotations, node2Before.Annotations) || node2.Spec.Unschedulable || len(node2.Finalizers) != 0 {
		t.Errorf("node-2 changed: labels %v annotations %v unschedulable %t finalizers %v", node2.Labels, node2.Annotations, node2.Spec.Unschedulable, node2.Finalizers)
	}
}

// testCoordinatorRecordsItsEvents: the coordinator as deploy/ runs it
// (its own token, its own-events and grant-only policies in force) refuses
// a reboot slot request, since the shipped configuration leaves reboots off,
// and its recorder's Event about the Node passes the own-events policy
// (checkCoordinator then finds no refused request of it in the audit log).
// The privilege subtest shows what the policy refuses; this one shows that
// it does not refuse what the coordinator really writes.
func (b *deployBed) testCoordinatorRecordsItsEvents(t *testing.T) {
	ctx := t.Context()
	req := &slots.Request{Purpose: slots.PurposeReboot, ID: "deploy-test-refused", RequestedAt: time.Now().UTC().Truncate(time.Second)}
	writeRequest(t, b.c, "node-3", req)
	defer removeRequest(t, b.c, "node-3")
	testenv.WaitFor(t, time.Minute, "node-3's reboot slot request refused", func() (bool, error) {
		g, err := slots.ParseGrant(getNode(t, b.c, "node-3"))
		return err == nil && g.Answers(req) && g.State == slots.Revoked && g.Refused, nil
	})
	testenv.WaitFor(t, time.Minute, "the coordinator's DrainSlotRefused Event about node-3", func() (bool, error) {
		l, err := b.c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=node-3,reason=DrainSlotRefused"})
		if err != nil {
			return false, err
		}
		for _, e := range l.Items {
			if e.Source.Component == "node-agent-coordinator" && strings.Contains(e.Message, "reboot.enabled is false") {
				return true, nil
			}
		}
		return false, nil
	})
}

// runCoordinator starts node-agent-coordinator as one of the Deployment's
// pods on the shipped ConfigMap, for the rest of TestDeploy.
func (b *deployBed) runCoordinator(t *testing.T) {
	t.Helper()
	pods := coordinatorPods(t, b.env)
	if len(pods) == 0 {
		t.Fatal("no running node-agent-coordinator pod")
	}
	cm, err := b.c.CoreV1().ConfigMaps(agentNamespace).Get(t.Context(), "node-agent-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.coordinator = startDeployedCoordinator(t, b.env, &pods[0], cm.Data["config.yaml"])
}

// checkCoordinator: the coordinator granted the drains of the subtests
// before it, every slot is free again, and the apiserver's audit log shows
// every request it made since began granted by deploy/coordinator.yaml's
// RBAC and none refused.
func (b *deployBed) checkCoordinator(t *testing.T, began time.Time) {
	c := b.coordinator
	if c == nil {
		t.Fatal("no coordinator ran")
	}
	if v := scrape(t, c.MetricsAddr, "node_agent_drain_slot_coordinator_leader"); v != 1 {
		t.Errorf("node_agent_drain_slot_coordinator_leader %v, want 1", v)
	}
	grants := scrape(t, c.MetricsAddr, "node_agent_drain_slot_grants_total")
	if grants < 1 {
		t.Errorf("node_agent_drain_slot_grants_total %v: the coordinator granted no drain slot", grants)
	}
	testenv.WaitFor(t, time.Minute, "every drain slot free", func() (bool, error) {
		l, err := b.c.CoordinationV1().Leases(agentNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: slots.SlotLabel + "=true"})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 0, nil
	})
	rss := scrape(t, c.MetricsAddr, "process_resident_memory_bytes")
	t.Logf("node-agent-coordinator %s: %v drain slots granted; RSS %.0f MiB", c.Identity, grants, mib(int64(rss)))

	audit := testenv.NewAuditReader(b.auditLog, "")
	if err := audit.Read(); err != nil {
		t.Fatal(err)
	}
	last := map[string]testenv.AuditEvent{}
	for _, e := range audit.Events() {
		if e.User.Username != coordinatorUser || e.Received.Time.Before(began) || e.ObjectRef == nil {
			continue
		}
		last[e.AuditID] = e
	}
	granted := b.grantedByDeploy(t, coordinatorServiceAccount)
	tally := map[string]map[int]int{}
	for _, e := range last {
		res := e.Resource()
		if e.ObjectRef.APIGroup != "" {
			res = e.ObjectRef.APIGroup + "/" + res
		}
		key := e.Verb + " " + res
		if e.ObjectRef.Namespace != "" {
			key += " in " + e.ObjectRef.Namespace
		}
		code := e.Code()
		if tally[key] == nil {
			tally[key] = map[int]int{}
		}
		tally[key][code]++
		switch code {
		case 401, 403, 422:
			msg := ""
			if e.ResponseStatus != nil {
				msg = e.ResponseStatus.Message
			}
			t.Errorf("the apiserver refused the coordinator's %s with %d: %s", key, code, msg)
		}
		if !granted(e.Verb, e.ObjectRef.APIGroup, res, e.ObjectRef.Namespace, e.ObjectRef.Name) {
			t.Errorf("the coordinator made a request deploy/coordinator.yaml does not grant: %s (name %q)", key, e.ObjectRef.Name)
		}
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(tally)) {
		var codes []string
		for _, code := range slices.Sorted(maps.Keys(tally[k])) {
			codes = append(codes, fmt.Sprintf("%d×%d", tally[k][code], code))
		}
		lines = append(lines, fmt.Sprintf("  %-52s %s", k, strings.Join(codes, " ")))
	}
	t.Logf("audit log: %d requests of node-agent-coordinator, by verb and resource (count×status):\n%s", len(last), strings.Join(lines, "\n"))
	// What granting a drain means: the slot Lease made and deleted, the
	// grant written on the Node.
	for _, want := range []string{"create coordination.k8s.io/leases in " + agentNamespace, "delete coordination.k8s.io/leases in " + agentNamespace, "patch nodes"} {
		if len(tally[want]) == 0 {
			t.Errorf("the coordinator made no %s: it did not grant the drains itself", want)
		}
	}
}
