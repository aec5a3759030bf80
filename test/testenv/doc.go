// Package testenv runs a real, throw-away Kubernetes control plane for
// node-agent's integration tests and demos: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, each as its own process
// bound to 127.0.0.1 on free ports, with credentials generated for the run.
//
// It owns the lifetime of those processes and nothing else: it does not build
// the binaries (hack/build-tools.sh does, through `make tools`) and it does not
// know about node-agent itself.
//
// kwok plays the kubelet of every Node created with AddNode, so pods get
// scheduled, become Running and finish terminating without any container
// runtime. Which kwok stages play the pod lifecycle is chosen with
// Options.PodStages. Under either set, a pod annotated with
// PodReadyDelayAnnotation or PodDeleteDelayAnnotation (kwok's own
// "<stage>.stage.kwok.x-k8s.io/delay" convention) starts or leaves that much
// later, which lets a test slow down one workload's drain while every other
// pod keeps the fast lifecycle.
//
// DefaultOptions runs every component; Options{} runs etcd and
// kube-apiserver only. Tests use StartForTest, which skips when the binaries
// are missing (or fails when NODE_AGENT_INTEGRATION=1, as `make test` sets
// it) and stops everything in t.Cleanup. Programs such as the demo driver use
// Start and Env.Stop.
package testenv
