package recovery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
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
