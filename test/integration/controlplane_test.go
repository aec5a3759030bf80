// Package integration holds tests that run node-agent's behaviour against a
// real control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok) started by test/testenv.
package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/test/testenv"
)

// waitTimeout bounds every wait in this file. It is a ceiling for a stuck
// cluster, not a performance expectation.
const waitTimeout = 2 * time.Minute

// TestControlPlane is acceptance 2 of issue 2: the test bed runs real
// components that schedule pods onto kwok nodes, compute PodDisruptionBudget
// status, refuse evictions that would violate it, and finish pod
// termination.
func TestControlPlane(t *testing.T) {
	began := time.Now()
	env := testenv.StartForTest(t, testenv.DefaultOptions())
	t.Logf("control plane started in %s", time.Since(began).Round(time.Millisecond))
	ctx := t.Context()
	client := env.Client()

	version, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("reading /version: %v", err)
	}
	t.Logf("kube-apiserver %s (%s) at %s", version.GitVersion, version.Platform, env.Server())
	for _, c := range env.Components() {
		t.Logf("process %-24s pid=%-7d version=%-8s health=%s", c.Name, c.PID, c.Version, c.URL)
	}

	nodeNames := []string{"node-1", "node-2", "node-3"}
	if err := env.AddNodes(ctx, nodeNames); err != nil {
		t.Fatal(err)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		t.Logf("node %s Ready (kubelet %s, capacity cpu=%s memory=%s pods=%s)", n.Name, n.Status.NodeInfo.KubeletVersion,
			n.Status.Capacity.Cpu(), n.Status.Capacity.Memory(), n.Status.Capacity.Pods())
	}

	const namespace = "acceptance"
	if _, err := env.CreateNamespace(ctx, namespace); err != nil {
		t.Fatal(err)
	}

	const replicas = 20
	selector := map[string]string{"app": "web"}
	if _, err := client.AppsV1().Deployments(namespace).Create(ctx, webDeployment(replicas, selector), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	pods := waitRunningPods(ctx, t, client, namespace, selector, replicas)
	perNode := map[string]int{}
	for _, p := range pods {
		if !slices.Contains(nodeNames, p.Spec.NodeName) {
			t.Errorf("pod %s is on %q, not on one of the kwok nodes", p.Name, p.Spec.NodeName)
		}
		perNode[p.Spec.NodeName]++
	}
	t.Logf("%d pods Running, scheduled as %v", len(pods), perNode)

	// maxUnavailable 0: no voluntary disruption is ever allowed.
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: selector},
		},
	}
	if pdb, err = client.PolicyV1().PodDisruptionBudgets(namespace).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PodDisruptionBudget: %v", err)
	}
	// disruptionsAllowed is 0 before anyone looked at the budget, too; an
	// observedGeneration and pod counts prove the disruption controller
	// computed it.
	var status policyv1.PodDisruptionBudgetStatus
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := client.PolicyV1().PodDisruptionBudgets(namespace).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status = got.Status
		return status.ObservedGeneration == got.Generation && status.ExpectedPods == replicas && status.CurrentHealthy == replicas, nil
	})
	if err != nil {
		t.Fatalf("PodDisruptionBudget status never computed: %v; last status %+v", err, status)
	}
	if status.DisruptionsAllowed != 0 || status.DesiredHealthy != replicas {
		t.Fatalf("PodDisruptionBudget status = %+v, want disruptionsAllowed 0 and desiredHealthy %d", status, replicas)
	}
	t.Logf("PodDisruptionBudget computed by the disruption controller: observedGeneration=%d expectedPods=%d currentHealthy=%d desiredHealthy=%d disruptionsAllowed=%d",
		status.ObservedGeneration, status.ExpectedPods, status.CurrentHealthy, status.DesiredHealthy, status.DisruptionsAllowed)

	victim := pods[0]
	err = client.PolicyV1().Evictions(namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: namespace},
	})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting %s under a PodDisruptionBudget that allows no disruption: got %v, want 429 TooManyRequests", victim.Name, err)
	}
	t.Logf("eviction of %s refused with 429: %v", victim.Name, err)
	if got, err := client.CoreV1().Pods(namespace).Get(ctx, victim.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		t.Fatalf("pod %s after the refused eviction: err=%v deletionTimestamp=%v, want it untouched", victim.Name, err, got.GetDeletionTimestamp())
	}

	// A plain delete is not an eviction and ignores the budget. Without a
	// kubelet the pod would stay Terminating for ever; kwok's pod-delete
	// stage finishes it.
	watcher, err := client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", victim.Name).String(),
		ResourceVersion: victim.ResourceVersion,
	})
	if err != nil {
		t.Fatalf("watching pod %s: %v", victim.Name, err)
	}
	defer watcher.Stop()
	if err := client.CoreV1().Pods(namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod %s: %v", victim.Name, err)
	}
	t.Logf("deleted pod %s (uid %s) on %s with the default grace period", victim.Name, victim.UID, victim.Spec.NodeName)
	if err := waitDeleted(ctx, t, watcher, victim.UID); err != nil {
		t.Fatalf("pod %s: %v", victim.Name, err)
	}
	if _, err := client.CoreV1().Pods(namespace).Get(ctx, victim.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod %s still readable after its DELETED event: %v", victim.Name, err)
	}

	// The ReplicaSet replaces it, and the replacement runs too.
	pods = waitRunningPods(ctx, t, client, namespace, selector, replicas)
	for _, p := range pods {
		if p.UID == victim.UID {
			t.Fatalf("deleted pod %s is listed again", victim.Name)
		}
	}
	t.Logf("ReplicaSet back at %d Running pods", len(pods))
}

// webDeployment returns a Deployment whose pods run on kwok nodes. They
// tolerate the kwok taint and nothing else.
func webDeployment(replicas int32, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{testenv.KwokToleration()},
					Containers: []corev1.Container{{
						Name:  "web",
						Image: "registry.k8s.io/pause:3.10", // never pulled: kwok runs no containers
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("10m"),
							corev1.ResourceMemory: resource.MustParse("16Mi"),
						}},
					}},
				},
			},
		},
	}
}

// waitRunningPods waits until exactly want pods match the selector, none
// terminating, all scheduled and Running, and returns them.
func waitRunningPods(ctx context.Context, t *testing.T, client kubernetes.Interface, namespace string, selector map[string]string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: selector}),
		})
		if err != nil {
			return false, err
		}
		phases := map[string]int{}
		pods = pods[:0]
		for _, p := range list.Items {
			state := string(p.Status.Phase)
			switch {
			case p.DeletionTimestamp != nil:
				state = "Terminating"
			case p.Spec.NodeName == "":
				state = "Unscheduled"
			case p.Status.Phase == corev1.PodRunning:
				pods = append(pods, p)
			}
			phases[state]++
		}
		last = fmt.Sprint(phases)
		return len(pods) == want && len(list.Items) == want, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d Running pods: %v; pods by state: %s", want, err, last)
	}
	return pods
}

// waitDeleted reads watch events until the pod with uid is deleted.
func waitDeleted(ctx context.Context, t *testing.T, w watch.Interface, uid types.UID) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not deleted within %s", waitTimeout)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed before the pod was deleted")
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				return fmt.Errorf("watch error: %v", apierrors.FromObject(ev.Object))
			}
			if pod.UID != uid {
				continue
			}
			switch ev.Type {
			case watch.Modified:
				if pod.DeletionTimestamp != nil {
					t.Logf("pod %s terminating (deletionTimestamp %s, grace %ds, phase %s)", pod.Name,
						pod.DeletionTimestamp.Format(time.RFC3339), ptr.Deref(pod.DeletionGracePeriodSeconds, 0), pod.Status.Phase)
				}
			case watch.Deleted:
				t.Logf("pod %s removed from the API (kwok finished the termination)", pod.Name)
				return nil
			}
		}
	}
}
