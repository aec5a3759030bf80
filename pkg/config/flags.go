package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jsonList reads a list key from a flag, as JSON, refusing unknown fields;
// example is a JSON list the error shows.
type jsonList[T any] struct {
	p       *[]T
	example string
}

func (v *jsonList[T]) String() string {
	if v.p == nil || len(*v.p) == 0 {
		return ""
	}
	b, _ := json.Marshal(*v.p)
	return string(b)
}

func (v *jsonList[T]) Type() string { return "json" }

func (v *jsonList[T]) Set(s string) error {
	var list []T
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&list); err != nil {
		return fmt.Errorf("want a JSON list such as %s: %w", v.example, err)
	}
	*v.p = list
	return nil
}

// durationValue adapts a metav1.Duration to pflag.
type durationValue struct{ d *metav1.Duration }

func (v durationValue) String() string { return v.d.Duration.String() }
func (v durationValue) Type() string   { return "duration" }
func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	v.d.Duration = d
	return nil
}

// poolsExample is the pools a refused --slots-pools shows.
const poolsExample = `[{"name":"gpu","selector":"gpu=true","limit":1}]`

// podRulesExample is the rules a refused --drain-pod-rules shows.
const podRulesExample = `[{"name":"vms-last","podSelector":"kubevirt.io=virt-launcher","behavior":"Drain","order":100}]`

// oldRebootWithoutDrainFlag is the deprecated name of --reboot-without-drain.
const oldRebootWithoutDrainFlag = "reboot-reboot-without-drain"

// AddFlags binds every key of the run command to a flag on fs. Flag names are
// the config keys in kebab-case, with the section as prefix (drain.timeout is
// --drain-timeout), except the labeller's, which `node-agent labels` shares
// and which keep their short names (labeller.minCPUModel is
// --min-cpu-model; labeller.enabled is --labeller-enabled), and
// reboot.rebootWithoutDrain, whose flag says reboot once:
// --reboot-without-drain.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "Path of a kubeconfig file. Empty: $KUBECONFIG, then ~/.kube/config, then the pod's service account, as kubectl does.")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "Name of the Node this agent runs on, the only Node it changes. Defaults to $NODE_NAME.")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "Address for /metrics (Prometheus). \"0\" disables it.")
	fs.StringVar(&c.HealthProbeBindAddress, "health-probe-bind-address", c.HealthProbeBindAddress, "Address for /healthz (live) and /readyz (own Node synced). \"0\" disables it.")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "Log format: text or json.")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "Log level: debug, info, warn or error.")
	fs.Float32Var(&c.KubeAPIQPS, "kube-api-qps", c.KubeAPIQPS, "Most requests per second to the apiserver (client-side limit).")
	fs.IntVar(&c.KubeAPIBurst, "kube-api-burst", c.KubeAPIBurst, "Burst above --kube-api-qps allowed for short peaks, such as the start of a drain.")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "Directory for local state, such as the embedded libvirt's cache.")
	c.Labeller.addFlags(fs)
	fs.StringVar(&c.Drain.TaintKey, "drain-taint-key", c.Drain.TaintKey, "Key of the NoSchedule taint added while draining (KubeVirt's nodeDrainTaintKey).")
	fs.StringVar(&c.Drain.PodSelector, "drain-pod-selector", c.Drain.PodSelector, "Label selector that narrows the pods evicted, for example kubevirt.io=virt-launcher. Empty means all.")
	fs.Var(durationValue{&c.Drain.Timeout}, "drain-timeout", "How long a maintenance drain (annotation, NodeMaintenance object or reboot) may run once it holds its drain slot. Past it the drain stops evicting, is marked Failed and gives its slot to the next node; --drain-on-timeout says what becomes of the node. Between 1s and 24h.")
	fs.StringVar(&c.Drain.NodeLifecycleConditions, "drain-node-lifecycle-conditions", c.Drain.NodeLifecycleConditions, "Whether the drain also writes Kubernetes 1.37's node lifecycle conditions (KEP-5683: MaintenancePlanned, MaintenanceInProgress, DrainInProgress, Drained, GracefulNodeShutdownInProgress) on its Node, and removes those it wrote: auto (where the apiserver is 1.37 or later), on, or off.")
	fs.StringVar(&c.Drain.EvictionAPI, "drain-eviction-api", c.Drain.EvictionAPI, "How the drain asks for evictions: eviction (pods/eviction), evictionRequest (Kubernetes 1.37's EvictionRequests: a responder named on the pod, such as a VM's live migration, acts; pods with none are evicted through pods/eviction; maintenance is refused where the API is not served) or auto (EvictionRequests where the apiserver serves them and deploy/components/eviction-requests lets nodes create them, pods/eviction elsewhere).")
	fs.StringVar(&c.Drain.VMWithoutTarget, "drain-vm-without-target", c.Drain.VMWithoutTarget, "What a maintenance does when KubeVirt VMs on the node cannot leave it by live migration (no other node offers their CPU model or features, not live-migratable, or evictionStrategy None): wait (before the cordon, naming them on the Node, until each can) or proceed (drain anyway, after a Warning Event).")
	fs.StringVar(&c.Drain.OnTimeout, "drain-on-timeout", c.Drain.OnTimeout, "What a maintenance drain that passed --drain-timeout leaves on the node: keepCordoned (cordoned and tainted until the maintenance is ended) or uncordon (the agent's cordon and taint undone; the maintenance stays requested and Failed). A reboot's drain is left to the reboot controller.")
	fs.Var(durationValue{&c.Drain.DeleteAfter}, "drain-delete-after", "Delete pods whose eviction is still refused after this long, overriding their PodDisruptionBudget; shorter than --drain-timeout. 0 means never.")
	fs.IntVar(&c.Drain.Parallelism, "drain-parallelism", c.Drain.Parallelism, "Most evictions in flight at once on this node.")
	fs.Var(&jsonList[PodRuleConfig]{&c.Drain.PodRules, podRulesExample}, "drain-pod-rules", `Order and behaviour of the node's pods in a drain, as Cluster API's MachineDrainRules, as JSON: [{"name":"db-last","namespaces":["db"],"podSelector":"app=db","behavior":"Drain","order":10},{"name":"batch","podSelector":"kind=batch","behavior":"WaitCompleted"}]. The first rule a pod matches decides: Drain (evicted in ascending order groups, each gone before the next is evicted), Skip (never evicted, does not hold the drain) or WaitCompleted (never evicted; the drain ends once it completes, within --drain-timeout). A pod no rule matches is Drain, order 0, and may choose by its annotations node-agent.io/drain-behavior and node-agent.io/drain-order (not below 0). Default: virt-launcher pods (VMs) at order 100, last.`)
	fs.Var(durationValue{&c.Drain.DoNotDrainBound}, "drain-do-not-drain-bound", "Longest opt-out honoured from a pod's node-agent.io/do-not-drain annotation (a duration, such as 4h, counted from the pod's creation): until it runs out the pod is not evicted and holds the drain (within --drain-timeout); a longer one is cut to this. 0s: no opt-out is honoured.")
	fs.IntVar(&c.Slots.Limit, "slots-limit", c.Slots.Limit, "Most nodes that hold a drain slot at once, cluster-wide: nodes that drain for maintenance requests (annotation or NodeMaintenance object) or reboots. A shutdown drain takes no slot.")
	fs.StringVar(&c.Slots.Namespace, "slots-namespace", c.Slots.Namespace, "Namespace of the slot Leases (how node-agent-coordinator stores the slots it grants) and of the coordinator's leader election; only node-agent-coordinator writes them.")
	fs.Var(&jsonList[PoolConfig]{&c.Slots.Pools, poolsExample}, "slots-pools", `Pools of nodes with slot limits of their own, as JSON: [{"name":"gpu","selector":"gpu=true","limit":1,"maxUnavailable":"10%"}]; maxUnhealthy (a count or percentage) stops new slots while more of the pool's nodes are not Ready or cordoned other than by node-agent; maxDomains limits how many values of topologyKey (default topology.kubernetes.io/zone) drain at once; recoveryBound (a duration) hands a node's slot on only once the node is Ready again with its DaemonSet pods Ready, and past it keeps the slot and stops the pool; gates (with recoveryBound) are PromQL health checks asked of slots.prometheusURL before the slot is handed on; daemonSetNamespaces (with recoveryBound; empty: every namespace, so a tenant's DaemonSet can stop the pool) are the namespaces whose DaemonSet pods count. A node drains only when every pool it is in has room.`)
	fs.Var(durationValue{&c.Slots.HeartbeatBound}, "slots-heartbeat-bound", "How long the heartbeat of a node holding a drain slot may stay unchanged before the coordinator revokes the slot and hands it to the next node. The agent bumps it every third of this.")
	fs.StringVar(&c.Slots.PrometheusURL, "slots-prometheus-url", c.Slots.PrometheusURL, "Prometheus the pools' gates (slots.pools[].gates, health checks of a node after its maintenance) are asked of by node-agent-coordinator. Empty: none.")
	c.addOldSlotFlags(fs)
	fs.BoolVar(&c.Maintenance.NodeMaintenance, "maintenance-node-maintenance", c.Maintenance.NodeMaintenance, "Serve NodeMaintenance objects (nodemaintenance.medik8s.io or nodemaintenance.kubevirt.io) that name this node. Leave off where node-maintenance-operator runs.")
	fs.Var(durationValue{&c.Maintenance.GateBound}, "maintenance-gate-bound", "How long the maintenance gates and the VMs that cannot leave (--drain-vm-without-target=wait) may hold one maintenance, from its first wait; then --maintenance-on-gate-bound decides.")
	fs.Var(durationValue{&c.Maintenance.HookBound}, "maintenance-hook-bound", "How long the hooks of one phase (the Node's annotations pre-drain.hook.node-agent.io/<name> and post-drain.hook.node-agent.io/<name>) may hold one maintenance: the pre-drain hooks from their first wait, the post-drain hooks from the drain's end; then the maintenance goes on and a Warning Event names them.")
	fs.StringVar(&c.Maintenance.OnGateBound, "maintenance-on-gate-bound", c.Maintenance.OnGateBound, "What a maintenance held past --maintenance-gate-bound does: wait (keep waiting; its status, a Warning Event and node_agent_wait_bound_exceeded_total say so) or proceed (drain past what holds it).")
	fs.StringVar(&c.Maintenance.PrometheusURL, "maintenance-prometheus-url", c.Maintenance.PrometheusURL, "Prometheus the maintenance gates are asked of. Empty: none.")
	fs.Var(&jsonList[GateConfig]{&c.Maintenance.Gates, `[{"name":"ceph-healthy","query":"ceph_health_status > 0"}]`}, "maintenance-gates", `PromQL gates of a maintenance, as JSON: [{"name":"cluster-healthy","query":"kube_node_status_condition{condition="Ready",status="true"} == 0"}]. Asked before the maintenance takes its drain slot, before the cordon, and again every 30s while one holds; while one's answer has a series, or it cannot be asked, the maintenance waits (phase Waiting, which names the gate, its query and its answer) and nothing on the node changes. Empty: no gate.`)
	fs.BoolVar(&c.Shutdown.Enabled, "shutdown-enabled", c.Shutdown.Enabled, "Hold a systemd-logind delay lock and drain the node before the host shuts down.")
	fs.StringVar(&c.Shutdown.SystemBusAddress, "shutdown-system-bus-address", c.Shutdown.SystemBusAddress, "D-Bus address of the host's system bus.")
	fs.Var(durationValue{&c.Shutdown.DrainBudget}, "shutdown-drain-budget", "Time wanted to drain before the host goes down; logind's InhibitDelayMaxSec caps it unless --shutdown-manage-logind-config.")
	fs.Var(durationValue{&c.Shutdown.SafetyMargin}, "shutdown-safety-margin", "Release the delay lock this long before logind's delay expires, drained or not.")
	fs.BoolVar(&c.Shutdown.ManageLogindConfig, "shutdown-manage-logind-config", c.Shutdown.ManageLogindConfig, "Write a logind drop-in raising InhibitDelayMaxSec to the drain budget.")
	fs.StringVar(&c.Shutdown.LogindDropInDir, "shutdown-logind-drop-in-dir", c.Shutdown.LogindDropInDir, "Directory for that drop-in (the host's /etc/systemd/logind.conf.d).")
	fs.BoolVar(&c.Reboot.Enabled, "reboot-enabled", c.Reboot.Enabled, "Reboot this node when the host needs it (sentinel file or command), inside the window, one drain slot at a time, never past a blocker.")
	fs.StringVar(&c.Reboot.SentinelFile, "reboot-sentinel-file", c.Reboot.SentinelFile, "File, as the agent sees it, whose existence means the host needs a reboot. Empty: no file.")
	fs.StringArrayVar(&c.Reboot.SentinelCommand, "reboot-sentinel-command", c.Reboot.SentinelCommand, "Command run on the host as a transient systemd unit; exit status 0 means the host needs a reboot. One flag per argument. Empty: no command. Only on the command line (the DaemonSet's arguments): a config file that sets it is refused, so that writing the ConfigMap cannot run a program as root on the hosts.")
	fs.StringSliceVar(&c.Reboot.Window.Days, "reboot-window-days", c.Reboot.Window.Days, "Days of the week a reboot may start: sun, mon, tue, wed, thu, fri, sat. Empty: every day.")
	fs.StringVar(&c.Reboot.Window.Start, "reboot-window-start", c.Reboot.Window.Start, "Time of day (HH:MM) from which a reboot may start, in --reboot-window-time-zone.")
	fs.StringVar(&c.Reboot.Window.End, "reboot-window-end", c.Reboot.Window.End, "Time of day (HH:MM) from which no reboot starts. Before the start: the window crosses midnight. Equal to the start: the whole day.")
	fs.StringVar(&c.Reboot.Window.TimeZone, "reboot-window-time-zone", c.Reboot.Window.TimeZone, "IANA time zone of the window, such as Europe/Berlin.")
	fs.Var(&jsonList[RebootWindowConfig]{&c.Reboot.Windows, `[{"days":["sat"],"start":"22:00","end":"04:00","timeZone":"Europe/Berlin"}]`}, "reboot-windows", `Several reboot windows, as JSON: [{"days":["sat","sun"],"start":"22:00","end":"04:00","timeZone":"Europe/Berlin"},{"days":["wed"],"start":"12:00","end":"13:00","timeZone":"UTC"}]. A reboot may start inside any of them. Set, it replaces the --reboot-window-* flags. Empty: those.`)
	fs.Var(&jsonList[RebootExceptionConfig]{&c.Reboot.Exceptions, `[{"from":"2026-12-20","to":"2027-01-03","timeZone":"Europe/Berlin"}]`}, "reboot-exceptions", `Dates on which no reboot starts, whatever the windows say, as JSON: [{"from":"2026-12-20","to":"2027-01-03","timeZone":"Europe/Berlin"}] (to included; empty: from alone; timeZone empty: UTC). Empty: none.`)
	fs.Var(durationValue{&c.Reboot.MinInterval}, "reboot-min-interval", "Least time between the starts of two nodes' reboots in the cluster, kept by node-agent-coordinator when it grants their drain slots (a reboot waits in its queue, reason reboot.minInterval). 0s: none.")
	fs.StringVar(&c.Reboot.BlockingPodSelector, "reboot-blocking-pod-selector", c.Reboot.BlockingPodSelector, "Label selector: while a pod on this node matches it, no reboot starts. Empty: no pod blocks.")
	fs.StringSliceVar(&c.Reboot.BlockingPodNamespaces, "reboot-blocking-pod-namespaces", c.Reboot.BlockingPodNamespaces, "Namespaces whose pods --reboot-blocking-pod-selector selects. Empty: every namespace, so that any tenant whose pod runs here can hold the reboot (up to --reboot-blocker-bound).")
	fs.StringVar(&c.Reboot.PrometheusURL, "reboot-prometheus-url", c.Reboot.PrometheusURL, "Prometheus queried for firing alerts (/api/v1/alerts); a matching alert blocks the reboot, and so does a failed query. Empty: alerts are not checked.")
	fs.Var(&jsonList[GateConfig]{&c.Reboot.Gates, `[{"name":"ceph-healthy","query":"ceph_health_status > 0"}]`}, "reboot-gates", `PromQL gates, as JSON: [{"name":"ceph-healthy","query":"ceph_health_status > 0"}]. Each is asked of --reboot-prometheus-url at every check until the drain starts; while its answer has a series, or it cannot be asked, the reboot waits (reason BlockedByGates, which names the gate, its query and its answer). Empty: no gate.`)
	fs.StringVar(&c.Reboot.BlockingAlertRegexp, "reboot-blocking-alert-regexp", c.Reboot.BlockingAlertRegexp, "Regular expression, anchored, for the names of the firing alerts that block a reboot. Empty: every firing alert. The opposite of kured's --alert-filter-regexp, which names the alerts to ignore.")
	fs.BoolVar(&c.Reboot.RebootWithoutDrain, "reboot-without-drain", c.Reboot.RebootWithoutDrain, "Reboot even when the drain did not finish within --drain-timeout. Off: the reboot is given up (reason DrainFailed) and tried again after a backoff.")
	// The name the section prefix gives reboot.rebootWithoutDrain says
	// reboot twice; it stays, hidden and deprecated, for the DaemonSets
	// that already pass it.
	fs.BoolVar(&c.Reboot.RebootWithoutDrain, oldRebootWithoutDrainFlag, c.Reboot.RebootWithoutDrain, "Old name of --reboot-without-drain.")
	_ = fs.MarkDeprecated(oldRebootWithoutDrainFlag, "use --reboot-without-drain")
	fs.BoolVar(&c.Reboot.PreferNoScheduleTaint, "reboot-prefer-no-schedule-taint", c.Reboot.PreferNoScheduleTaint, "While the node's reboot is needed and not done, taint it node-agent.io/reboot-pending:PreferNoSchedule, so new pods go elsewhere when they can. Off: that taint is removed.")
	fs.Var(durationValue{&c.Reboot.CheckInterval}, "reboot-check-interval", "How often the sentinel (and, while a reboot is needed, the blockers) are looked at.")
	fs.Var(durationValue{&c.Reboot.SlotHoldBound}, "reboot-slot-hold-bound", "How long the drain slot stays held while the host reboots; a node not back by then loses it.")
	fs.Var(durationValue{&c.Reboot.BeforeRebootBound}, "reboot-before-reboot-bound", "How long a drained node waits for the reboot gates marked beforeReboot, asked again before the reboot; past it the attempt is given up (drain withdrawn, slot released, retried after a backoff).")
	fs.Var(durationValue{&c.Reboot.BlockerBound}, "reboot-blocker-bound", "How long pods, alerts, gates and VMs may hold a needed reboot, from the first check they held it; then --reboot-on-blocker-bound decides.")
	fs.StringVar(&c.Reboot.OnBlockerBound, "reboot-on-blocker-bound", c.Reboot.OnBlockerBound, "What a reboot held past --reboot-blocker-bound does: wait (keep waiting; a Warning Event, the Node's RebootRequired condition and node_agent_wait_bound_exceeded_total say so) or proceed (the blockers are passed over).")
	fs.Var(durationValue{&c.Reboot.LoopBound}, "reboot-loop-bound", "No second reboot within this time when the sentinel is still there after a reboot (reported as RebootLoop). 0s: no such guard.")

	fs.StringVar(&c.Silences.AlertmanagerURL, "silences-alertmanager-url", c.Silences.AlertmanagerURL, "Alertmanager in which the node's alerts are silenced while it is drained or rebooting (its v2 API). Empty: no silence.")
	fs.StringVar(&c.Silences.NodeLabel, "silences-node-label", c.Silences.NodeLabel, "The alert label that carries the node's name; the silence matches it.")
	fs.Var(&jsonList[SilenceMatcherConfig]{&c.Silences.Matchers, `[{"name":"severity","value":"critical","negate":true}]`}, "silences-matchers", `Matchers added to the node's, as JSON: [{"name":"severity","value":"critical","negate":true}] (isRegex: the value is a regular expression; negate: what does not match). Empty: every alert of the node.`)
	fs.Var(durationValue{&c.Silences.Duration}, "silences-duration", "How long a silence lasts past each extension; it is extended while the node is drained or rebooting, and expired when it no longer is.")
	fs.Var(&jsonList[WebhookConfig]{&c.Notifications.Webhooks, `[{"name":"ops","url":"https://hooks.example.com/x","preset":"slack"}]`}, "notifications-webhooks", `Webhooks told of maintenance and reboots on this node, as JSON: [{"name":"ops","url":"https://hooks.example.com/x","preset":"slack","events":["maintenance-failed","reboot-failed"]}]. url, or urlFile (a mounted Secret holding it); preset json (default) or slack, or a template placing fields ({{json .Node}}); events: maintenance-started, maintenance-drained, maintenance-failed, maintenance-ended, reboot-rebooting, reboot-back, reboot-failed (empty: all). A notification never holds up a drain or a reboot. Empty: none.`)
	fs.Var(durationValue{&c.Notifications.Timeout}, "notifications-timeout", "Bound on one attempt at one notification.")
	fs.Var(durationValue{&c.Notifications.GiveUpAfter}, "notifications-give-up-after", "Bound on the attempts at one notification (retried with a doubling backoff from 1s); then it is given up and counted as failed.")
}

// AddLabellerFlags binds only the labelling keys, for `node-agent labels`.
func (c *Config) AddLabellerFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "Directory for local state, such as the embedded libvirt's cache.")
	c.Labeller.addFlags(fs)
}

func (l *LabellerConfig) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&l.Enabled, "labeller-enabled", l.Enabled, "Keep the Node's CPU labels (cpu-model, cpu-feature, host-model, ...) in step with the host.")
	fs.StringVar(&l.LibvirtURI, "libvirt-uri", l.LibvirtURI, "libvirt connection URI. \"auto\" tries qemu:///system, then the embedded QEMU driver under --state-dir. Accepted: \"auto\"; qemu:///system or qemu+unix:///system, optionally with ?socket=<absolute path>; qemu:///embed?root=<absolute path>. Other transports (qemu+ext runs a program, qemu+ssh, qemu+tcp, qemu+tls reach other hosts) and drivers are refused.")
	fs.StringVar(&l.VirtType, "virt-type", l.VirtType, "libvirt domain type to ask about: kvm, qemu, or auto (kvm when /dev/kvm exists, else qemu).")
	fs.Var(durationValue{&l.RediscoveryPeriod}, "rediscovery-period", "How often the host CPU is examined again, so hypervisor or microcode updates show without a restart.")
	fs.Var(durationValue{&l.DiscoveryTimeout}, "discovery-timeout", "How long one CPU discovery (a child process that talks to libvirt) may take before it is killed; the labels stay and the next period tries again. A cold discovery with the embedded libvirt probes QEMU for about 20 s.")
	fs.StringVar(&l.KubeVirtCR, "kubevirt-cr", l.KubeVirtCR, "auto: where the cluster serves kubevirts.kubevirt.io, follow the KubeVirt CR's obsoleteCPUModels and CrossArchitectureVirtualization feature gate as KubeVirt does, with no minimum CPU model; --min-cpu-model and --obsolete-cpu-models apply only where there is no CR. ignore: never read it.")
	fs.StringVar(&l.MinCPUModel, "min-cpu-model", l.MinCPUModel, "CPU model every node is assumed to have; its features get no cpu-feature or host-model-required-features label. \"\" labels every supported feature, as KubeVirt's own labeller does since 2022, and as node-agent does under a KubeVirt CR (--kubevirt-cr). With a model set, a VM that needs one of the model's features cannot ask for it in a node selector, and may be live-migrated to a node lacking it with nothing in the labels to say why.")
	fs.StringSliceVar(&l.ObsoleteCPUModels, "obsolete-cpu-models", l.ObsoleteCPUModels, "CPU models never labelled, added to the built-in list (KubeVirt's defaults), as the HyperConverged CR's obsoleteCPUs are; the host model on them gets node-labeller.kubevirt.io/obsolete-host-model. Where there is a KubeVirt CR (--kubevirt-cr), its obsoleteCPUModels win and replace the built-in list, as in KubeVirt.")
}
