// Package placement answers, for one pod and a snapshot of the cluster's Nodes, bound Pods and
// Namespaces, which nodes kube-scheduler's default Filter plugins would accept and, for every other
// node, the plugin that rejects it with the scheduler's own reason strings.
//
// It owns the filter semantics of NodeName, NodeUnschedulable, TaintToleration, NodeAffinity,
// NodeResourcesFit (including the allowed pod count), PodTopologySpread (whenUnsatisfiable:
// DoNotSchedule only) and InterPodAffinity (required terms only), run in the scheduler's default
// order and stopping at a node's first failing plugin. Node selectors, taints and pod requests are
// evaluated with k8s.io/component-helpers; inter-pod affinity and topology spread are implemented
// here, following kube-scheduler v1.37.2.
//
// It does not own: scoring (preferred affinity, ScheduleAnyway spread, balanced allocation and
// the rest), preemption and PostFilter, NodePorts, the volume plugins (VolumeRestrictions,
// NodeVolumeLimits, VolumeBinding, VolumeZone), DynamicResources (DRA), scheduling gates,
// nominated pods, scheduler extenders or non-default scheduler profiles and plugin arguments.
// A node that fits here may still be refused by one of those.
package placement
