package integration

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	b := &deployBed{env: env, c: env.Client(), kubectl: kubectlBinary(t, testenv.DefaultOptions())}
	manifests, err := b.run(t, nil, "kustomize", testenv.DeployDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var namespace []*unstructured.Unstructured
	for _, o := range testenv.DecodeObjects(t, manifests) {
		if o.GetKind() == "Namespace" {
			namespace = append(namespace, o)
		}
	}
	if _, err := b.run(t, asList(t, namespace), "apply", "--server-side", "--field-manager=node-agent-install", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.run(t, manifests, "apply", "--server-side", "--field-manager=node-agent-install", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	identities.Store(env, b)
}

// agentKubeconfig returns the kubeconfig an agent for node runs with: the
// ServiceAccount's pod-bound token where deploy/ is installed, else admin.
func agentKubeconfig(t *testing.T, env *testenv.Env, node string) string {
	t.Helper()
	v, ok := identities.Load(env)
	if !ok {
		return env.KubeconfigPath()
	}
	b := v.(*deployBed)
	var pod *corev1.Pod
	testenv.WaitFor(t, 2*time.Minute, "the node-agent DaemonSet pod on "+node, func() (bool, error) {
		pods, err := b.c.CoreV1().Pods(agentNamespace).List(t.Context(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=node-agent", FieldSelector: "spec.nodeName=" + node,
		})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	path := filepath.Join(t.TempDir(), "agent.kubeconfig")
	if err := testenv.WriteKubeconfig(path, env.TokenConfig(b.boundToken(t, pod))); err != nil {
		t.Fatal(err)
	}
	t.Logf("node-agent for %s runs as %s with a token bound to pod %s", node, agentUser, pod.Name)
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
