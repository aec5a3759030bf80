package recovery

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func node(ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletNotReady"}}
	}
	return n
}

func pod(name, ownerKind string, ready bool, mutate ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}
	if ownerKind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: ownerKind, Name: "owner", Controller: ptr.To(true)}}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	for _, m := range mutate {
		m(&p)
	}
	return p
}

func lister(pods []corev1.Pod, err error) PodLister {
	return func(context.Context, string) ([]corev1.Pod, error) { return pods, err }
}

func TestCheck(t *testing.T) {
	passes := func(context.Context, string) (string, error) { return "", nil }
	holds := func(context.Context, string) (string, error) { return "etcd has no quorum", nil }
	fails := func(context.Context, string) (string, error) { return "", errors.New("prometheus unreachable") }
	asked := 0
	counted := func(context.Context, string) (string, error) { asked++; return "", nil }
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		checker Checker
		healthy bool
		reason  string
	}{
		{name: "ready, no pods, no probes", node: node(corev1.ConditionTrue), checker: Checker{Pods: lister(nil, nil)}, healthy: true},
		{name: "not ready", node: node(corev1.ConditionFalse), checker: Checker{}, reason: "node n1 is not Ready (False: KubeletNotReady)"},
		{name: "unknown", node: node(corev1.ConditionUnknown), checker: Checker{}, reason: "not Ready (Unknown"},
		{name: "no Ready condition", node: node(""), checker: Checker{}, reason: "reports no Ready condition"},
		{name: "DaemonSet pods ready; others not, which do not count", node: node(corev1.ConditionTrue), healthy: true,
			checker: Checker{Pods: lister([]corev1.Pod{pod("ds-1", "DaemonSet", true), pod("rs-1", "ReplicaSet", false), pod("bare", "", false)}, nil)}},
		{name: "a DaemonSet pod not ready", node: node(corev1.ConditionTrue),
			checker: Checker{Pods: lister([]corev1.Pod{pod("ds-1", "DaemonSet", true), pod("ds-2", "DaemonSet", false)}, nil)},
			reason:  "1 DaemonSet pod(s) not Ready: kube-system/ds-2"},
		{name: "ending DaemonSet pods do not count", node: node(corev1.ConditionTrue), healthy: true,
			checker: Checker{Pods: lister([]corev1.Pod{
				pod("gone", "DaemonSet", false, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }),
				pod("done", "DaemonSet", false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
				pod("failed", "DaemonSet", false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
			}, nil)}},
		{name: "many not ready: a few named", node: node(corev1.ConditionTrue),
			checker: Checker{Pods: lister([]corev1.Pod{pod("d", "DaemonSet", false), pod("c", "DaemonSet", false), pod("b", "DaemonSet", false), pod("a", "DaemonSet", false), pod("e", "DaemonSet", false)}, nil)},
			reason:  "5 DaemonSet pod(s) not Ready: kube-system/a, kube-system/b, kube-system/c and 2 more"},
		{name: "pods cannot be listed: fails closed", node: node(corev1.ConditionTrue),
			checker: Checker{Pods: lister(nil, errors.New("forbidden"))}, reason: "cannot list the pods of node n1"},
		{name: "probes pass", node: node(corev1.ConditionTrue), checker: Checker{Probes: []Probe{passes, passes}}, healthy: true},
		{name: "a probe holds", node: node(corev1.ConditionTrue), checker: Checker{Probes: []Probe{passes, holds, counted}}, reason: "etcd has no quorum"},
		{name: "a probe cannot answer: fails closed", node: node(corev1.ConditionTrue), checker: Checker{Probes: []Probe{fails}}, reason: "health check 1 cannot answer: prometheus unreachable"},
		{name: "probes wait for the node", node: node(corev1.ConditionFalse), checker: Checker{Probes: []Probe{counted}}, reason: "not Ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.checker.Check(t.Context(), tc.node)
			if got.Healthy != tc.healthy || !strings.Contains(got.Reason, tc.reason) || (tc.healthy && got.Reason != "") {
				t.Errorf("Check = %+v, want healthy %v with a reason containing %q", got, tc.healthy, tc.reason)
			}
		})
	}
	if asked != 0 {
		t.Errorf("a probe was asked %d times after an earlier check failed", asked)
	}
}
