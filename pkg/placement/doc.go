// Package placement answers, for one pod and a snapshot of the cluster's Nodes, bound Pods and
// Namespaces, which nodes kube-scheduler's default Filter plugins would accept and, for every other
// node, the plugin that rejects it with the scheduler's own reason strings.
//
// It owns the filter semantics of NodeName, NodeUnschedulable, TaintToleration, NodeAffinity,
// NodeResourcesFit (including the allowed pod count), PodTopologySpread (whenUnsatisfiable:
// DoNotSchedule only) and InterPodAffinity (required terms only), run in the scheduler's default
// order and stopping at a node's first failing plugin, after the PreFilter stage's node-name
// restrictions (spec.nodeName, node affinity on metadata.name). Node selectors, taints and pod
// requests are evaluated with k8s.io/component-helpers; inter-pod affinity and topology spread are
// implemented here. Everything follows kube-scheduler v1.37.2 with its default feature gates; v1.36
// differs only in running NodeUnschedulable before NodeName and in NodeName having no PreFilter (a pod
// naming another node then gets "node(s) didn't match the requested node name").
//
// It does not own: scoring (preferred affinity, ScheduleAnyway spread, balanced allocation and
// the rest), preemption and PostFilter, NodePorts, the volume plugins (VolumeRestrictions,
// NodeVolumeLimits, VolumeBinding, VolumeZone), DynamicResources (DRA, including extended resources
// backed by a DeviceClass), scheduling gates, nominated pods, scheduler extenders, non-default
// scheduler profiles and plugin arguments, nor the apiserver's pod-level requests defaulting and
// RuntimeClass overhead for a pod that was never created. A node that fits here may still be refused
// by one of those.
package placement
