package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// workloadTimeout bounds each wait of the workload helpers, within their
// ctx. kwok plays a pod's lifecycle in well under a second, so this guards
// against a hang and measures nothing.
const workloadTimeout = 2 * time.Minute

// PodTemplate is a pod for kwok nodes labelled app=app. It tolerates exactly
// the kwok taint (a pod tolerating everything would be scheduled back onto a
// cordoned node) and, when preferNode is set, prefers that node without
// requiring it, so the replacements of evicted pods can go elsewhere.
func PodTemplate(app, preferNode string) corev1.PodTemplateSpec {
	spec := corev1.PodSpec{
		Containers:  []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		Tolerations: []corev1.Toleration{KwokToleration()},
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

// NewDeployment is a Deployment of replicas PodTemplate(name, preferNode) pods.
func NewDeployment(ns, name string, replicas int32, preferNode string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: PodTemplate(name, preferNode),
		},
	}
}

// NewDaemonSet is a DaemonSet of PodTemplate(name, "") pods.
func NewDaemonSet(ns, name string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: PodTemplate(name, ""),
		},
	}
}

// PodsOn lists the pods of namespace ns bound to node, in all namespaces when
// ns is "". A test that counts its workload names its namespace: where
// deploy/ is installed, the agent's own DaemonSet pod is on every node too.
func PodsOn(ctx context.Context, c kubernetes.Interface, ns, node string) ([]corev1.Pod, error) {
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// RunningPods counts the pods that run and are not being deleted.
func RunningPods(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// PodReady is what a PodDisruptionBudget counts as healthy: running, not
// being deleted, and Ready.
func PodReady(p *corev1.Pod) bool {
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

// CreateDeployment creates NewDeployment(ns, name, replicas, preferNode) and
// returns it as created.
func CreateDeployment(ctx context.Context, tb testing.TB, c kubernetes.Interface, ns, name string, replicas int32, preferNode string) *appsv1.Deployment {
	tb.Helper()
	d, err := c.AppsV1().Deployments(ns).Create(ctx, NewDeployment(ns, name, replicas, preferNode), metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// CreateDaemonSet creates NewDaemonSet(ns, name).
func CreateDaemonSet(ctx context.Context, tb testing.TB, c kubernetes.Interface, ns, name string) {
	tb.Helper()
	if _, err := c.AppsV1().DaemonSets(ns).Create(ctx, NewDaemonSet(ns, name), metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// MinAvailable is a PodDisruptionBudget spec that keeps n pods available.
func MinAvailable(n int32) policyv1.PodDisruptionBudgetSpec {
	return policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(n))}
}

// MaxUnavailable is a PodDisruptionBudget spec that lets n pods be
// unavailable.
func MaxUnavailable(n int32) policyv1.PodDisruptionBudgetSpec {
	return policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(n))}
}

// CreatePDB creates a PodDisruptionBudget named app over the pods labelled
// app=app, and waits until the disruption controller has computed it: all
// expected pods healthy and allowed disruptions. Until then every eviction
// is refused, which would hide whether the agent honours the budget.
func CreatePDB(ctx context.Context, tb testing.TB, c kubernetes.Interface, ns, app string, spec policyv1.PodDisruptionBudgetSpec, expected, allowed int32) {
	tb.Helper()
	spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}, Spec: spec}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	waitWorkload(ctx, tb, fmt.Sprintf("PDB %s to allow %d disruptions of %d pods", app, allowed, expected), func() (bool, error) {
		p, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.ExpectedPods == expected &&
			p.Status.CurrentHealthy == expected && p.Status.DisruptionsAllowed == allowed, nil
	})
}

// WaitRunningOn waits until node has want RunningPods of namespace ns (see
// PodsOn).
func WaitRunningOn(ctx context.Context, tb testing.TB, c kubernetes.Interface, ns, node string, want int) {
	tb.Helper()
	waitWorkload(ctx, tb, fmt.Sprintf("%d running pods of namespace %s on %s", want, ns, node), func() (bool, error) {
		pods, err := PodsOn(ctx, c, ns, node)
		if err != nil {
			return false, err
		}
		if n := RunningPods(pods); n != want {
			return false, fmt.Errorf("%d running", n)
		}
		return true, nil
	})
}

// WaitDeploymentAvailable waits until the Deployment has want replicas
// available and updated.
func WaitDeploymentAvailable(ctx context.Context, tb testing.TB, c kubernetes.Interface, ns, name string, want int32) {
	tb.Helper()
	waitWorkload(ctx, tb, "deployment "+name+" available", func() (bool, error) {
		d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return d.Status.AvailableReplicas == want && d.Status.UpdatedReplicas == want, nil
	})
}

// waitWorkload polls cond until it holds, as Poll does, and fails the test
// when ctx or workloadTimeout ends first.
func waitWorkload(ctx context.Context, tb testing.TB, what string, cond func() (bool, error)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, workloadTimeout)
	defer cancel()
	if err := Poll(ctx, PollInterval, what, cond); err != nil {
		tb.Fatal(err)
	}
}
