package podaccess

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// TestCheckOwnNode is the start's one read of the own Node: who reads it
// from then on, and which answers end the agent.
func TestCheckOwnNode(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	noNodeAuthorizer := apierrors.NewForbidden(nodes, "node-1", errors.New(`User "system:node:node-1" cannot get resource "nodes"`))
	impersonation := apierrors.NewForbidden(nodes, "node-1", errors.New(`User "system:serviceaccount:node-agent:node-agent" cannot impersonate-on:associated-node:get resource "nodes"`))
	saRefused := apierrors.NewForbidden(nodes, "node-1", errors.New(`User "system:serviceaccount:node-agent:node-agent" cannot get resource "nodes"`))
	unreachable := errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	for _, tt := range []struct {
		name          string
		nodeErr, sErr error
		want          Reader
		wantErr       string // a part of the error; "" for none
	}{
		{"the node reads it", nil, nil, ReaderNode, ""},
		{"no Node authorizer: the ServiceAccount reads it", noNodeAuthorizer, nil, ReaderServiceAccount, ""},
		{"impersonation refused: the ServiceAccount reads it", impersonation, nil, ReaderServiceAccount, ""},
		{"refused to both: the missing right is named", noNodeAuthorizer, saRefused, ReaderServiceAccount, "grant the agent's ServiceAccount get, list and watch on nodes"},
		{"not reachable: no answer about rights, the informer retries", unreachable, nil, ReaderNode, ""},
		{"not found: the Node is not registered yet", apierrors.NewNotFound(nodes, "node-1"), nil, ReaderNode, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
			own, asNode := fake.NewClientset(node1), fake.NewClientset(node1)
			fail := func(c *fake.Clientset, err error) {
				if err != nil {
					c.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
				}
			}
			fail(asNode, tt.nodeErr)
			fail(own, tt.sErr)
			c := OwnNodeReads(kubetest.Wrap(own), kubetest.Wrap(asNode), "node-1", nil)
			reg := prometheus.NewRegistry()
			RegisterReaderMetric(reg, c)
			got, err := CheckOwnNode(t.Context(), c, "node-1")
			if got != tt.want {
				t.Errorf("reader %q, want %q", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "node-1")):
				t.Errorf("error %v, want one naming node-1 and saying %q", err, tt.wantErr)
			}
			want := `
# HELP node_agent_own_node_reader Which identity reads the agent's own Node, 1 for the one in use: node (it impersonates its node; the Node authorizer allows it), serviceaccount (the cluster refused that; the ServiceAccount's own grant).
# TYPE node_agent_own_node_reader gauge
node_agent_own_node_reader{identity="node"} ` + map[bool]string{true: "1", false: "0"}[tt.want == ReaderNode] + `
node_agent_own_node_reader{identity="serviceaccount"} ` + map[bool]string{true: "1", false: "0"}[tt.want == ReaderServiceAccount] + `
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "node_agent_own_node_reader"); err != nil {
				t.Error(err)
			}
		})
	}
}
