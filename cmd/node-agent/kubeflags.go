package main

import (
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/pkg/kube"
)

// clientFlags are kubectl's flags for reaching a cluster, which the CLI
// commands (maintenance, reboot, cpu-baseline) take as kubectl does, so that
// `kubectl node-agent ...` (the binary installed as kubectl-node_agent)
// behaves as a kubectl plugin: kubectl hands a plugin its arguments, not its
// own flags' effect.
type clientFlags struct {
	kubeconfig string
	context    string
}

func (f *clientFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the pod's service account).")
	fs.StringVar(&f.context, "context", "", "The kubeconfig context to use (default: its current-context).")
}

func (f *clientFlags) restConfig() (*rest.Config, error) {
	return kube.RESTConfigFor(f.kubeconfig, f.context)
}
