package recovery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/gates"
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
		{name: "a DaemonSet pod not ready outside the pool's namespaces does not count", node: node(corev1.ConditionTrue), healthy: true,
			checker: Checker{Namespaces: map[string][]string{"all": {"kube-system"}}, Pods: lister([]corev1.Pod{pod("ds-1", "DaemonSet", true),
				pod("tenant-ds", "DaemonSet", false, func(p *corev1.Pod) { p.Namespace = "tenant" })}, nil)}},
		{name: "a DaemonSet pod not ready inside the pool's namespaces holds", node: node(corev1.ConditionTrue),
			checker: Checker{Namespaces: map[string][]string{"all": {"kube-system"}, "gpu": {"tenant"}}, Pods: lister([]corev1.Pod{pod("ds-2", "DaemonSet", false),
				pod("tenant-ds", "DaemonSet", false, func(p *corev1.Pod) { p.Namespace = "tenant" })}, nil)},
			reason: "1 DaemonSet pod(s) not Ready: kube-system/ds-2"},
		{name: "pods cannot be listed: fails closed", node: node(corev1.ConditionTrue),
			checker: Checker{Pods: lister(nil, errors.New("forbidden"))}, reason: "cannot list the pods of node n1"},
		{name: "probes pass", node: node(corev1.ConditionTrue), checker: Checker{Probes: map[string][]Probe{"all": {passes, passes}}}, healthy: true},
		{name: "a probe holds", node: node(corev1.ConditionTrue), checker: Checker{Probes: map[string][]Probe{"all": {passes, holds, counted}}}, reason: "pool all: etcd has no quorum"},
		{name: "a probe cannot answer: fails closed", node: node(corev1.ConditionTrue), checker: Checker{Probes: map[string][]Probe{"all": {fails}}}, reason: "pool all: health check 1 cannot answer: prometheus unreachable"},
		{name: "probes wait for the node", node: node(corev1.ConditionFalse), checker: Checker{Probes: map[string][]Probe{"all": {counted}}}, reason: "not Ready"},
		{name: "a long reason is cut", node: node(corev1.ConditionTrue), checker: Checker{Probes: map[string][]Probe{"all": {func(context.Context, string) (string, error) { return strings.Repeat("x", 5000), nil }}}},
			reason: "pool all: xxx"},
		{name: "another pool's probes are not asked", node: node(corev1.ConditionTrue), checker: Checker{Probes: map[string][]Probe{"all": {passes}, "gpu": {counted, holds}}}, healthy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.checker.Check(t.Context(), tc.node, "all")
			if len(got.Reason) > MaxReason {
				t.Errorf("reason of %d bytes, more than %d", len(got.Reason), MaxReason)
			}
			if got.Healthy != tc.healthy || !strings.Contains(got.Reason, tc.reason) || (tc.healthy && got.Reason != "") {
				t.Errorf("Check = %+v, want healthy %v with a reason containing %q", got, tc.healthy, tc.reason)
			}
		})
	}
	if asked != 0 {
		t.Errorf("a probe was asked %d times after an earlier check failed", asked)
	}
}

// TestPromQL asks a Prometheus that answers the gates' queries (the API's
// instant query, as pkg/gates reads it).
func TestPromQL(t *testing.T) {
	answers := map[string]string{
		"etcd_server_has_leader == 0": `{"status":"success","data":{"resultType":"vector","result":[]}}`,
		"up == 0":                     `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"cni"},"value":[1764100000,"0"]}]}}`,
	}
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := answers[r.URL.Query().Get("query")]
		if !ok {
			http.Error(w, "no such query", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(prom.Close)
	for _, tc := range []struct {
		name   string
		gates  []gates.Gate
		reason string
	}{
		{name: "no series: passes", gates: []gates.Gate{{Name: "etcd", Query: "etcd_server_has_leader == 0"}}},
		{name: "a series: holds", gates: []gates.Gate{{Name: "etcd", Query: "etcd_server_has_leader == 0"}, {Name: "targets", Query: "up == 0"}},
			reason: `gate targets (up == 0) has 1 series: {__name__="up", job="cni"} 0`},
		{name: "a query Prometheus refuses: holds", gates: []gates.Gate{{Name: "bad", Query: "bad("}}, reason: "gate bad (bad() could not be asked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, err := PromQL(gates.Prometheus{URL: prom.URL, Gates: tc.gates})(t.Context(), "n1")
			if err != nil || !strings.HasPrefix(why, tc.reason) || (tc.reason == "") != (why == "") {
				t.Errorf("PromQL = %q, %v; want %q", why, err, tc.reason)
			}
		})
	}
}

// TestDaemonSetPodsNotReadyNamespaces: a DaemonSet pod that is not Ready
// holds only from a listed namespace; an empty list counts every namespace.
func TestDaemonSetPodsNotReadyNamespaces(t *testing.T) {
	in := func(ns string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Namespace = ns } }
	tenant := pod("stuck", "DaemonSet", false, in("tenant"))
	cni := pod("cni", "DaemonSet", false)
	ready := pod("csi", "DaemonSet", true, in("storage"))
	for _, tc := range []struct {
		name       string
		pods       []corev1.Pod
		namespaces []string
		reason     string
	}{
		{name: "outside the list: does not hold", pods: []corev1.Pod{tenant, ready}, namespaces: []string{"kube-system", "storage"}},
		{name: "inside the list: holds", pods: []corev1.Pod{tenant, cni, ready}, namespaces: []string{"kube-system", "storage"},
			reason: "1 DaemonSet pod(s) not Ready: kube-system/cni"},
		{name: "empty list: every namespace", pods: []corev1.Pod{tenant, cni, ready},
			reason: "2 DaemonSet pod(s) not Ready: kube-system/cni, tenant/stuck"},
		{name: "listed, all Ready", pods: []corev1.Pod{ready}, namespaces: []string{"storage"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DaemonSetPodsNotReady(tc.pods, tc.namespaces); got != tc.reason {
				t.Errorf("DaemonSetPodsNotReady = %q, want %q", got, tc.reason)
			}
		})
	}
}

// TestCountedNamespaces: a node of several pools counts the union of their
// namespaces, and every namespace when any of them lists none.
func TestCountedNamespaces(t *testing.T) {
	byPool := map[string][]string{"all": {"kube-system", "storage"}, "gpu": {"gpu-operator", "kube-system"}, "open": nil}
	for _, tc := range []struct {
		name  string
		pools []string
		want  []string
	}{
		{name: "one pool", pools: []string{"all"}, want: []string{"kube-system", "storage"}},
		{name: "two pools: the union", pools: []string{"gpu", "all"}, want: []string{"gpu-operator", "kube-system", "storage"}},
		{name: "a pool that lists none: every namespace", pools: []string{"all", "open"}},
		{name: "a pool missing from the map: every namespace", pools: []string{"gpu", "unknown"}},
		{name: "no pool: every namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CountedNamespaces(byPool, tc.pools); !slices.Equal(got, tc.want) {
				t.Errorf("CountedNamespaces(%v) = %v, want %v", tc.pools, got, tc.want)
			}
		})
	}
}
