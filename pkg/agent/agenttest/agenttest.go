// Package agenttest holds what the components' unit tests share: a
// NodeView over a (fake) clientset.
package agenttest

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/node-agent/node-agent/pkg/kube"
)

// NodeView is an agent.NodeView that reads the Node from Client on every
// Get, with no informer: a test calls Touch where the informer would report
// a change.
type NodeView struct {
	Client kube.Interface
	Name   string

	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
}

// NodeName implements agent.NodeView.
func (v *NodeView) NodeName() string { return v.Name }

// Get implements agent.NodeView.
func (v *NodeView) Get() (*corev1.Node, error) {
	return v.Client.CoreV1().Nodes().Get(context.Background(), v.Name, metav1.GetOptions{})
}

// AddHandler implements agent.NodeView.
func (v *NodeView) AddHandler(h cache.ResourceEventHandler) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.handlers = append(v.handlers, h)
	return nil
}

// Touch tells the handlers that the Node changed.
func (v *NodeView) Touch() error {
	n, err := v.Get()
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, h := range v.handlers {
		h.OnUpdate(n, n)
	}
	return nil
}
