package podaccess

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

func TestOwnNodeReads(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	impersonation := apierrors.NewForbidden(nodes, "node-1", errors.New(`User "system:serviceaccount:node-agent:node-agent" cannot impersonate-on:associated-node:get resource "nodes"`))
	authorizer := apierrors.NewForbidden(nodes, "node-2", errors.New(`User "system:node:node-1" cannot get resource "nodes"`))
	noNodeAuthorizer := apierrors.NewForbidden(nodes, "node-1", errors.New(`User "system:node:node-1" cannot get resource "nodes"`))
	for _, tt := range []struct {
		name      string
		target    string // the Node read; the agent's is node-1
		nodeErr   error
		wantErr   bool
		wantReads [2]int // reads by the node client, by the ServiceAccount's, over two gets
	}{
		{"as the node", "node-1", nil, false, [2]int{2, 0}},
		{"impersonation refused: the ServiceAccount from then on", "node-1", impersonation, false, [2]int{1, 2}},
		{"its own Node refused to the node: no Node authorizer, the ServiceAccount from then on", "node-1", noNodeAuthorizer, false, [2]int{1, 2}},
		{"the Node authorizer's refusal of another node is the answer", "node-2", authorizer, true, [2]int{2, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
			node2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}
			own, asNode := fake.NewClientset(node1, node2), fake.NewClientset(node1, node2)
			var reads [2]int
			asNode.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				reads[0]++
				return tt.nodeErr != nil, nil, tt.nodeErr
			})
			own.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				reads[1]++
				return false, nil, nil
			})
			var patchedAsNode bool
			asNode.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				patchedAsNode = true
				return false, nil, nil
			})
			c := OwnNodeReads(kubetest.Wrap(own), kubetest.Wrap(asNode), "node-1", nil)
			for range 2 {
				_, err := c.CoreV1().Nodes().Get(t.Context(), tt.target, metav1.GetOptions{})
				if (err != nil) != tt.wantErr {
					t.Errorf("Get: %v, want error %v", err, tt.wantErr)
				}
			}
			if reads != tt.wantReads {
				t.Errorf("reads (as the node, as the ServiceAccount) = %v, want %v", reads, tt.wantReads)
			}
			if _, err := c.CoreV1().Nodes().Patch(t.Context(), "node-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if patchedAsNode {
				t.Error("a patch went out as the node; writes are the ServiceAccount's")
			}
		})
	}
}

// TestOwnNodeReadsTriesTheNodeAgain: a refusal can pass (a restarted
// apiserver refuses everyone until its RBAC cache syncs), so the node
// identity is asked again after RetryAfter.
func TestOwnNodeReadsTriesTheNodeAgain(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	node1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	own, asNode := fake.NewClientset(node1), fake.NewClientset(node1)
	refuse := true
	var asNodeReads int
	asNode.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		asNodeReads++
		if refuse {
			return true, nil, apierrors.NewForbidden(nodes, "node-1", errors.New("cannot impersonate-on:associated-node:get"))
		}
		return false, nil, nil
	})
	c := OwnNodeReads(kubetest.Wrap(own), kubetest.Wrap(asNode), "node-1", nil)
	now := time.Unix(1000, 0)
	c.(*ownNodeClient).core.nodes.now = func() time.Time { return now }
	get := func() {
		t.Helper()
		if _, err := c.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get() // refused as the node, answered by the ServiceAccount
	get()
	if asNodeReads != 1 {
		t.Fatalf("reads as the node within RetryAfter: %d, want 1", asNodeReads)
	}
	refuse = false
	now = now.Add(RetryAfter)
	get()
	get()
	if asNodeReads != 3 {
		t.Errorf("reads as the node after RetryAfter: %d, want 3 (it is used again)", asNodeReads)
	}
}

// TestOwnNodeReadsListByFieldSelector: the informer's list and watch of its
// own Node (field selector metadata.name) fall back as a get does; a list of
// every Node refused to the node does not.
func TestOwnNodeReadsListByFieldSelector(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	node1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	own, asNode := fake.NewClientset(node1), fake.NewClientset(node1)
	asNode.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(nodes, "", errors.New(`User "system:node:node-1" cannot list resource "nodes"`))
	})
	c := OwnNodeReads(kubetest.Wrap(own), kubetest.Wrap(asNode), "node-1", nil)
	if _, err := c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{}); err == nil {
		t.Error("a list of every Node, refused to the node, was answered; want the refusal")
	}
	if _, err := c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=node-1"}); err != nil {
		t.Errorf("the own Node's list: %v, want the ServiceAccount's answer", err)
	}
}

func TestRefusedIdentity(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	forbidden := func(msg string) error { return apierrors.NewForbidden(nodes, "node-1", errors.New(msg)) }
	for _, tt := range []struct {
		err     error
		own     bool
		wantSub string
	}{
		{forbidden("cannot impersonate-on:associated-node:get"), false, "impersonation"},
		{forbidden(`User "system:node:node-1" cannot get resource "nodes"`), true, "--authorization-mode lacks Node"},
		{forbidden(`User "system:node:node-1" cannot get resource "nodes"`), false, ""},
		{errors.New("connection refused"), true, ""},
	} {
		got := RefusedIdentity(tt.err, tt.own)
		if (tt.wantSub == "") != (got == "") || !strings.Contains(got, tt.wantSub) {
			t.Errorf("RefusedIdentity(%v, %v) = %q, want it to say %q", tt.err, tt.own, got, tt.wantSub)
		}
	}
}
