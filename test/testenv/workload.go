package testenv

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

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

// PodsOn lists the pods bound to node, in all namespaces.
func PodsOn(ctx context.Context, c kubernetes.Interface, node string) ([]corev1.Pod, error) {
	l, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
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
