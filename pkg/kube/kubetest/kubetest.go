// Package kubetest adapts a client-go clientset to kube.Interface, for tests:
// the fake clientset in unit tests, or a real one in the integration tests.
// The agent itself never links it, and so never links client-go's clientset.
package kubetest

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"

	"github.com/node-agent/node-agent/pkg/kube"
)

// Wrap returns c as a kube.Interface.
func Wrap(c kubernetes.Interface) kube.Interface { return clientset{c} }

// clientset is every group of kube.Interface at once: no two groups have a
// method of the same name.
type clientset struct{ c kubernetes.Interface }

func (w clientset) CoreV1() kube.CoreV1Interface                 { return w }
func (w clientset) PolicyV1() kube.PolicyV1Interface             { return w }
func (w clientset) CoordinationV1() kube.CoordinationV1Interface { return w }
func (w clientset) AppsV1() kube.AppsV1Interface                 { return w }
func (w clientset) Discovery() kube.DiscoveryInterface           { return w.c.Discovery() }

// IsWatchListSemanticsUnSupported passes on what the wrapped clientset says
// (the fake one cannot serve watch-list requests), so informers over the
// wrapper behave as client-go's generated informers over the clientset.
func (w clientset) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(w.c)
}

func (w clientset) Nodes() kube.NodeInterface            { return w.c.CoreV1().Nodes() }
func (w clientset) Pods(ns string) kube.PodInterface     { return w.c.CoreV1().Pods(ns) }
func (w clientset) Events(ns string) kube.EventInterface { return w.c.CoreV1().Events(ns) }
func (w clientset) Namespaces() kube.NamespaceInterface  { return w.c.CoreV1().Namespaces() }
func (w clientset) Evictions(ns string) kube.EvictionInterface {
	return w.c.PolicyV1().Evictions(ns)
}
func (w clientset) PodDisruptionBudgets(ns string) kube.PodDisruptionBudgetInterface {
	return w.c.PolicyV1().PodDisruptionBudgets(ns)
}
func (w clientset) Leases(ns string) kube.LeaseInterface { return w.c.CoordinationV1().Leases(ns) }
func (w clientset) DaemonSets(ns string) kube.DaemonSetInterface {
	return w.c.AppsV1().DaemonSets(ns)
}
