//go:build linux

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/test/testenv"
)

// The workload helpers follow test/integration/workload_test.go.

// podTemplate is a kwok pod that tolerates exactly the kwok taint (a pod
// tolerating everything would go back onto a cordoned node) and, when
// preferNode is set, prefers that node without requiring it, so replacements
// of evicted pods can go elsewhere.
func podTemplate(app, preferNode string) corev1.PodTemplateSpec {
	spec := corev1.PodSpec{
		Containers:  []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		Tolerations: []corev1.Toleration{testenv.KwokToleration()},
	}
	if preferNode != "" {
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{preferNode},
				}}},
			}},
		}}
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: spec}
}

func createDeployment(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string, replicas int32, preferNode string) {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name, preferNode),
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createDaemonSet(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name, ""),
		},
	}
	if _, err := c.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
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

// podsOn lists the pods bound to node, all namespaces.
func podsOn(ctx context.Context, c kubernetes.Interface, node string) ([]corev1.Pod, error) {
	l, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func runningPods(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// podReady is what a PodDisruptionBudget counts as healthy.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

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

// waitFor polls cond until it holds; it fails the test when ctx ends first.
// The test's context is the only bound, so a loaded machine only makes the
// test slower, never failed.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var lastErr error
	for {
		ok, err := cond()
		if err != nil {
			lastErr = err
		} else if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s: %v (last error: %v)", what, ctx.Err(), lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
