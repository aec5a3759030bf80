//go:build linux

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/test/testenv"
)

func createDeployment(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, replicas int32, preferNode string) {
	t.Helper()
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, testenv.NewDeployment(ns, name, replicas, preferNode), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createDaemonSet(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	if _, err := c.AppsV1().DaemonSets(ns).Create(ctx, testenv.NewDaemonSet(ns, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createPDB creates a PodDisruptionBudget over app and waits until the
// disruption controller has computed it for all expected pods: before that
// every eviction is refused, which would hide whether the agent honours it.
func createPDB(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, app string, spec policyv1.PodDisruptionBudgetSpec, expected, allowed int32) {
	t.Helper()
	spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}, Spec: spec}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, fmt.Sprintf("PDB %s to allow %d disruptions of %d pods", app, allowed, expected), func() (bool, error) {
		p, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.ExpectedPods == expected &&
			p.Status.CurrentHealthy == expected && p.Status.DisruptionsAllowed == allowed, nil
	})
}

func podsOn(ctx context.Context, c kubernetes.Interface, node string) ([]corev1.Pod, error) {
	return testenv.PodsOn(ctx, c, node)
}

func runningPods(pods []corev1.Pod) int { return testenv.RunningPods(pods) }

func podReady(p *corev1.Pod) bool { return testenv.PodReady(p) }

func waitRunningOn(ctx context.Context, t *testing.T, c kubernetes.Interface, node string, want int) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("%d running pods on %s", want, node), func() (bool, error) {
		pods, err := podsOn(ctx, c, node)
		return err == nil && runningPods(pods) == want, err
	})
}

func waitDeploymentAvailable(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, want int32) {
	t.Helper()
	waitFor(ctx, t, "deployment "+name+" available", func() (bool, error) {
		d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return d.Status.AvailableReplicas == want && d.Status.UpdatedReplicas == want, nil
	})
}

// waitFor polls cond every 200 ms until it holds; it fails the test when
// ctx ends first. The test's context is the only bound, so a loaded machine
// only makes the test slower, never failed.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	if err := testenv.Poll(ctx, 200*time.Millisecond, what, cond); err != nil {
		t.Fatal(err)
	}
}
