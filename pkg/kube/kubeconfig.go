package kube

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig loads the client configuration in kubectl's order: the
// kubeconfig file at path when path is not empty; otherwise the files
// $KUBECONFIG lists, or ~/.kube/config; and when none of them exists, the
// in-cluster service account (the DaemonSet's case: its pod has no
// kubeconfig, so the agent runs with the node-bound token).
func RESTConfig(path string) (*rest.Config, error) { return RESTConfigFor(path, "") }

// RESTConfigFor is RESTConfig with kubectl's --context: the kubeconfig
// context to use instead of its current-context ("" keeps that).
func RESTConfigFor(path, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	switch {
	case err == nil:
		return c, nil
	case context != "" && clientcmd.IsEmptyConfig(err):
		return nil, fmt.Errorf("--context %q: no kubeconfig names it (--kubeconfig, $KUBECONFIG and ~/.kube/config were read)", context)
	case clientcmd.IsEmptyConfig(err):
		// clientcmd's own message here asks for KUBERNETES_MASTER, which
		// only an old kubectl read.
		return nil, fmt.Errorf("no kubeconfig: --kubeconfig is empty, $KUBECONFIG and ~/.kube/config name none, and this is not a pod with a service account; pass --kubeconfig PATH")
	case path != "":
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	default:
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
}
