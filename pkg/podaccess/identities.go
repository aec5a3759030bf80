package podaccess

import (
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/pkg/kube"
)

// Identities are the credentials one agent acts as, each for what it may
// do (docs/security.md):
type Identities struct {
	// ServiceAccount is the agent's own credential, with no read made as
	// the node: the lists of every Node (where a VM could go), the
	// KubeVirt CR, NodeMaintenance objects and VMs.
	ServiceAccount kube.Interface
	// Node impersonates the node (NodeConfig): the node's own pods, their
	// evictions and deletions, where the cluster allows it (Prober).
	Node kube.Interface
	// NodeREST is the node's connection, for the other APIs asked as the
	// node (EvictionRequests).
	NodeREST *rest.Config
	// OwnNode reads the agent's own Node as the node, and falls back to
	// the ServiceAccount where the cluster refuses that (OwnNodeReads); its
	// writes go as the ServiceAccount.
	OwnNode kube.Interface
}

// NewIdentities makes the identities of node's agent over rc. It contacts
// nothing.
func NewIdentities(rc *rest.Config, node string, log *slog.Logger) (Identities, error) {
	sa, err := kube.New(rc)
	if err != nil {
		return Identities{}, err
	}
	nodeREST := NodeConfig(rc, node)
	asNode, err := kube.New(nodeREST)
	if err != nil {
		return Identities{}, err
	}
	return Identities{ServiceAccount: sa, Node: asNode, NodeREST: nodeREST, OwnNode: OwnNodeReads(sa, asNode, node, log)}, nil
}
