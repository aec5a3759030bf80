package integration

import (
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/test/testenv"
)

// identities holds, per control plane, the deploy/ installation whose
// ServiceAccount the agents of that control plane run as.
var identities sync.Map // *testenv.Env -> *deployBed

// installAgentIdentity applies deploy/ (namespace, ServiceAccount, RBAC,
// admission policy, ConfigMap and DaemonSet) to env. From then on startAgent
// runs node-agent with exactly the ServiceAccount's permissions: a token bound
// to the DaemonSet's pod on the agent's node, as the kubelet would mount it.
// So the labelling and maintenance tests prove the shipped privileges too:
// a request they forbid fails the test.
func installAgentIdentity(t *testing.T, env *testenv.Env) {
	t.Helper()
	env.InstallDeploy(t)
	identities.Store(env, &deployBed{env: env, c: env.Client(), kubectl: kubectlBinary(t, testenv.DefaultOptions())})
}

// agentKubeconfig returns the kubeconfig an agent for node runs with: the
// ServiceAccount's pod-bound token where deploy/ is installed, else admin.
func agentKubeconfig(t *testing.T, env *testenv.Env, node string) string {
	t.Helper()
	if _, ok := identities.Load(env); !ok {
		return env.KubeconfigPath()
	}
	path := env.AgentKubeconfig(t, node, t.TempDir())
	t.Logf("node-agent for %s runs as %s with a token bound to its DaemonSet pod", node, agentUser)
	return path
}

// grantPodDelete gives the agent's ServiceAccount pods delete, the one verb
// drain.deleteAfter needs beyond deploy/rbac.yaml.
func grantPodDelete(t *testing.T, env *testenv.Env) {
	t.Helper()
	c := env.Client()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "node-agent-delete-after"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}}},
	}
	if _, err := c.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "node-agent-delete-after"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: agentNamespace, Name: agentServiceAccount}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
