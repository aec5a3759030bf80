package testenv

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// These tests run the harness itself against the real binaries; they skip
// like the integration tests when bin/ is empty.

func TestEnv(t *testing.T) {
	RequireBinaries(t, DefaultOptions(), BinKubectl)
	e := StartForTest(t, DefaultOptions())
	ctx := t.Context()
	client := e.Client()

	err := e.AddNode(ctx, "node-1",
		WithNodeLabels(map[string]string{"zone": "a"}),
		WithNodeCapacity(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("10")}))
	if err != nil {
		t.Fatal(err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["zone"] != "a" || node.Labels[corev1.LabelHostname] != "node-1" || node.Annotations[KwokNodeAnnotation] != KwokNodeValue {
		t.Errorf("node metadata = %v %v", node.Labels, node.Annotations)
	}
	if got := node.Status.Allocatable.Cpu().String(); got != "4" {
		t.Errorf("allocatable cpu = %s, want 4", got)
	}

	if _, err := e.CreateNamespace(ctx, "harness"); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "harness"},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{KwokToleration()},
			Containers:  []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := client.CoreV1().Pods("harness").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod, err = waitPodRunning(ctx, client, "harness", "p"); err != nil {
		t.Fatal(err)
	}

	t.Run("pod-bound token carries the node name", func(t *testing.T) {
		tr, err := client.CoreV1().ServiceAccounts("harness").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: ptr.To[int64](600),
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		as := kubernetes.NewForConfigOrDie(e.TokenConfig(tr.Status.Token))
		review, err := as.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		user := review.Status.UserInfo
		if user.Username != "system:serviceaccount:harness:default" {
			t.Errorf("username = %s", user.Username)
		}
		if got := user.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != "node-1" {
			t.Errorf("extra node-name = %v, want [node-1]; extra = %v", got, user.Extra)
		}
		claims := jwtClaims(t, tr.Status.Token)
		if claims.Issuer != ServiceAccountIssuer {
			t.Errorf("issuer = %s", claims.Issuer)
		}
	})

	t.Run("RBAC applies to other users", func(t *testing.T) {
		cfg, err := e.UserConfig("nobody")
		if err != nil {
			t.Fatal(err)
		}
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("listing nodes as a user without roles: %v, want 403", err)
		}
	})

	t.Run("kubectl works with the admin kubeconfig", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, filepath.Join(e.opts.BinDir, BinKubectl), "--kubeconfig", e.KubeconfigPath(), "get", "nodes", "-o", "name").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "node/node-1" {
			t.Errorf("kubectl get nodes: %v: %s", err, out)
		}
	})

	t.Run("RestartAPIServer", func(t *testing.T) {
		before := e.apiserver.proc.pid()
		if err := e.RestartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		if after := e.apiserver.proc.pid(); after == before {
			t.Errorf("kube-apiserver pid %d unchanged", after)
		}
		if _, err := client.CoreV1().Pods("harness").Get(ctx, "p", metav1.GetOptions{}); err != nil {
			t.Errorf("the admin client after the restart: %v", err)
		}
		// The controllers and kwok reconnect: a new pod still runs.
		p2 := pod.DeepCopy()
		p2.ObjectMeta = metav1.ObjectMeta{Name: "p2", Namespace: "harness"}
		p2.Spec.NodeName = ""
		if _, err := client.CoreV1().Pods("harness").Create(ctx, p2, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := waitPodRunning(ctx, client, "harness", "p2"); err != nil {
			t.Fatal(err)
		}
		if err := e.Err(); err != nil {
			t.Errorf("a component died across the restart: %v", err)
		}
	})

	t.Run("Stop ends every process", func(t *testing.T) {
		comps := e.Components()
		if err := e.Stop(); err != nil {
			t.Fatal(err)
		}
		for _, c := range comps {
			if err := syscall.Kill(c.PID, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("%s (pid %d) still exists after Stop: %v", c.Name, c.PID, err)
			}
		}
	})
}

// TestEnvGeneralPodStages checks that the pod/general stages load and that a
// pod with a grace period still goes away.
func TestEnvGeneralPodStages(t *testing.T) {
	opts := DefaultOptions()
	opts.PodStages = PodStagesGeneral
	e := StartForTest(t, opts)
	ctx := t.Context()
	client := e.Client()
	if err := e.AddNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			Tolerations:                   []corev1.Toleration{KwokToleration()},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitPodRunning(ctx, client, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("pod not deleted: %v", err)
	}
}

// TestEnvPodStageDelays checks the delay annotations under the fast pod
// stages: an annotated pod waits, a pod without them does not, and a short
// delay ends. The long delays are long enough that the checks made while
// they run never depend on how fast the machine is.
func TestEnvPodStageDelays(t *testing.T) {
	e := StartForTest(t, DefaultOptions())
	ctx := t.Context()
	client := e.Client()
	if err := e.AddNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	ns := metav1.NamespaceDefault
	create := func(name string, annotations map[string]string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
			Spec: corev1.PodSpec{
				NodeName:    "node-1",
				Tolerations: []corev1.Toleration{KwokToleration()},
				Containers:  []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}},
			},
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) *corev1.Pod {
		t.Helper()
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitGone := func(name string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return get(name) == nil, nil
		})
		if err != nil {
			t.Fatalf("pod %s not deleted: %v", name, err)
		}
	}
	del := func(name string) {
		t.Helper()
		if err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Start: the annotated pod, created first, is still Pending when the
	// other one runs.
	create("late", map[string]string{PodReadyDelayAnnotation: "10m"})
	create("prompt", nil)
	if _, err := waitPodRunning(ctx, client, ns, "prompt"); err != nil {
		t.Fatal(err)
	}
	if p := get("late"); p.Status.Phase != corev1.PodPending {
		t.Errorf("pod with %s=10m is %s when a pod created after it runs, want Pending", PodReadyDelayAnnotation, p.Status.Phase)
	}

	// Deletion: the annotated pod, deleted first, is still Terminating when
	// the other one is gone; a short delay ends.
	create("lingering", map[string]string{PodDeleteDelayAnnotation: "10m"})
	create("brief", map[string]string{PodDeleteDelayAnnotation: "1s"})
	for _, name := range []string{"lingering", "brief"} {
		if _, err := waitPodRunning(ctx, client, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	del("lingering")
	del("prompt")
	waitGone("prompt")
	if p := get("lingering"); p == nil || p.DeletionTimestamp == nil {
		t.Errorf("pod with %s=10m is gone or not Terminating when a pod deleted after it is gone: %v", PodDeleteDelayAnnotation, p)
	}
	del("brief")
	waitGone("brief")
}

func waitPodRunning(ctx context.Context, client kubernetes.Interface, namespace, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		return nil, errors.Join(errors.New("pod "+namespace+"/"+name+" not Running"), err)
	}
	return pod, nil
}

type claims struct {
	Issuer string `json:"iss"`
}

func jwtClaims(t *testing.T, token string) claims {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c claims
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}
