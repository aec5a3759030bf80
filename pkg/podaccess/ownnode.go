package podaccess

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/node-agent/node-agent/pkg/kube"
)

// OwnNodeReads returns own with its reads of Nodes (get, list, watch) made
// as the node itself through node (a client of NodeConfig): the Node
// authorizer lets a node read its own Node only, and API Priority and
// Fairness puts a node's requests in a flow of their own (user
// system:node:<node>, in the built-in system-nodes level), so one agent's
// burst of ServiceAccount requests does not queue the others' watches of
// their Nodes. Writes (patch) stay with own: a node may not change its
// taints, and the agent's drain taint is one.
//
// Where the cluster refuses the impersonation (no constrained
// impersonation, or its rule left out), or allows it but then refuses the
// node its own Node (a cluster without the Node authorizer:
// kube-apiserver --authorization-mode without Node), a refused read is made
// again with own, and so are the reads of the next RetryAfter; then the node
// identity is tried again, since a refusal can be passing too (a restarted
// apiserver refuses everyone until its RBAC cache has synced). A switch is
// logged once while it lasts, in a line that names which of the two it is.
// nodeName is the agent's node.
func OwnNodeReads(own, node kube.Interface, nodeName string, log *slog.Logger) kube.Interface {
	return &ownNodeClient{Interface: own, core: &ownNodeCore{
		CoreV1Interface: own.CoreV1(),
		nodes:           &ownNodeNodes{own: own.CoreV1().Nodes(), node: node.CoreV1().Nodes(), name: nodeName, log: log, now: time.Now},
	}}
}

type ownNodeClient struct {
	kube.Interface
	core *ownNodeCore
}

func (c *ownNodeClient) CoreV1() kube.CoreV1Interface { return c.core }

type ownNodeCore struct {
	kube.CoreV1Interface
	nodes *ownNodeNodes
}

func (c *ownNodeCore) Nodes() kube.NodeInterface { return c.nodes }

// RetryAfter is how long reads stay with the ServiceAccount after the node
// identity's read was refused.
const RetryAfter = 10 * time.Minute

type ownNodeNodes struct {
	own, node kube.NodeInterface
	// name is the agent's own Node.
	name string
	log  *slog.Logger
	now  func() time.Time
	// until is when the node identity is tried again (Unix nanoseconds);
	// zero while it is in use.
	until atomic.Int64
}

// reader is the client for the next read.
func (n *ownNodeNodes) reader() kube.NodeInterface {
	if u := n.until.Load(); u != 0 {
		if n.now().UnixNano() < u {
			return n.own
		}
		if n.until.CompareAndSwap(u, 0) && n.log != nil {
			n.log.Info("Reading the own Node as the node itself again")
		}
	}
	return n.node
}

// RefusedIdentity says why the node identity's read of what was
// refused, for the one log line: the impersonation itself, or the node's
// read of its own Node, which only a cluster without the Node authorizer
// refuses. It is "" for any other answer: the Node authorizer's refusal of
// some other node says nothing about reading this one.
func RefusedIdentity(err error, ownNode bool) string {
	switch {
	case !apierrors.IsForbidden(err):
		return ""
	case strings.Contains(err.Error(), "impersonate"):
		return "the cluster refused the ServiceAccount's impersonation of its node (constrained impersonation, Kubernetes 1.35 and later, is off or deploy/rbac.yaml's impersonate rules are missing)"
	case ownNode:
		return "the cluster refused the node its own Node, which the Node authorizer always allows: kube-apiserver runs without it (--authorization-mode lacks Node)"
	}
	return ""
}

// fellBack reports whether err refused the node identity's read, and if so
// switches to the ServiceAccount's reads. ownNode says the read was of the
// agent's own Node.
func (n *ownNodeNodes) fellBack(r kube.NodeInterface, err error, ownNode bool) bool {
	if r != n.node {
		return false
	}
	why := RefusedIdentity(err, ownNode)
	if why == "" {
		return false
	}
	if n.until.Swap(n.now().Add(RetryAfter).UnixNano()) == 0 && n.log != nil {
		n.log.Warn("Reading the own Node as the node itself was refused; reading it with the ServiceAccount's grant (nodes get, list, watch in deploy/rbac.yaml)",
			"why", why, "retryAfter", RetryAfter, "err", err)
	}
	return true
}

// ownTarget says a read is of the agent's own Node: by name, or by the
// field selector the informer uses.
func (n *ownNodeNodes) ownTarget(name string, opts metav1.ListOptions) bool {
	if name != "" {
		return name == n.name
	}
	return n.name != "" && opts.FieldSelector == "metadata.name="+n.name
}

func (n *ownNodeNodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	r := n.reader()
	got, err := r.Get(ctx, name, opts)
	if n.fellBack(r, err, n.ownTarget(name, metav1.ListOptions{})) {
		return n.own.Get(ctx, name, opts)
	}
	return got, err
}

func (n *ownNodeNodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	r := n.reader()
	got, err := r.List(ctx, opts)
	if n.fellBack(r, err, n.ownTarget("", opts)) {
		return n.own.List(ctx, opts)
	}
	return got, err
}

func (n *ownNodeNodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	r := n.reader()
	got, err := r.Watch(ctx, opts)
	if n.fellBack(r, err, n.ownTarget("", opts)) {
		return n.own.Watch(ctx, opts)
	}
	return got, err
}

func (n *ownNodeNodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error) {
	return n.own.Patch(ctx, name, pt, data, opts, subresources...)
}

func (n *ownNodeNodes) PatchStatus(ctx context.Context, nodeName string, data []byte) (*corev1.Node, error) {
	return n.own.PatchStatus(ctx, nodeName, data)
}
