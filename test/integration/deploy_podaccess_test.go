package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// testWithoutImpersonation is issue 22's cluster without constrained
// impersonation, made on the test bed by taking the impersonation rules out
// of deploy/'s ClusterRole (the apiserver then refuses the impersonation
// exactly as one without the feature does). The agent says so once, at
// start, naming the fix; a drain request changes nothing on the Node and is
// reported; once the opt-in component cluster-wide-eviction is applied, the
// drain goes ahead with the ServiceAccount's own grant and says which mode
// it used.
func (b *deployBed) testWithoutImpersonation(t *testing.T) {
	ctx := t.Context()
	c := b.c
	const node = "node-2"

	role, err := c.RbacV1().ClusterRoles().Get(ctx, "node-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saved := role.DeepCopy()
	var kept []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if !strings.HasPrefix(r.Verbs[0], "impersonate") {
			kept = append(kept, r)
		}
	}
	role.Rules = kept
	if _, err := c.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur, err := c.RbacV1().ClusterRoles().Get(context.Background(), "node-agent", metav1.GetOptions{})
		if err == nil {
			cur.Rules = saved.Rules
			_, err = c.RbacV1().ClusterRoles().Update(context.Background(), cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Errorf("restoring the ClusterRole: %v", err)
		}
	})

	kubeconfig := filepath.Join(t.TempDir(), "node-agent.kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, b.env.TokenConfig(b.boundToken(t, b.agentPod(t, node)))); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, b.env, node, "--kubeconfig", kubeconfig, "--shutdown-enabled=false", "--labeller-enabled=false")
	agent.WaitReady(t)
	const noneLine = "drains are refused: the agent cannot reach its node's pods"
	if n := strings.Count(agent.Log(), noneLine); n != 1 {
		t.Fatalf("the agent said %d times that drains are refused, want once at start:\n%s", n, agent.Tail(20))
	}
	for _, l := range strings.Split(agent.Log(), "\n") {
		if strings.Contains(l, noneLine) {
			if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "components/cluster-wide-eviction") {
				t.Errorf("the line is no warning naming the fix: %s", l)
			}
			t.Logf("agent: %s", l)
		}
	}

	if err := patchNode(c, node, `{"metadata":{"annotations":{"`+selfdrain.MaintenanceAnnotation+`":"podaccess test"}}}`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "a MaintenanceStartFailed Event naming the missing access", func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=MaintenanceStartFailed"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "no access to this node's pods") && strings.Contains(e.Message, "the Node is unchanged") {
				t.Logf("Event: %s", e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	n := getNode(t, c, node)
	if n.Spec.Unschedulable || testenv.HasTaint(n, testenv.DrainTaint) || n.Annotations[selfdrain.StatusAnnotation] != "" {
		t.Fatalf("%s changed although the drain was refused: unschedulable %v, taints %v, status %q", node, n.Spec.Unschedulable, n.Spec.Taints, n.Annotations[selfdrain.StatusAnnotation])
	}

	// The admin applies the opt-in component.
	data, err := os.ReadFile(filepath.Join(testenv.DeployDir(t), "components", "cluster-wide-eviction", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := b.run(t, data, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying components/cluster-wide-eviction: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// t.Context() is done by now, so not kubectl through b.run.
		const name = "node-agent-cluster-wide-eviction"
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	var st *selfdrain.Status
	testenv.WaitFor(t, 2*time.Minute, "the drain, retried, to succeed with the cluster-wide grant", func() (bool, error) {
		s, err := selfdrain.ParseStatus(getNode(t, c, node))
		if err != nil || s == nil {
			return false, nil
		}
		st = s
		return s.Phase == selfdrain.PhaseSucceeded, nil
	})
	if st.PodAccess != "cluster-wide" {
		t.Errorf("status podAccess %q, want cluster-wide", st.PodAccess)
	}
	if !strings.Contains(agent.Log(), "a stolen token can evict other nodes' pods") {
		t.Errorf("the agent did not warn that it runs on the cluster-wide grant:\n%s", agent.Tail(20))
	}
	if err := patchNode(c, node, `{"metadata":{"annotations":{"`+selfdrain.MaintenanceAnnotation+`":null}}}`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, node+" uncordoned", func() (bool, error) {
		n := getNode(t, c, node)
		return !n.Spec.Unschedulable && !testenv.HasTaint(n, testenv.DrainTaint), nil
	})
	if err := agent.Stop(t); err != nil {
		t.Errorf("node-agent exited with %v", err)
	}
}
