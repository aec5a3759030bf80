package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/hooks"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// The tenant of testTenant: a ServiceAccount of namespace work that may
// run pods and set budgets on them there, and nothing else.
const (
	tenantNamespace = "work"
	tenantName      = "tenant"
	tenantUser      = "system:serviceaccount:" + tenantNamespace + ":" + tenantName
	byTenantRBAC    = `User "` + tenantUser + `" cannot`
)

// testTenant is issue 30's tenant check on the real control plane with
// deploy/ as shipped, the coordinator and the agents running as their own
// ServiceAccounts: a tenant who may only run pods and PodDisruptionBudgets
// in its namespace can touch no Node, slot Lease, grant or configuration,
// and the most it can do to maintenance (a budget that allows nothing on
// node-2) holds node-2's drain until drain.timeout and no longer: node-1's
// maintenance, waiting for the only slot, starts after that timeout, and
// node-2's condition names the budget. Nor can it write the hooks or owner
// requests of issue 44 on a Node. (node-3 runs the coordinator's pods,
// which no subtest drains: placeCoordinator.)
func (b *deployBed) testTenant(t *testing.T) {
	ctx := t.Context()
	c := b.c
	tenant := b.tenantClient(t)

	t.Run("what a tenant cannot touch", func(t *testing.T) {
		_, err := tenant.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
		wantDenied(t, "read node-2", err, byTenantRBAC)
		forged := &slots.Grant{ID: "x", Purpose: slots.PurposeMaintenance, State: slots.Granted, Slot: slots.LeaseName("node-3"), Time: time.Now()}
		err = mergePatchNode(t, tenant, "node-3", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: forged.Encode()}}}, true)
		wantDenied(t, "grant node-3 a drain slot", err, byTenantRBAC)
		err = mergePatchNode(t, tenant, "node-2", obj{"spec": obj{"unschedulable": false}}, true)
		wantDenied(t, "uncordon node-2", err, byTenantRBAC)
		// Issue 44's Node annotations are the admins' and their
		// controllers': a tenant can neither hold a node's maintenance
		// with a hook nor ask for one as an owner.
		for _, phase := range hooks.Phases {
			err = mergePatchNode(t, tenant, "node-2", obj{"metadata": obj{"annotations": obj{phase.Prefix() + "tenant": "tenant"}}}, true)
			wantDenied(t, "hold node-2 with a "+string(phase)+" hook", err, byTenantRBAC)
		}
		ownerKey, kerr := maintenance.OwnerKey("tenant")
		if kerr != nil {
			t.Fatal(kerr)
		}
		err = mergePatchNode(t, tenant, "node-2", obj{"metadata": obj{"annotations": obj{ownerKey: "tenant's maintenance"}}}, true)
		wantDenied(t, "ask for node-2's maintenance as an owner", err, byTenantRBAC)
		_, err = tenant.CoordinationV1().Leases(agentNamespace).List(ctx, metav1.ListOptions{})
		wantDenied(t, "list the drain slot Leases", err, byTenantRBAC)
		_, err = tenant.CoordinationV1().Leases(agentNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: slots.LeaseName("node-3"), Namespace: agentNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-3")}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		wantDenied(t, "create a slot Lease", err, byTenantRBAC)
		_, err = tenant.CoreV1().ConfigMaps(agentNamespace).Get(ctx, "node-agent-config", metav1.GetOptions{})
		wantDenied(t, "read node-agent's configuration", err, byTenantRBAC)
		// Its own namespace's Leases are its own, and not slots.
		_, err = tenant.CoordinationV1().Leases(tenantNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: slots.LeaseName("node-3"), Namespace: tenantNamespace, Labels: map[string]string{slots.SlotLabel: "true"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-3")}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		wantDenied(t, "create a Lease in its own namespace (not granted)", err, byTenantRBAC)
	})

	// The tenant's workload on node-2 (the other nodes cordoned while it
	// is placed) under a budget that allows no eviction at all.
	for _, n := range []string{"node-1", "node-3"} {
		if err := patchNode(c, n, `{"spec":{"unschedulable":true}}`); err != nil {
			t.Fatal(err)
		}
	}
	const replicas = 2
	testenv.CreateDeployment(ctx, t, tenant, tenantNamespace, "held", replicas, "node-2")
	testenv.WaitRunningOn(ctx, t, c, tenantNamespace, "node-2", replicas)
	for _, n := range []string{"node-1", "node-3"} {
		if err := patchNode(c, n, `{"spec":{"unschedulable":false}}`); err != nil {
			t.Fatal(err)
		}
	}
	testenv.CreatePDB(ctx, t, tenant, tenantNamespace, "held", testenv.MinAvailable(replicas), replicas, 0)
	t.Cleanup(func() {
		// t.Context() is done by now. The pods go before the subtest
		// ends: a later drain of node-2 must not meet them.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.PolicyV1().PodDisruptionBudgets(tenantNamespace).Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the tenant's budget: %v", err)
		}
		if err := c.AppsV1().Deployments(tenantNamespace).Delete(ctx, "held", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
			t.Errorf("deleting the tenant's Deployment: %v", err)
		}
		for ctx.Err() == nil {
			pods, err := c.CoreV1().Pods(tenantNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=held"})
			if err == nil && len(pods.Items) == 0 {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("the tenant's pods are still there after 2m")
	})

	// The agents of node-2 and node-1, each with a token bound to its own
	// DaemonSet pod and the shipped configuration, but a short timeout.
	const timeout = 20 * time.Second
	dir := t.TempDir()
	for _, node := range []string{"node-1", "node-2"} {
		cfgFile, kubeconfig := b.agentFiles(t, dir, node)
		a := startAgent(t, b.env, node, "--config", cfgFile, "--kubeconfig", kubeconfig, "--labeller-enabled=false",
			"--shutdown-enabled=false", "--drain-timeout", timeout.String())
		a.WaitReady(t)
		t.Cleanup(func() {
			if err := a.Stop(t); err != nil {
				t.Errorf("node-agent on %s exited with %v after SIGTERM", node, err)
			}
			if lines := grepLines(a.Log(), "forbidden", 5); lines != "" {
				t.Errorf("node-agent on %s was refused requests:\n%s", node, lines)
			}
		})
	}
	t.Cleanup(func() {
		for _, node := range []string{"node-1", "node-2"} {
			if out, err := cli(t, b.env, "stop", node, "--wait"); err != nil {
				t.Errorf("maintenance stop %s: %v\n%s", node, err, out)
			}
			// The ended record stays on the Node; the subtests after
			// this one want node-2 as they had it.
			if err := patchNode(c, node, `{"metadata":{"annotations":{"`+selfdrain.StatusAnnotation+`":null}}}`); err != nil {
				t.Errorf("removing the tenant test's maintenance record from %s: %v", node, err)
			}
		}
	})

	if out, err := cli(t, b.env, "start", "node-2", "--reason", "tenant test: held"); err != nil {
		t.Fatalf("maintenance start node-2: %v\n%s", err, out)
	}
	testenv.WaitFor(t, time.Minute, "node-2 draining", func() (bool, error) {
		st := nodeStatus(t, c, "node-2")
		return st.Active() && st.Phase == selfdrain.PhaseRunning, nil
	})
	if out, err := cli(t, b.env, "start", "node-1", "--reason", "tenant test: next"); err != nil {
		t.Fatalf("maintenance start node-1: %v\n%s", err, out)
	}
	var s2 *selfdrain.Status
	testenv.WaitFor(t, 3*time.Minute, "node-1 drained after node-2's timeout", func() (bool, error) {
		s2 = nodeStatus(t, c, "node-2")
		s1 := nodeStatus(t, c, "node-1")
		if s2.Phase == selfdrain.PhaseRunning && s1.Active() && s1.Phase == selfdrain.PhaseRunning {
			t.Errorf("node-2 and node-1 drain at once with slots.limit 1")
		}
		// node-1's record of testAgent's maintenance stays, ended.
		return s1.Active() && s1.Phase == selfdrain.PhaseSucceeded, nil
	})
	s1 := nodeStatus(t, c, "node-1")
	if s2.Phase != selfdrain.PhaseFailed {
		t.Errorf("node-2 is %s once node-1 drained, want Failed at its timeout", s2.Phase)
	}
	if s2.DrainStartTime == nil || s1.DrainStartTime == nil {
		t.Fatalf("drain start times missing: node-2 %s, node-1 %s", s2.Encode(), s1.Encode())
	}
	// Start times are whole seconds: a second of slack.
	if timedOut := s2.DrainStartTime.Add(timeout - time.Second); s1.DrainStartTime.Time.Before(timedOut) {
		t.Errorf("node-1's drain began at %s, before node-2's drain.timeout passed at %s", s1.DrainStartTime, timedOut)
	}
	t.Logf("node-2's drain began at %s and failed at its timeout; node-1's began at %s",
		s2.DrainStartTime.UTC().Format(time.RFC3339), s1.DrainStartTime.UTC().Format(time.RFC3339))
	cond := nodeCondition(getNode(t, c, "node-2"))
	if cond == nil || !strings.Contains(cond.Message, "PodDisruptionBudget "+tenantNamespace+"/held") {
		t.Errorf("node-2's condition %+v does not name the tenant's budget", cond)
	} else {
		t.Logf("node-2's condition: %s: %s", cond.Reason, cond.Message)
	}
	if pods, err := testenv.PodsOn(ctx, c, tenantNamespace, "node-2"); err != nil || len(pods) < replicas {
		t.Errorf("the tenant's pods on node-2 after the timeout: %d, %v; want %d kept by their budget", len(pods), err, replicas)
	}
}

// tenantClient creates the tenant's ServiceAccount, a Role over pods,
// Deployments and PodDisruptionBudgets in its namespace and nothing else,
// and returns a client with a token of it.
func (b *deployBed) tenantClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	if _, err := b.c.CoreV1().ServiceAccounts(tenantNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: tenantName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	if _, err := b.c.RbacV1().Roles(tenantNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: tenantName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: all},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets"}, Verbs: all},
			{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: all},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.RbacV1().RoleBindings(tenantNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: tenantName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: tenantName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: tenantName, Namespace: tenantNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := b.c.CoreV1().ServiceAccounts(tenantNamespace).CreateToken(ctx, tenantName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b.tokenClient(t, tr.Status.Token)
}
