package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/node-agent/node-agent/pkg/maintenance"

	"github.com/node-agent/node-agent/test/testenv"
)

// nmPolicy is the admission policy for NodeMaintenance objects.
const nmPolicy = "node-agent-own-nodemaintenance"

// applyNodeMaintenanceComponent renders deploy/ with
// components/nodemaintenance, dry-runs it server-side, applies it, and
// checks what `kubectl get nm` shows. overlay is a scratch directory and base
// the path of deploy/ relative to it.
func (b *deployBed) applyNodeMaintenanceComponent(t *testing.T, overlay, base string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(fmt.Sprintf(
		"resources: [%q]\ncomponents: [%q]\n", base, filepath.Join(base, "components", "nodemaintenance"))), 0o600); err != nil {
		t.Fatal(err)
	}
	rendered, err := b.run(t, nil, "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(rendered, []byte("--maintenance-node-maintenance=true")) {
		t.Errorf("the nodemaintenance component does not turn on --maintenance-node-maintenance")
	}
	for _, g := range maintenance.NodeMaintenanceGroups {
		if !bytes.Contains(rendered, []byte("name: nodemaintenances."+g)) {
			t.Errorf("the nodemaintenance component has no CRD in %s", g)
		}
	}
	out, err := b.run(t, rendered, "apply", "--server-side", "--dry-run=server", "--field-manager=node-agent-install", "-f", "-")
	if err != nil {
		t.Fatalf("the nodemaintenance component, server-side dry run: %v", err)
	}
	t.Logf("nodemaintenance component, server-side dry run:\n%s", grepLines(string(out), "nodemaintenance", 5))
	// Only the CRDs for real: the DaemonSet's flag would restart the
	// agents' pods, which the next subtests use.
	installNodeMaintenanceCRDs(t, b.env)

	// The operator's CRD defines no additionalPrinterColumns, so kubectl
	// shows NAME and AGE. Both CRDs have the short name nm, as each group's
	// own CRD does; with both installed kubectl resolves nm to
	// nodemaintenance.kubevirt.io (the first group by name) and warns that
	// it could also mean the other. The default of evictionTimeout is
	// applied.
	for _, g := range maintenance.NodeMaintenanceGroups {
		manifest := fmt.Sprintf(`{"apiVersion":"%s/v1beta1","kind":"NodeMaintenance","metadata":{"name":"columns"},"spec":{"nodeName":"node-3","reason":"columns"}}`, g)
		if _, err := b.run(t, []byte(manifest), "create", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	for _, resource := range []string{"nm", "nodemaintenances.nodemaintenance.medik8s.io", "nodemaintenances.nodemaintenance.kubevirt.io"} {
		cmd := exec.CommandContext(t.Context(), b.kubectl, "--kubeconfig", b.env.KubeconfigPath(), "get", resource)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl get %s: %v\n%s", resource, err, stderr.String())
		}
		t.Logf("kubectl get %s:\n%s%s", resource, stderr.String(), out)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME AGE" || strings.Fields(lines[1])[0] != "columns" {
			t.Errorf("kubectl get %s printed %q, want the header NAME AGE and the object", resource, out)
		}
		if resource == "nm" && !strings.Contains(stderr.String(), "nodemaintenances.nodemaintenance.medik8s.io") {
			t.Errorf("kubectl get nm did not warn that nm could also mean the medik8s group: %q", stderr.String())
		}
	}
	for _, g := range maintenance.NodeMaintenanceGroups {
		out, err := b.run(t, nil, "get", "nodemaintenances."+g, "columns", "-o", "jsonpath={.spec.evictionTimeout}")
		if err != nil || string(out) != "30s" {
			t.Errorf("%s: spec.evictionTimeout = %q (%v), want the default 30s", g, out, err)
		}
		if _, err := b.run(t, nil, "delete", "nodemaintenances."+g, "columns"); err != nil {
			t.Fatal(err)
		}
	}
}

// testNodeMaintenancePrivilege: with a token bound to the pod on node-1, the
// agent's identity may write the status and its own finalizer of
// NodeMaintenance objects naming node-1, in both groups, and nothing else.
func (b *deployBed) testNodeMaintenancePrivilege(t *testing.T) {
	ctx := t.Context()
	admin, err := dynamic.NewForConfig(b.env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	pod := b.agentPod(t, "node-1")
	sa, err := dynamic.NewForConfig(b.env.TokenConfig(b.boundToken(t, pod)))
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := dynamic.NewForConfig(b.env.TokenConfig(b.boundToken(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct{ group, name, node string }{
		{medik8sGroup, "priv-node-1", "node-1"}, {kubevirtGroup, "priv-node-1", "node-1"}, {medik8sGroup, "priv-node-2", "node-2"},
	} {
		if _, err := maintenance.RequestNodeMaintenance(ctx, admin, o.group, o.name, o.node, "privilege test"); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, g := range maintenance.NodeMaintenanceGroups {
			for _, name := range []string{"priv-node-1", "priv-node-2"} {
				// Finalizers first, so the objects go.
				_, _ = admin.Resource(maintenance.NodeMaintenanceGVR(g)).Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				_ = admin.Resource(maintenance.NodeMaintenanceGVR(g)).Delete(context.Background(), name, metav1.DeleteOptions{})
			}
		}
	}()

	patch := func(c dynamic.Interface, group, name string, body any, subresource ...string) error {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Resource(maintenance.NodeMaintenanceGVR(group)).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}, subresource...)
		return err
	}
	finalizers := func(list ...string) obj { return obj{"metadata": obj{"finalizers": list}} }
	status := obj{"status": obj{"phase": "Running", "lastError": "privilege test", "totalpods": 3}}
	byNMPolicy := `ValidatingAdmissionPolicy '` + nmPolicy + `'`

	testenv.WaitFor(t, time.Minute, "the NodeMaintenance policy in force", func() (bool, error) {
		data, _ := json.Marshal(status)
		_, err := sa.Resource(maintenance.NodeMaintenanceGVR(medik8sGroup)).Patch(ctx, "priv-node-2", types.MergePatchType, data,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err != nil && strings.Contains(err.Error(), byNMPolicy), nil
	})

	t.Run("allowed on its own node's objects", func(t *testing.T) {
		for _, g := range maintenance.NodeMaintenanceGroups {
			_, err := sa.Resource(maintenance.NodeMaintenanceGVR(g)).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
			wantAllowed(t, "list "+g+" objects of node-1", err)
			wantAllowed(t, "add its finalizer to "+g+"/priv-node-1", patch(sa, g, "priv-node-1", finalizers(maintenance.NodeMaintenanceFinalizer)))
			wantAllowed(t, "write the status of "+g+"/priv-node-1", patch(sa, g, "priv-node-1", status, "status"))
			wantAllowed(t, "remove its finalizer from "+g+"/priv-node-1", patch(sa, g, "priv-node-1", finalizers()))
		}
	})

	t.Run("denied", func(t *testing.T) {
		wantDenied(t, "add its finalizer to priv-node-2", patch(sa, medik8sGroup, "priv-node-2", finalizers(maintenance.NodeMaintenanceFinalizer)),
			"may change only NodeMaintenance objects of that node")
		wantDenied(t, "write the status of priv-node-2", patch(sa, medik8sGroup, "priv-node-2", status, "status"),
			"may change only NodeMaintenance objects of that node")
		wantDenied(t, "change the reason of priv-node-1", patch(sa, medik8sGroup, "priv-node-1", obj{"spec": obj{"reason": "changed"}}),
			"may not change the spec")
		wantDenied(t, "move priv-node-1 to node-2", patch(sa, medik8sGroup, "priv-node-1", obj{"spec": obj{"nodeName": "node-2"}}),
			"may change only NodeMaintenance objects of that node")
		wantDenied(t, "add a foreign finalizer to priv-node-1", patch(sa, medik8sGroup, "priv-node-1", finalizers("example.com/hold")),
			"only the status and its own finalizer")
		wantDenied(t, "label priv-node-1", patch(sa, medik8sGroup, "priv-node-1", obj{"metadata": obj{"labels": obj{"team": "virt"}}}),
			"only the status and its own finalizer")
		wantDenied(t, "an unbound token writes the status of priv-node-1", patch(unbound, medik8sGroup, "priv-node-1", status, "status"),
			"this token names no node")

		err := sa.Resource(maintenance.NodeMaintenanceGVR(medik8sGroup)).Delete(ctx, "priv-node-1", metav1.DeleteOptions{})
		wantDenied(t, "delete priv-node-1 (ends maintenance)", err, byRBAC+" delete resource \"nodemaintenances\"")
		_, err = maintenance.RequestNodeMaintenance(ctx, sa, medik8sGroup, "self-made", "node-1", "self-inflicted")
		wantDenied(t, "create a NodeMaintenance object for node-1", err, byRBAC+" create resource \"nodemaintenances\"")
		_, err = sa.Resource(maintenance.NodeMaintenanceGVR(medik8sGroup)).Get(ctx, "priv-node-2", metav1.GetOptions{})
		wantDenied(t, "get priv-node-2 (the agent only lists and watches)", err, byRBAC+" get resource \"nodemaintenances\"")
	})

	// The policy refuses DELETE on its own, should RBAC ever allow it.
	t.Run("denied delete by the policy alone", func(t *testing.T) {
		grant := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-delete-nm"},
			Rules: []rbacv1.PolicyRule{{APIGroups: maintenance.NodeMaintenanceGroups, Resources: []string{"nodemaintenances"}, Verbs: []string{"delete"}}}}
		bind := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-delete-nm"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: grant.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: agentServiceAccount}}}
		if _, err := b.c.RbacV1().ClusterRoles().Create(ctx, grant, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.RbacV1().ClusterRoleBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = b.c.RbacV1().ClusterRoleBindings().Delete(ctx, bind.Name, metav1.DeleteOptions{})
			_ = b.c.RbacV1().ClusterRoles().Delete(ctx, grant.Name, metav1.DeleteOptions{})
		}()
		var last error
		testenv.WaitFor(t, 30*time.Second, "RBAC to allow the delete", func() (bool, error) {
			last = sa.Resource(maintenance.NodeMaintenanceGVR(medik8sGroup)).Delete(ctx, "priv-node-1", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			return last == nil || !strings.Contains(last.Error(), byRBAC), nil
		})
		wantDenied(t, "delete priv-node-1 with RBAC allowing it (dry run)", last, "never creates or deletes")
	})

	// What the denied requests would have changed is unchanged.
	for _, name := range []string{"priv-node-1", "priv-node-2"} {
		u, err := admin.Resource(maintenance.NodeMaintenanceGVR(medik8sGroup)).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nm, err := maintenance.NodeMaintenanceFromUnstructured(u)
		if err != nil {
			t.Fatal(err)
		}
		if nm.Spec.Reason != "privilege test" || len(nm.Finalizers) != 0 || len(nm.Labels) != 0 {
			t.Errorf("%s changed: reason %q finalizers %v labels %v", name, nm.Spec.Reason, nm.Finalizers, nm.Labels)
		}
		if name == "priv-node-2" && nm.Status.Phase != "" {
			t.Errorf("priv-node-2 got a status: %+v", nm.Status)
		}
	}
}
