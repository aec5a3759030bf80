package podaccess

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/metrics"
)

// Reader is the identity that reads the agent's own Node.
type Reader string

const (
	// ReaderNode: the node itself (constrained impersonation and the Node
	// authorizer), as OwnNodeReads prefers.
	ReaderNode Reader = "node"
	// ReaderServiceAccount: the ServiceAccount's own grant (nodes get,
	// list, watch), where the cluster refuses the node's read.
	ReaderServiceAccount Reader = "serviceaccount"
)

// Readers are every Reader, the values of the own_node_reader metric.
var Readers = []Reader{ReaderNode, ReaderServiceAccount}

// CurrentReader is who reads the own Node next through c: a client
// OwnNodeReads made says so; any other reads with its own grant.
func CurrentReader(c kube.Interface) Reader {
	oc, ok := c.(*ownNodeClient)
	if !ok {
		return ReaderServiceAccount
	}
	if oc.core.nodes.reader() == oc.core.nodes.node {
		return ReaderNode
	}
	return ReaderServiceAccount
}

// RegisterReaderMetric registers node_agent_own_node_reader, 1 for the
// identity that reads the own Node through c now, so that an admin sees a
// fallback after its one log line has scrolled away. c may be nil (the
// reference in docs/metrics.md): every identity reads 0.
func RegisterReaderMetric(reg prometheus.Registerer, c kube.Interface) {
	if reg == nil {
		return
	}
	reg.MustRegister(readerCollector{c: c, desc: prometheus.NewDesc(metrics.Namespace+"_own_node_reader",
		"Which identity reads the agent's own Node, 1 for the one in use: node (it impersonates its node; the Node authorizer allows it), serviceaccount (the cluster refused that; the ServiceAccount's own grant).",
		[]string{"identity"}, nil)})
}

// readerCollector asks CurrentReader at each scrape: the reader changes
// inside OwnNodeReads' client, which knows no registry.
type readerCollector struct {
	c    kube.Interface
	desc *prometheus.Desc
}

func (r readerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r readerCollector) Collect(ch chan<- prometheus.Metric) {
	var current Reader
	if r.c != nil {
		current = CurrentReader(r.c)
	}
	for _, id := range Readers {
		v := 0.0
		if id == current {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, v, string(id))
	}
}

// CheckTimeout bounds CheckOwnNode's one read.
const CheckTimeout = 30 * time.Second

// CheckOwnNode reads the agent's own Node once through c (a client
// OwnNodeReads made) before its informer starts, so that a refusal is
// answered at once rather than by a watch that fails twice a second for
// ever: a read refused to the node falls back to the ServiceAccount (with
// OwnNodeReads' one line saying why); a read refused to both is an error
// that names the missing right, and the agent exits with it. Any other
// failure (the apiserver not reachable yet, the Node not registered yet)
// is no answer about rights: it returns nil, and the informer retries and
// keeps the agent not ready meanwhile. It returns the identity that reads
// the Node from then on.
func CheckOwnNode(ctx context.Context, c kube.Interface, name string) (Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	_, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	reader := CurrentReader(c)
	if err == nil || !apierrors.IsForbidden(err) {
		return reader, nil
	}
	return reader, OwnNodeRefused(name, err)
}

// OwnNodeRefused is the error for a read of the own Node that the
// ServiceAccount was refused too (err), after the node's own read.
func OwnNodeRefused(name string, err error) error {
	return fmt.Errorf("reading its own Node %s was refused to the node itself and to the ServiceAccount (%s): "+
		"grant the agent's ServiceAccount get, list and watch on nodes (deploy/rbac.yaml's ClusterRole node-agent), "+
		"or enable the Node authorizer (kube-apiserver --authorization-mode=Node,RBAC) and the impersonate-on:associated-node rules of deploy/rbac.yaml",
		name, message(err))
}
