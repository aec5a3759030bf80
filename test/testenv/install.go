package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	// AgentNamespace and AgentServiceAccount are where deploy/ runs the
	// agent and under which identity.
	AgentNamespace      = "node-agent"
	AgentServiceAccount = "node-agent"
	// agentPodSelector selects the DaemonSet's pods.
	agentPodSelector = "app.kubernetes.io/name=node-agent"
)

// InstallDeploy applies `kubectl kustomize deploy/` as an admin installs
// node-agent: the Namespace first, then the ServiceAccount, RBAC, admission
// policy, ConfigMap, the coordinator's Deployment and the DaemonSet, whose
// pods kwok then runs on every node. The objects are applied server-side
// under the field manager node-agent-install. components names
// deploy/components/ to add, as an admin's overlay would (flowcontrol, say).
func (e *Env) InstallDeploy(tb testing.TB, components ...string) {
	tb.Helper()
	// kubectl is among the tools of bin/, not necessarily beside this
	// control plane's binaries (the 1.37 ones have a directory of their own).
	bin, err := BinDir()
	if err != nil {
		tb.Fatal(err)
	}
	kubectl := filepath.Join(bin, BinKubectl)
	dir := DeployDir(tb)
	if len(components) > 0 {
		overlay := tb.TempDir()
		base, err := filepath.Rel(overlay, dir) // kustomize takes relative paths only
		if err != nil {
			tb.Fatal(err)
		}
		kust := fmt.Sprintf("resources: [%q]\ncomponents:\n", base)
		for _, c := range components {
			kust += fmt.Sprintf("- %q\n", filepath.Join(base, "components", c))
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o600); err != nil {
			tb.Fatal(err)
		}
		dir = overlay
	}
	manifests, err := exec.Command(kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir).Output()
	if err != nil {
		tb.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	for _, o := range DecodeObjects(tb, manifests) {
		if o.GetKind() != "Namespace" {
			continue
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Labels: o.GetLabels()}}
		if _, err := e.Client().CoreV1().Namespaces().Create(tb.Context(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatal(err)
		}
	}
	cmd := exec.Command(kubectl, "--kubeconfig", e.KubeconfigPath(), "apply", "--server-side", "--field-manager=node-agent-install", "-f", "-")
	cmd.Stdin = bytes.NewReader(manifests)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("kubectl apply deploy/: %v\n%s", err, out)
	}
}

// AgentKubeconfig waits until the DaemonSet's pod runs on node, and writes
// into dir a kubeconfig with a token of the agent's ServiceAccount bound to
// that pod, as the kubelet mounts it (InstallDeploy first). An agent run with
// it has exactly the rights deploy/ gives it, and the admission policy
// holds it to its own Node.
func (e *Env) AgentKubeconfig(tb testing.TB, node, dir string) string {
	tb.Helper()
	var pod *corev1.Pod
	WaitFor(tb, 2*time.Minute, "the node-agent DaemonSet pod Running on "+node, func() (bool, error) {
		pods, err := e.Client().CoreV1().Pods(AgentNamespace).List(tb.Context(), metav1.ListOptions{
			LabelSelector: agentPodSelector, FieldSelector: "spec.nodeName=" + node,
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
	tr, err := e.Client().CoreV1().ServiceAccounts(AgentNamespace).CreateToken(tb.Context(), AgentServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](6 * 3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("a token bound to %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	path := filepath.Join(dir, fmt.Sprintf("agent-%s.kubeconfig", node))
	if err := WriteKubeconfig(path, e.TokenConfig(tr.Status.Token)); err != nil {
		tb.Fatal(err)
	}
	return path
}
