// Package podaccess owns the identity node-agent uses for the pods of its
// own node: listing and watching them, evicting them and deleting them;
// and, where the cluster allows it, for reading its own Node
// (OwnNodeReads).
//
// The agent's ServiceAccount has no grant on pods or pods/eviction of its
// own. It impersonates the node its pod runs on, and nothing else, through
// constrained impersonation (KEP-5284; the ConstrainedImpersonation gate,
// beta and on by default from Kubernetes 1.36): the request carries
// Impersonate-User: system:node:<node> and no Impersonate-Group header, the
// ServiceAccount holds only the impersonate:associated-node and
// impersonate-on:associated-node:<verb> rules, and the Node authorizer and
// the NodeRestriction admission plugin then confine what it does to that
// node's pods. A token taken from one node's agent therefore cannot read,
// evict or delete the pods of any other node.
//
// On a cluster without constrained impersonation the agent can run on the
// old cluster-wide grant (deploy/components/cluster-wide-eviction) that an
// admin applies knowingly; it is used only when impersonation is refused.
// With neither, drains are refused before anything on the Node changes.
// Probe decides which, and says so once in one line that names the fix.
package podaccess

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/pkg/kube"
)

// Mode is how the agent reaches its node's pods.
type Mode string

const (
	// ModeNode: requests impersonate system:node:<node> (constrained
	// impersonation); the Node authorizer and NodeRestriction confine them
	// to the node's own pods.
	ModeNode Mode = "node"
	// ModeClusterWide: the ServiceAccount's own cluster-wide grant
	// (deploy/components/cluster-wide-eviction), because impersonation was
	// refused. A stolen token can evict any pod no PodDisruptionBudget
	// protects.
	ModeClusterWide Mode = "cluster-wide"
	// ModeNone: neither works; drains are refused.
	ModeNone Mode = "none"
)

// Modes lists every Mode, for metric labels and docs.
var Modes = []Mode{ModeNode, ModeClusterWide, ModeNone}

// NodeUser is the user name of node's identity, as the kubelet's client
// certificate carries it and the Node authorizer expects it.
func NodeUser(node string) string { return "system:node:" + node }

// NodeConfig returns a copy of cfg whose requests impersonate node and only
// the node: the user name alone. With an Impersonate-Group header (for
// example system:nodes) the apiserver treats the request as ordinary
// impersonation, which needs the impersonate verb on users and groups, and
// refuses it.
func NodeConfig(cfg *rest.Config, node string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: NodeUser(node)}
	return c
}

// Access is the outcome of Probe.
type Access struct {
	Mode Mode
	// Client is the client for the node's pods: nil in ModeNone.
	Client kube.Interface
	// Why says, for ModeClusterWide and ModeNone, why impersonation was not
	// used, with the apiserver's answer.
	Why string
}

// Prober tries each identity in turn.
type Prober struct {
	// Node impersonates the node (a client from NodeConfig).
	Node kube.Interface
	// Own is the ServiceAccount's own identity.
	Own kube.Interface
	// NodeName is the agent's node.
	NodeName string
}

// Fix is what an admin does when Probe finds no way to the node's pods.
const Fix = "use Kubernetes 1.36 or later (or 1.35 with the ConstrainedImpersonation feature gate on) with deploy/'s RBAC and the Node authorizer (--authorization-mode=Node,RBAC), " +
	"or apply deploy/components/cluster-wide-eviction to grant the ServiceAccount cluster-wide pod eviction knowingly"

// Probe lists the node's pods (one item) as the node, then, if the
// apiserver refuses that, as the ServiceAccount itself. A list is what every
// drain starts with and changes nothing; the three rights (list, evict,
// delete) are granted together by deploy/rbac.yaml and by the component, so
// a list that is allowed stands for the others. An error means the answer is
// unknown (the apiserver could not be asked); callers try again later rather
// than pick a mode.
func (p Prober) Probe(ctx context.Context) (Access, error) {
	nodeErr := listOne(ctx, p.Node, p.NodeName)
	if nodeErr == nil {
		return Access{Mode: ModeNode, Client: p.Node}, nil
	}
	if !refused(nodeErr) {
		return Access{}, fmt.Errorf("listing node %s's pods as %s: %w", p.NodeName, NodeUser(p.NodeName), nodeErr)
	}
	why := fmt.Sprintf("impersonating %s was refused: %s", NodeUser(p.NodeName), message(nodeErr))
	if !strings.Contains(nodeErr.Error(), "impersonate") {
		// The impersonation passed; the node was refused its own pods.
		why = fmt.Sprintf("%s was refused its own pods, which the Node authorizer always allows, so kube-apiserver runs without it (--authorization-mode lacks Node): %s",
			NodeUser(p.NodeName), message(nodeErr))
	}
	ownErr := listOne(ctx, p.Own, p.NodeName)
	switch {
	case ownErr == nil:
		return Access{Mode: ModeClusterWide, Client: p.Own, Why: why}, nil
	case refused(ownErr):
		return Access{Mode: ModeNone, Why: why + "; the ServiceAccount's own grant was refused too: " + message(ownErr)}, nil
	default:
		return Access{}, fmt.Errorf("listing node %s's pods as the ServiceAccount: %w", p.NodeName, ownErr)
	}
}

// Line is the one log line that says which mode the agent runs in, and for
// anything but ModeNode, what to do.
func (a Access) Line() string {
	switch a.Mode {
	case ModeNode:
		return "pods of this node are read, evicted and deleted as the node itself (constrained impersonation); the ServiceAccount has no grant on pods"
	case ModeClusterWide:
		return "pods are read, evicted and deleted with the ServiceAccount's cluster-wide grant, because " + a.Why +
			"; a stolen token can evict other nodes' pods: use Kubernetes 1.36 or later and remove deploy/components/cluster-wide-eviction"
	default:
		return "drains are refused: the agent cannot reach its node's pods, because " + a.Why + "; " + Fix
	}
}

// ErrNoAccess is returned (wrapped) when a drain is refused in ModeNone.
var ErrNoAccess = errors.New("no access to this node's pods")

func listOne(ctx context.Context, c kube.Interface, node string) error {
	_, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		Limit:         1,
	})
	return err
}

// refused is a definite no from the apiserver: 403, or 401 for an
// impersonation the authenticator rejected.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}

// message is the apiserver's own sentence, without the Go error chain.
func message(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Message != "" {
		return strings.TrimSpace(st.Status().Message)
	}
	return err.Error()
}
