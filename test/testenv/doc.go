// Package testenv is the one test harness of node-agent's integration,
// end-to-end, real-node and benchmark tests (test/integration, test/e2e,
// test/node, test/bench, test/image). It owns:
//
//   - a real, throw-away Kubernetes control plane (Env): etcd,
//     kube-apiserver, kube-controller-manager, kube-scheduler and kwok, each
//     as its own process bound to 127.0.0.1 on free ports, with credentials
//     generated for the run, and its audit log (AuditLog, AuditReader);
//   - the fake and real nodes it serves: kwok's Nodes (AddNode) and a real
//     kubelet with containerd (RealNode);
//   - a real systemd to run node-agent under: a systemd-nspawn Container;
//     and the image's own root filesystem as a Container
//     (RequireImageRootfs, NewImageContainer, ImageLabels), to run what the
//     image ships on the libvirt and QEMU it ships;
//   - node-agent itself as a process (AgentBinary, StartAgent), and the
//     drain slot coordinator it needs for every maintenance drain and
//     coordinated reboot (StartCoordinator, CoordinatorConfig);
//   - the workloads the tests drain and how they wait for them
//     (CreateDeployment, CreatePDB, WaitRunningOn, PodsOn, ...), and the
//     polling underneath (Poll, WaitFor).
//
// It does not build the control-plane binaries (hack/build-tools.sh does,
// through `make tools`), the rootfs (hack/rootfs.sh) nor the image
// (hack/image.sh).
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
// Start and Env.Stop. Container tests call RequireContainer first, which
// skips in the same way unless NODE_AGENT_E2E=1.
package testenv
