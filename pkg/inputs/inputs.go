// Package inputs owns the register of what node-agent and
// node-agent-coordinator read from outside themselves, beyond the keys of
// the configuration file (pkg/config/trust.go classifies those): the
// annotations and labels they read on Nodes and Leases, the objects they
// list, and the answers of outside services and of the host. For each it
// says who may write it, how far it is trusted, and what bounds its effect,
// so that no input is trusted further than its writer (issue 40).
//
// The register is data: docs/inputs.md is generated from it, and its tests
// fail for an annotation or label constant declared in the code that the
// register does not name, so a new input cannot ship without an owner.
package inputs

import (
	"fmt"
	"strings"
)

// Writer is who may write an input.
type Writer string

// The writers, from most to least trusted.
const (
	// DaemonSetAdmin writes the DaemonSet's and the coordinator's
	// arguments and environment: root on every node already.
	DaemonSetAdmin Writer = "cluster admin (DaemonSet)"
	// Host is root on the node: its files, logind, libvirt, the CPU.
	Host Writer = "the host"
	// NodeWriter may patch Nodes: a cluster admin, an operator, whoever
	// runs `node-agent maintenance`. Nodes are cluster-scoped; RBAC grants
	// their patch to admins only.
	NodeWriter Writer = "Node writer (admin)"
	// ConfigMapWriter writes node-agent-config.
	ConfigMapWriter Writer = "ConfigMap writer"
	// Coordinator is node-agent-coordinator's token.
	Coordinator Writer = "the coordinator"
	// OwnAgent is the token of the node's own agent pod; a stolen one is
	// worth that node.
	OwnAgent Writer = "the node's own agent"
	// KubeVirt is KubeVirt's controllers and whoever may edit its CR.
	KubeVirt Writer = "KubeVirt"
	// Tenant is any user with rights in a namespace: pods, budgets, VMs.
	Tenant Writer = "tenant"
	// Outside is a service outside the cluster's API: Prometheus,
	// Alertmanager, webhook receivers.
	Outside Writer = "outside service"
)

// Kind is what sort of input it is.
type Kind string

const (
	Annotation Kind = "annotation"
	Label      Kind = "label"
	Object     Kind = "object"
	Answer     Kind = "answer"
	Taint      Kind = "taint"
)

// Input is one thing read from outside.
type Input struct {
	// Name is the annotation or label key, the resource, or the service.
	Name string
	Kind Kind
	// On is what carries it (Node, Lease, Pod, ...).
	On string
	// Writers may write it.
	Writers []Writer
	// Reader is who reads it: agent, coordinator or both.
	Reader string
	// TrustedFor says what it is used for, and so the most its writers get.
	TrustedFor string
	// Bound says what limits its effect: a parser, a length, a time bound,
	// an admission rule.
	Bound string
}

// Register lists every input. Keys are spelt out rather than imported, so
// the register depends on no package it describes; TestRegisterMatchesCode
// compares them with the constants.
var Register = []Input{
	{Name: "node-agent.io/maintenance", Kind: Annotation, On: "its Node", Writers: []Writer{NodeWriter}, Reader: "agent",
		TrustedFor: "a request for maintenance of that node: its value is the reason, shown again on the Node",
		Bound:      "parsed by pkg/reasontext (values that read as no are refused), cut to 1 KiB and made printable; the agent's token may not write it (admission policy); the drain is bounded by drain.timeout and the waits before it by maintenance.gateBound"},
	{Name: "maintenance.node-agent.io/<owner>", Kind: Annotation, On: "its Node", Writers: []Writer{NodeWriter}, Reader: "agent",
		TrustedFor: "one owner's request for maintenance of that node (a team or a controller, by name): the node stays in maintenance while any requester asks, and is handed back only when the last ends; its value is the reason, shown again on the Node",
		Bound:      "parsed by pkg/reasontext as node-agent.io/maintenance is (refused values ask for nothing), cut to 1 KiB and made printable, shown cut to 256 bytes; at most 16 owners are served, the rest wait in the order of their names and keep the maintenance from ending; the agent's token may not write any of them (admission policy); the drain is bounded by drain.timeout"},
	{Name: "node-agent.io/maintenance-requesters", Kind: Annotation, On: "its Node", Writers: []Writer{OwnAgent}, Reader: "agent",
		TrustedFor: "the agent's list of who holds the node's maintenance now (kind, name, reason, since), shown by `node-agent maintenance status`; after drain.timeout, which requests the Failed drain answered, so one that comes or goes while another stays does not start the drain again",
		Bound:      "written by the agent only beside its own record and removed when the maintenance ends; at most 32 requesters, reasons cut to 256 bytes; a list that does not parse counts as empty and is rewritten; a forged one can at most start a timed-out drain of its own node again, which the same token could do by cordoning"},
	{Name: "node-agent.io/reboot", Kind: Annotation, On: "its Node", Writers: []Writer{NodeWriter}, Reader: "agent",
		TrustedFor: "a request for a reboot of that node, only where reboot.enabled",
		Bound:      "parsed by pkg/reasontext, cut to 1 KiB; the agent's token may only remove it; the reboot takes a slot, a window and no blocker past its bound"},
	{Name: "pre-drain.hook.node-agent.io/<name>", Kind: Annotation, On: "its Node", Writers: []Writer{NodeWriter}, Reader: "agent",
		TrustedFor: "a hold on the node's maintenance and a reboot's drain before the cordon, until its owner (an outside controller or an admin) removes it; its value says who owns it",
		Bound:      "held at most maintenance.hookBound from the first wait, then passed over with a Warning Event MaintenanceHookBoundExceeded; at most 16 are named (more hold, and are counted); names and values are made printable and cut to 63 and 128 bytes; a malformed one holds all the same with a Warning Event; the agent's token may not write it (admission policy); a shutdown's drain waits for none"},
	{Name: "post-drain.hook.node-agent.io/<name>", Kind: Annotation, On: "its Node", Writers: []Writer{NodeWriter}, Reader: "agent",
		TrustedFor: "a hold on a maintenance whose pods are gone before it is reported done (the reboot waits, a NodeMaintenance object stays Running), until its owner removes it",
		Bound:      "held at most maintenance.hookBound from the drain's end, then passed over with a Warning Event MaintenanceHookBoundExceeded; at most 16 are named (more hold, and are counted); names and values are made printable and cut to 63 and 128 bytes; a malformed one holds all the same with a Warning Event; the agent's token may not write it (admission policy); it evicts nothing and changes nothing on the node"},
	{Name: "node-labeller.kubevirt.io/skip-node", Kind: Annotation, On: "its Node", Writers: []Writer{NodeWriter}, Reader: "agent",
		TrustedFor: "pause CPU labelling of that node (true), as KubeVirt's labeller",
		Bound:      "true pauses, false or none resumes; any other value pauses (fails closed) with a Warning Event BadSkipNodeAnnotation"},
	{Name: "node-agent.io/maintenance-status", Kind: Annotation, On: "its Node", Writers: []Writer{OwnAgent}, Reader: "both",
		TrustedFor: "the agent's own record: what it changed (cordon, taint), so that ending maintenance undoes only that; to the coordinator, whether a node's cordon is node-agent's own, which a pool's safety stop (slots.pools[].maxUnhealthy) does not count",
		Bound:      "a record that does not parse is set aside, never acted on, and to the coordinator the cordon is then someone else's; a forged record cannot lift an admin's cordon or taint in the same request (admission policy, \"admin intent wins\"); a node that claims its cordon is its agent's hides from the safety stop only what its own credentials could undo anyway (uncordon, report Ready)"},
	{Name: "node-agent.io/reboot-status", Kind: Annotation, On: "its Node", Writers: []Writer{OwnAgent}, Reader: "agent",
		TrustedFor: "the reboot controller's own record on its node",
		Bound:      "parsed strictly; a stolen token can have only its own node rebooted by rewriting it, where reboots are on"},
	{Name: "node-agent.io/reboot-pending", Kind: Taint, On: "its Node", Writers: []Writer{OwnAgent}, Reader: "agent",
		TrustedFor: "only whether the reboot controller still has to add or remove it (reboot.preferNoScheduleTaint); kube-scheduler, not node-agent, acts on it: effect PreferNoSchedule scores the node lower for new pods that do not tolerate it",
		Bound:      "the admission policy lets the node's token add or remove this key with effect PreferNoSchedule only, on its own Node; forged, it steers new pods softly off that one node, less than the cordon the same token may set; the coordinator's slot counts (not Ready or unschedulable) and the drain's placement check (NoSchedule, NoExecute) do not read it"},
	{Name: "node-agent.io/drain-slot-request", Kind: Annotation, On: "each Node", Writers: []Writer{OwnAgent}, Reader: "coordinator",
		TrustedFor: "that node's request for a drain slot: its purpose, an ID and a heartbeat",
		Bound:      "one per node (admission policy: only its own Node); the queue is ordered by when the coordinator saw it, never by a time the request states; a purpose off in the configuration is refused; the hold it asks for is cut to reboot.slotHoldBound; a heartbeat unseen for slots.heartbeatBound frees the slot"},
	{Name: "node-agent.io/drain-slot", Kind: Annotation, On: "its Node", Writers: []Writer{Coordinator}, Reader: "both",
		TrustedFor: "the coordinator's answer: this node holds a slot, or waits, or was refused; to a new leader, a Queued answer's time is the request's place in the queue; a Queued answer's reason (the full pool, the holders ahead since when, the place) is text for people only, copied into the node's maintenance record and reboot condition",
		Bound:      "the admission policy refuses it to every agent token; an answer for another request ID is ignored; an answer over 4096 bytes is not parsed, and its reason reaches the Node and the terminal only through pkg/reasontext's bounds"},
	{Name: "node-agent.io/drain-slot", Kind: Label, On: "slot Leases", Writers: []Writer{Coordinator}, Reader: "coordinator",
		TrustedFor: "marks the slot Leases the coordinator watches",
		Bound:      "agents have no right on Leases (RBAC and a second admission policy)"},
	{Name: "node-agent.io/drain-slot-request-id", Kind: Annotation, On: "slot Leases", Writers: []Writer{Coordinator}, Reader: "coordinator",
		TrustedFor: "which request a slot Lease answers, across a change of leader",
		Bound:      "agents have no right on Leases"},
	{Name: "node-agent.io/drain-slot-purpose", Kind: Annotation, On: "slot Leases", Writers: []Writer{Coordinator}, Reader: "coordinator",
		TrustedFor: "the purpose a slot Lease was granted for",
		Bound:      "agents have no right on Leases"},
	{Name: "node-agent.io/drain-slot-recovering-since", Kind: Annotation, On: "slot Leases", Writers: []Writer{Coordinator}, Reader: "coordinator",
		TrustedFor: "since when a node that gave its slot back recovers (slots.pools[].recoveryBound), so a new leader counts the bound from then",
		Bound:      "agents have no right on Leases; a value that is not RFC 3339 counts the bound from when it is read, so the slot is not lost"},
	{Name: "node-agent.io/last-reboot", Kind: Label, On: "the coordinator's last-reboot Lease", Writers: []Writer{Coordinator}, Reader: "coordinator",
		TrustedFor: "when the last reboot slot was granted, for reboot.minInterval across a change of leader",
		Bound:      "agents have no right on Leases"},
	{Name: "kubevirt.io/nodeName", Kind: Label, On: "VirtualMachineInstances", Writers: []Writer{KubeVirt, Tenant}, Reader: "agent",
		TrustedFor: "which VMIs run on the node (the list's selector)",
		Bound:      "a VMI is taken as the node's only when its status.nodeName, which KubeVirt writes, names the node too, so a tenant's label alone moves no VM onto another node's plan"},
	{Name: "kubevirt.io/evacuationMigration", Kind: Annotation, On: "VirtualMachineInstanceMigrations", Writers: []Writer{KubeVirt}, Reader: "agent",
		TrustedFor: "which node an evacuation migration leaves, so that ending maintenance cancels only its own node's",
		Bound:      "the agent deletes only migrations whose VMI runs on its node (admission policy of components/kubevirt-vms)"},
	{Name: "kubernetes.io/config.mirror", Kind: Annotation, On: "Pods", Writers: []Writer{Host}, Reader: "agent",
		TrustedFor: "a static pod, which the drain leaves (as kubectl drain does)",
		Bound:      "a tenant cannot create a pod with it: the apiserver accepts mirror pods only from kubelets (NodeRestriction)"},
	{Name: "node-agent.io/drain-behavior", Kind: Annotation, On: "Pods", Writers: []Writer{Tenant}, Reader: "agent",
		TrustedFor: "the pod's own behaviour in a drain where no drain.podRules rule matches it: Drain, Skip (left on the node; the drain does not wait for it) or WaitCompleted (never evicted; the drain waits for it to complete)",
		Bound:      "a drain.podRules rule that matches the pod wins; any other value is ignored with a Warning Event PodAnnotationIgnored and the pod is drained; a WaitCompleted pod holds the drain no longer than drain.timeout, as a PodDisruptionBudget can; Skip leaves only the writer's own pod behind"},
	{Name: "node-agent.io/drain-order", Kind: Annotation, On: "Pods", Writers: []Writer{Tenant}, Reader: "agent",
		TrustedFor: "the pod's own order group where no drain.podRules rule matches it: it leaves after the groups before it",
		Bound:      "a whole number from 0 (the default) to 1000: a pod may ask to leave later, never before the admin's groups; a matching rule wins; any other value is ignored with a Warning Event and the pod keeps order 0; a group that cannot leave holds the later ones until drain.timeout"},
	{Name: "node-agent.io/do-not-drain", Kind: Annotation, On: "Pods", Writers: []Writer{Tenant}, Reader: "agent",
		TrustedFor: "an opt-out of evictions for a duration (\"4h\"), counted from the pod's creation, which the apiserver sets: until it ends the pod is not evicted and holds its order group",
		Bound:      "cut to drain.doNotDrainBound (0s: none honoured; at most 24h), and drain.timeout ends the drain in any case; a value that is not a positive duration holds nothing and gets a Warning Event; read when a drain begins or resumes"},
	{Name: "Node labels", Kind: Label, On: "Nodes", Writers: []Writer{NodeWriter, Host}, Reader: "both",
		TrustedFor: "slots.pools selectors and failure domains (topologyKey, for maxDomains) (coordinator), and the VM plan's targets (agent)",
		Bound:      "a node's kubelet may set its own labels outside node-restriction.kubernetes.io/ and kubernetes.io/, so a pool selector on such a label lets root on a node move it between pools; select pools on node-restriction.kubernetes.io/ labels. It may also set topology.kubernetes.io/zone (NodeRestriction allows it), so root on a node can join a zone in maintenance and drain beside it, within the pool's node limit; a node without the label is a failure domain of its own"},
	{Name: "Node spec and status", Kind: Object, On: "Nodes", Writers: []Writer{NodeWriter, Host}, Reader: "both",
		TrustedFor: "cordon and taints to respect and undo only if its own; readiness and cordons for pools' maxUnavailable and maxUnhealthy (the safety stop)",
		Bound:      "the agent watches only its own Node (field selector), as that node"},
	{Name: "Pods", Kind: Object, On: "its node", Writers: []Writer{Tenant}, Reader: "agent",
		TrustedFor: "what the drain evicts, and reboot.blockingPodSelector's blockers",
		Bound:      "read as the node, its own pods only; a pod that will not leave holds the drain until drain.timeout; a blocking pod holds a reboot until reboot.blockerBound, and only from reboot.blockingPodNamespaces where set"},
	{Name: "DaemonSet pods' readiness", Kind: Object, On: "a recovering node's pods", Writers: []Writer{Host, Tenant}, Reader: "coordinator",
		TrustedFor: "whether a node that gave its drain slot back in a pool with slots.pools[].recoveryBound is healthy again: every pod on it that a DaemonSet controls, in the pool's slots.pools[].daemonSetNamespaces (empty: every namespace), is Ready (pkg/recovery); listed only for such nodes, by spec.nodeName, and filtered by namespace in the coordinator",
		Bound:      "the kubelet (the host) writes pods' readiness; only DaemonSet pods in daemonSetNamespaces count, so with it set a tenant's DaemonSet counts for nothing; with it empty (every namespace) a tenant who may create a DaemonSet in its own namespace (the admin ClusterRole allows it) can place a pod that never becomes Ready on every node, which keeps each recovering slot until recoveryBound and then stops the pool, as a node that does not recover does: the Warning Event DrainSlotNotRecovered names the pod and the alert NodeAgentDrainSlotRecoveryStop fires; an admin deletes the slot Lease to go on. A node in several such pools counts the union of their namespaces, and every namespace if one of them lists none"},
	{Name: "PodDisruptionBudgets", Kind: Object, On: "the Eviction API", Writers: []Writer{Tenant}, Reader: "apiserver",
		TrustedFor: "evictions refused while a budget allows none",
		Bound:      "drain.timeout, then drain.onTimeout; drain.deleteAfter where set"},
	{Name: "EvictionRequests", Kind: Object, On: "its node's pods", Writers: []Writer{Tenant, OwnAgent}, Reader: "agent",
		TrustedFor: "a responder's progress on a pod's eviction (Kubernetes 1.37)",
		Bound:      "used only when node-agent made it for that pod; a tenant's request under node-agent's name is left alone and the pod evicted through pods/eviction; drain.timeout"},
	{Name: "VirtualMachineInstances", Kind: Object, On: "the cluster", Writers: []Writer{Tenant, KubeVirt}, Reader: "agent",
		TrustedFor: "the VM plan: which VMs can leave the node, and where to",
		Bound:      "a VM that cannot leave holds the maintenance in its gate until maintenance.gateBound, then maintenance.onGateBound decides"},
	{Name: "kubevirt.io/created-by", Kind: Label, On: "Pods", Writers: []Writer{KubeVirt, Tenant}, Reader: "agent",
		TrustedFor: "which pod on its node is a VM's virt-launcher pod (its source pod, whose node selector a host-model VM's target copies), as KubeVirt finds it",
		Bound:      "only a pod in the VMI's namespace, bound to the VMI's node, with the VMI's UID counts; a tenant's pod with the label on another node keeps the VM's target off that node, as kube-scheduler's anti-affinity would"},
	{Name: "Pods and Namespaces of the cluster", Kind: Object, On: "the cluster (components/vm-placement)", Writers: []Writer{Tenant}, Reader: "agent",
		TrustedFor: "the VM plan: other nodes' free capacity, pod affinity, anti-affinity and topology spread, as kube-scheduler weighs them",
		Bound:      "read only with components/vm-placement and only when the node has VMs, in pages up to a cap (beyond it the plan weighs its own node's pods only and says so); a tenant's pods can make a target unfit, as they can for kube-scheduler, and a VM without target holds the maintenance until maintenance.gateBound"},
	{Name: "KubeVirt CR", Kind: Object, On: "kubevirts.kubevirt.io", Writers: []Writer{KubeVirt}, Reader: "agent",
		TrustedFor: "obsolete CPU models and feature gates, as KubeVirt's labeller follows them; the settings its migration target pods are rendered with (node selectors, overcommit, overhead ratio, runtime class)",
		Bound:      "labeller.kubeVirtCR: ignore stops reading it; names are validated as label keys"},
	{Name: "NodeMaintenance objects", Kind: Object, On: "nodemaintenance.medik8s.io and .kubevirt.io", Writers: []Writer{NodeWriter}, Reader: "agent",
		TrustedFor: "a request for maintenance of the node they name, only where maintenance.nodeMaintenance",
		Bound:      "as the annotation; the agent may write only its own node's objects' status and finalizer"},
	{Name: "DaemonSet-owned pods", Kind: Object, On: "Pods", Writers: []Writer{Tenant}, Reader: "agent",
		TrustedFor: "pods the drain leaves, as kubectl drain --ignore-daemonsets does",
		Bound:      "decided from the pod's controller reference"},
	{Name: "Prometheus query answers", Kind: Answer, On: "maintenance.prometheusURL, reboot.prometheusURL", Writers: []Writer{Outside}, Reader: "agent",
		TrustedFor: "gates and blocking alerts: while an answer has a series, the maintenance or reboot waits",
		Bound:      "answers are size-limited and made printable before they reach the Node; a gate holds no longer than maintenance.gateBound or reboot.blockerBound"},
	{Name: "Prometheus answers to the pools' gates", Kind: Answer, On: "slots.prometheusURL", Writers: []Writer{Outside}, Reader: "coordinator",
		TrustedFor: "health checks of a node that gave its drain slot back (slots.pools[].gates): while an answer has a series, or a gate cannot be asked, the node keeps its slot",
		Bound:      "answers are size-limited and made printable (pkg/gates) before they reach an Event or a waiting node's answer; the slot is kept no longer than the pool's recoveryBound, then the pool stops and the alert NodeAgentDrainSlotRecoveryStop fires, as for a node that does not recover"},
	{Name: "Alertmanager answers", Kind: Answer, On: "silences.alertmanagerURL", Writers: []Writer{Outside}, Reader: "agent",
		TrustedFor: "the ID of the silence made, to extend and expire it",
		Bound:      "a silence never holds a drain or a reboot; errors are made printable before they reach the Node"},
	{Name: "webhook responses", Kind: Answer, On: "notifications.webhooks", Writers: []Writer{Outside}, Reader: "agent",
		TrustedFor: "only whether the notification was taken (the status code)",
		Bound:      "notifications.timeout and giveUpAfter; a notification never holds a drain or a reboot"},
	{Name: "systemd-logind", Kind: Answer, On: "the system bus", Writers: []Writer{Host}, Reader: "agent",
		TrustedFor: "shutdown announcements and InhibitDelayMaxSec",
		Bound:      "the drain before a shutdown ends shutdown.safetyMargin before logind's delay, drained or not"},
	{Name: "libvirt and cpuid", Kind: Answer, On: "the host", Writers: []Writer{Host}, Reader: "agent",
		TrustedFor: "the CPU labels",
		Bound:      "discovery runs in a child process killed after labeller.discoveryTimeout; XML is parsed strictly and label keys and values are validated"},
	{Name: "reboot.sentinelFile", Kind: Answer, On: "the host", Writers: []Writer{Host}, Reader: "agent",
		TrustedFor: "the host asks for a reboot",
		Bound:      "reboot.loopBound after a reboot that did not clear it"},
}

// Markdown renders the register as docs/inputs.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# What node-agent reads, and who may write it\n\n")
	b.WriteString("<!-- Generated from pkg/inputs by `make docs`; a test fails when it is out of date. -->\n\n")
	b.WriteString("node-agent runs as root on every node. Each input is trusted only as far as whoever may write it. ")
	b.WriteString("The keys of the configuration file are in [configuration.md](configuration.md#who-may-set-each-key); ")
	b.WriteString("this page lists everything else the agent and the coordinator read. A test fails for an annotation or ")
	b.WriteString("label the code declares and this register does not name.\n\n")
	b.WriteString("| input | kind | on | written by | read by | trusted for | bounded by |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, in := range Register {
		ws := make([]string, len(in.Writers))
		for i, w := range in.Writers {
			ws[i] = string(w)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", in.Name, in.Kind, in.On, strings.Join(ws, ", "), in.Reader,
			escape(in.TrustedFor), escape(in.Bound))
	}
	return b.String()
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
