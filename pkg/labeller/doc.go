// Package labeller owns the CPU labels of this agent's own Node: which keys it
// owns, what their values should be, and (in the controller files) keeping the
// Node in step with them.
//
// The label policy (policy.go) is pure: it turns a hostcpu.HostCPU snapshot
// into the label map KubeVirt's scheduler expects, with KubeVirt's exact keys
// (cpu-model.node.kubevirt.io/, cpu-feature.node.kubevirt.io/,
// hyperv.node.kubevirt.io/, kubevirt.io/sev, ...) and KubeVirt's rules, per
// architecture, under the settings of the KubeVirt CR where there is one
// (read by pkg/kubevirtcr, handed over by the wiring) and of node-agent's
// configuration otherwise; docs/labels.md lists the deliberate differences. It skips,
// with a warning, any name that is not a valid Kubernetes label, and says
// which label families it could not compute and why: those are unknown, and
// the controller leaves their labels alone.
//
// Report (output.go) prints the labels of one discovery for a person, with
// their sources and what was left out, as `node-agent labels` does.
package labeller
