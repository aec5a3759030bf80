package testenv

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeOption changes the Node that AddNode creates, before it is created.
type NodeOption func(*corev1.Node)

// WithNodeLabels adds labels to the Node.
func WithNodeLabels(labels map[string]string) NodeOption {
	return func(n *corev1.Node) { maps.Copy(n.Labels, labels) }
}

// WithNodeAnnotations adds annotations to the Node.
func WithNodeAnnotations(annotations map[string]string) NodeOption {
	return func(n *corev1.Node) { maps.Copy(n.Annotations, annotations) }
}

// WithNodeTaints adds taints to the Node.
func WithNodeTaints(taints ...corev1.Taint) NodeOption {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taints...) }
}

// WithoutKwokTaint leaves out the kwok.x-k8s.io/node taint, so that pods
// without KwokToleration can run on the Node.
func WithoutKwokTaint() NodeOption {
	return func(n *corev1.Node) {
		var kept []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != KwokTaintKey {
				kept = append(kept, t)
			}
		}
		n.Spec.Taints = kept
	}
}

// WithNodeCapacity sets the Node's capacity and allocatable resources.
func WithNodeCapacity(capacity corev1.ResourceList) NodeOption {
	return func(n *corev1.Node) {
		n.Status.Capacity = capacity.DeepCopy()
		n.Status.Allocatable = capacity.DeepCopy()
	}
}

// DefaultNodeCapacity is what AddNode gives a Node unless told otherwise:
// room for a few hundred test pods, like a large worker.
func DefaultNodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("32"),
		corev1.ResourceMemory:           resource.MustParse("256Gi"),
		corev1.ResourcePods:             resource.MustParse("250"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
}

// newNode returns the Node AddNode creates before options apply. kwok's
// node-initialize stage keeps capacity and addresses that are already set.
func newNode(name string, ip net.IP) *corev1.Node {
	capacity := DefaultNodeCapacity()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname:   name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
				"type":                 "kwok",
			},
			Annotations: map[string]string{
				KwokNodeAnnotation: KwokNodeValue,
				// Lets the apiserver's clients skip the node TTL cache, as
				// kwok's own examples do.
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: KwokTaintKey, Value: KwokNodeValue, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: ip.String()},
				{Type: corev1.NodeHostName, Address: name},
			},
		},
	}
}

// AddNode creates a kwok-managed Node and waits until it can take pods: kwok
// reports it Ready and, when the controllers run, the node lifecycle
// controller has removed the node.kubernetes.io/not-ready taint that
// admission put on it. Without Options.Kwok it only creates the Node. The
// Node carries the taint kwok.x-k8s.io/node=fake (see KwokToleration) unless
// WithoutKwokTaint is given.
func (e *Env) AddNode(ctx context.Context, name string, opts ...NodeOption) error {
	return e.AddNodes(ctx, []string{name}, opts...)
}

// AddNodes creates several Nodes as AddNode does and waits for all of them,
// which is faster than adding them one by one.
func (e *Env) AddNodes(ctx context.Context, names []string, opts ...NodeOption) error {
	for _, name := range names {
		node := newNode(name, e.nextNodeIP())
		for _, opt := range opts {
			opt(node)
		}
		if _, err := e.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
	}
	for _, name := range names {
		if err := e.waitNodeSchedulable(ctx, name); err != nil {
			return err
		}
	}
	if e.opts.Kwok {
		e.log.Info("nodes ready", "nodes", strings.Join(names, ","))
	}
	return nil
}

// nextNodeIP hands out 127.0.1.1, 127.0.1.2, ...: loopback addresses, so
// that nothing that ever dials a node's InternalIP leaves the machine.
func (e *Env) nextNodeIP() net.IP {
	e.nodeMu.Lock()
	defer e.nodeMu.Unlock()
	e.nodeSeq++
	return net.IPv4(127, 0, byte(1+e.nodeSeq/250), byte(1+e.nodeSeq%250))
}

func (e *Env) waitNodeSchedulable(ctx context.Context, name string) error {
	if !e.opts.Kwok {
		return nil // nothing will ever make it Ready
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.StartTimeout)
	defer cancel()
	var last string
	for {
		node, err := e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case !nodeReady(node):
			last = "kwok has not set condition Ready=True"
		case e.opts.Controllers && HasTaint(node, corev1.Taint{Key: corev1.TaintNodeNotReady}):
			last = "the node lifecycle controller has not removed taint " + corev1.TaintNodeNotReady
		default:
			return nil
		}
		if err := e.Err(); err != nil {
			return fmt.Errorf("waiting for node %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not schedulable within %s: %s; last lines of the kwok log:\n%s",
				name, e.opts.StartTimeout, last, e.LogTail(BinKwok, logTailLines))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DrainTaint is the taint node-agent puts on a node it drains, by default
// (drain.taintKey: KubeVirt's nodeDrainTaintKey).
var DrainTaint = corev1.Taint{Key: "kubevirt.io/drain", Effect: corev1.TaintEffectNoSchedule}

// HasTaint reports whether node has a taint with taint's key and, unless
// taint.Effect is empty, its effect; the value is not compared.
func HasTaint(node *corev1.Node, taint corev1.Taint) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == taint.Key && (taint.Effect == "" || t.Effect == taint.Effect) {
			return true
		}
	}
	return false
}

// CreateNamespace creates a namespace and, when the controllers run, waits
// for its "default" ServiceAccount, without which pods are refused.
func (e *Env) CreateNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", name, err)
	}
	if !e.opts.Controllers {
		return ns, nil
	}
	if err := e.waitDefaultServiceAccount(ctx, name); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	return ns, nil
}
