package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/node-agent/node-agent/pkg/notify/spec"
	"github.com/node-agent/node-agent/pkg/reboot/policy"
)

// SilencesConfig configures the silence of a drained or rebooting node's
// alerts (pkg/silence).
type SilencesConfig struct {
	// AlertmanagerURL is where silences are made (its v2 API); empty: no
	// silence.
	AlertmanagerURL string `json:"alertmanagerURL,omitempty"`
	// NodeLabel is the alert label that carries the node's name.
	NodeLabel string `json:"nodeLabel"`
	// Matchers are added to the node's: the silence covers only alerts
	// that match them all.
	Matchers []SilenceMatcherConfig `json:"matchers,omitempty"`
	// Duration is how long a silence lasts past each extension; it is
	// extended while the node stays disrupted, and runs out on its own this
	// long after an agent that made it went away.
	Duration metav1.Duration `json:"duration"`
}

// SilenceMatcherConfig is one Alertmanager matcher.
type SilenceMatcherConfig struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// IsRegex matches Value as a regular expression.
	IsRegex bool `json:"isRegex,omitempty"`
	// Negate matches what does not equal (or match) Value.
	Negate bool `json:"negate,omitempty"`
}

// validateSilences checks the silences keys.
func validateSilences(s *SilencesConfig) []error {
	var errs []error
	if s.AlertmanagerURL != "" {
		if err := spec.CheckURL(s.AlertmanagerURL); err != nil {
			errs = append(errs, fmt.Errorf("silences.alertmanagerURL: %w", err))
		}
	}
	if msgs := validation.IsQualifiedName(s.NodeLabel); len(msgs) > 0 || strings.Contains(s.NodeLabel, "/") {
		errs = append(errs, fmt.Errorf("silences.nodeLabel %q: want a Prometheus label name such as node or instance", s.NodeLabel))
	}
	for i, m := range s.Matchers {
		if m.Name == "" {
			errs = append(errs, fmt.Errorf("silences.matchers[%d]: empty name", i))
		}
		if m.IsRegex {
			if _, err := regexp.Compile("^(?:" + m.Value + ")$"); err != nil {
				errs = append(errs, fmt.Errorf("silences.matchers[%d] (%s): %w", i, m.Name, err))
			}
		}
	}
	return errs
}

// NotificationsConfig configures the webhooks (pkg/notify). They never
// hold up a drain or a reboot.
type NotificationsConfig struct {
	// Webhooks are the receivers; empty: none.
	Webhooks []WebhookConfig `json:"webhooks,omitempty"`
	// Timeout bounds one attempt at one notification.
	Timeout metav1.Duration `json:"timeout"`
	// GiveUpAfter bounds the attempts at one notification.
	GiveUpAfter metav1.Duration `json:"giveUpAfter"`
}

// WebhookConfig is one receiver of notifications.
type WebhookConfig struct {
	// Name names it in logs and metrics.
	Name string `json:"name"`
	// URL is where notifications are POSTed; or URLFile, a file (a
	// mounted Secret) that holds it, for a URL that is a credential, as
	// Slack's are.
	URL     string `json:"url,omitempty"`
	URLFile string `json:"urlFile,omitempty"`
	// Preset is json (default) or slack; Template, when set, makes the
	// body instead: text with placeholders {{.Field}} or {{json .Field}}
	// of Event, Node, Reason, Type, Message, Time (spec.Template).
	Preset   string `json:"preset,omitempty"`
	Template string `json:"template,omitempty"`
	// Events it is told of; empty: every event.
	Events []string `json:"events,omitempty"`
}

// MaxWebhookTemplate bounds a webhook's template text.
const MaxWebhookTemplate = 16 << 10

// validateNotifications checks notifications.webhooks.
func validateNotifications(n *NotificationsConfig) []error {
	var errs []error
	seen := map[string]bool{}
	for i, w := range n.Webhooks {
		key := fmt.Sprintf("notifications.webhooks[%d]", i)
		if msgs := validation.IsDNS1123Label(w.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", key, w.Name, strings.Join(msgs, "; ")))
		} else if seen[w.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: used twice", key, w.Name))
		}
		seen[w.Name] = true
		switch {
		case (w.URL == "") == (w.URLFile == ""):
			errs = append(errs, fmt.Errorf("%s (%s): set url or urlFile, one of them", key, w.Name))
		case w.URL != "":
			if err := spec.CheckURL(w.URL); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s).url: %w", key, w.Name, err))
			}
		case !filepath.IsAbs(w.URLFile):
			errs = append(errs, fmt.Errorf("%s (%s).urlFile %q: must be an absolute path", key, w.Name, w.URLFile))
		}
		switch w.Preset {
		case "", spec.PresetJSON, spec.PresetSlack:
		default:
			errs = append(errs, fmt.Errorf("%s (%s).preset %q: must be json or slack", key, w.Name, w.Preset))
		}
		if len(w.Template) > MaxWebhookTemplate {
			errs = append(errs, fmt.Errorf("%s (%s).template: %d bytes, at most %d", key, w.Name, len(w.Template), MaxWebhookTemplate))
		} else if w.Template != "" {
			if _, err := spec.ParseTemplate(w.Name, w.Template); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s).template: %w", key, w.Name, err))
			}
		}
		for _, e := range w.Events {
			if !slices.Contains(spec.Events, spec.Event(e)) {
				errs = append(errs, fmt.Errorf("%s (%s).events: %q is not one of %v", key, w.Name, e, spec.Events))
			}
		}
	}
	return errs
}

// MaintenanceConfig chooses the maintenance APIs the agent serves besides
// its own node-agent.io/maintenance annotation.
type MaintenanceConfig struct {
	// NodeMaintenance serves NodeMaintenance objects
	// (nodemaintenance.medik8s.io and nodemaintenance.kubevirt.io, v1beta1)
	// that name this node. Off by default, so the agent never competes
	// with a node-maintenance-operator that serves the same objects.
	NodeMaintenance bool `json:"nodeMaintenance"`
	// PrometheusURL is the Prometheus the maintenance gates are asked of.
	PrometheusURL string `json:"prometheusURL,omitempty"`
	// Gates are PromQL queries asked before a maintenance takes its drain
	// slot, before the cordon: while one's answer has a series, or it
	// cannot be asked, the maintenance waits and nothing on the node
	// changes. A shutdown's and a reboot's drains do not wait for them
	// (reboot.gates are the reboot's).
	Gates []GateConfig `json:"gates,omitempty"`
	// GateBound is how long the gates and the VMs that cannot leave
	// (drain.vmWithoutTarget wait) may hold one maintenance, counted from
	// its first wait; OnGateBound says what happens then: "wait" (it keeps
	// waiting, and the Node's status, a Warning Event and
	// node_agent_wait_bound_exceeded_total say so) or "proceed" (the drain
	// starts past them).
	GateBound   metav1.Duration `json:"gateBound"`
	OnGateBound string          `json:"onGateBound"`
	// HookBound is how long the hooks of one phase (the annotations
	// pre-drain.hook.node-agent.io/<name> and
	// post-drain.hook.node-agent.io/<name>, pkg/hooks) may hold one
	// maintenance: the pre-drain hooks from their first wait, the
	// post-drain hooks from the drain's end. Past it they hold no longer:
	// the maintenance goes on and a Warning Event names them.
	HookBound metav1.Duration `json:"hookBound"`
}

// LabellerConfig configures CPU discovery and labelling.
type LabellerConfig struct {
	// Enabled turns CPU labelling on.
	Enabled bool `json:"enabled"`
	// LibvirtURI is a libvirt connection URI, or "auto".
	LibvirtURI string `json:"libvirtURI"`
	// VirtType is the libvirt domain type asked about: kvm, qemu, or auto
	// (kvm when /dev/kvm exists, else qemu).
	VirtType string `json:"virtType"`
	// RediscoveryPeriod is how often the host is examined again, so that a
	// QEMU, libvirt or microcode update shows without a restart.
	RediscoveryPeriod metav1.Duration `json:"rediscoveryPeriod"`
	// DiscoveryTimeout bounds one discovery. Discovery runs in a child
	// process, killed when this passes; the labels stay as they were and the
	// next period tries again.
	DiscoveryTimeout metav1.Duration `json:"discoveryTimeout"`
	// KubeVirtCR is KubeVirtCRAuto or KubeVirtCRIgnore: whether the
	// settings of the KubeVirt CR (kubevirts.kubevirt.io) win over
	// MinCPUModel and ObsoleteCPUModels where the cluster serves it.
	KubeVirtCR string `json:"kubeVirtCR"`
	// MinCPUModel is the CPU model whose features every node is assumed to
	// have; its features get no cpu-feature label. Empty turns the
	// subtraction off, as KubeVirt's own labeller has it since 2022. Not
	// applied under a KubeVirt CR, which subtracts nothing.
	MinCPUModel string `json:"minCPUModel"`
	// ObsoleteCPUModels are added to the built-in obsolete list (as the
	// HyperConverged CR's obsoleteCPUs are), and the host model on them is
	// marked obsolete, as the KubeVirt CR's obsoleteCPUModels do. Not
	// applied under a KubeVirt CR, whose own list applies.
	ObsoleteCPUModels []string `json:"obsoleteCPUModels,omitempty"`
}

// DrainConfig configures self-drain.
type DrainConfig struct {
	// TaintKey is the NoSchedule taint added while draining, as KubeVirt's
	// nodeDrainTaintKey.
	TaintKey string `json:"taintKey"`
	// PodSelector narrows the pods to evict, for example kubevirt.io=virt-launcher.
	PodSelector string `json:"podSelector,omitempty"`
	// Timeout bounds a maintenance drain (annotation, NodeMaintenance
	// object or reboot; not a shutdown drain), counted from the moment it
	// took its drain slot and began, so a wait for the slot does not count.
	// When it passes with pods left, the drain stops evicting, its status
	// turns Failed and it gives its slot back, so that one pod that cannot
	// leave (a PodDisruptionBudget that allows nothing, a VM that cannot
	// migrate) never holds every other node's maintenance; OnTimeout says
	// what becomes of the node. It must be between MinDrainTimeout and
	// MaxDrainTimeout (Bounds): no timeout at all would let one drain hold
	// its slot for ever.
	Timeout metav1.Duration `json:"timeout"`
	// OnTimeout is what a maintenance drain that passed Timeout leaves on
	// the node: OnTimeoutKeepCordoned or OnTimeoutUncordon. A reboot's
	// drain is left to the reboot controller either way.
	OnTimeout string `json:"onTimeout"`
	// DeleteAfter deletes pods whose eviction is still refused after this
	// long; 0 means never. It must be shorter than Timeout, past which the
	// drain asks for nothing more.
	DeleteAfter metav1.Duration `json:"deleteAfter"`
	// NodeLifecycleConditions says whether the drain also writes the node
	// lifecycle conditions of Kubernetes 1.37 (KEP-5683) on its Node:
	// "auto" where the apiserver is 1.37 or later, "on", or "off"
	// (pkg/nodelifecycle).
	NodeLifecycleConditions string `json:"nodeLifecycleConditions"`
	// EvictionAPI is how the drain asks for evictions: "eviction"
	// (pods/eviction), "evictionRequest" (Kubernetes 1.37's
	// EvictionRequests, where a responder named on the pod acts; refused
	// where the apiserver does not serve them) or "auto" (EvictionRequests
	// where served and allowed) (pkg/evictionrequest).
	EvictionAPI string `json:"evictionAPI"`
	// VMWithoutTarget is what a maintenance does where KubeVirt VMs on the
	// node cannot leave it by live migration (no other node offers their
	// CPU, not live-migratable, strategy None): "wait" (before the cordon,
	// naming them, until each can) or "proceed" (drain anyway, after a
	// Warning Event) (pkg/vmdrain).
	VMWithoutTarget string `json:"vmWithoutTarget"`
	// Parallelism bounds the evictions in flight on this node.
	Parallelism int `json:"parallelism"`
	// PodRules say, as Cluster API's MachineDrainRules do, in which order
	// the drain evicts pods and which it leaves: the first rule a pod
	// matches decides. Order groups go in ascending order, each gone
	// before the next is evicted; a pod no rule matches is Drain, order 0.
	// Setting the list replaces the default, which has virt-launcher pods
	// (VMs) leave last (docs/drain-order.md says why).
	PodRules []PodRuleConfig `json:"podRules"`
	// DoNotDrainBound is the longest opt-out the pod annotation
	// node-agent.io/do-not-drain is honoured for, counted from the pod's
	// creation: a longer one is cut to it, so a tenant cannot hold a node
	// for ever. 0 honours none.
	DoNotDrainBound metav1.Duration `json:"doNotDrainBound"`
}

// PodRuleConfig is one entry of drain.podRules.
type PodRuleConfig struct {
	// Name names the rule in the drain's status, Events and logs.
	Name string `json:"name"`
	// Namespaces the rule applies to; empty: every namespace. Names, not
	// a selector over Namespace labels: the agent reads no Namespace.
	Namespaces []string `json:"namespaces,omitempty"`
	// PodSelector is a label selector over the pods; empty: every pod.
	PodSelector string `json:"podSelector,omitempty"`
	// Behavior is Drain (evict, in Order), Skip (never evicted, and does
	// not hold the drain) or WaitCompleted (never evicted; the drain ends
	// only once the pod has completed or is gone, within drain.timeout).
	Behavior string `json:"behavior"`
	// Order is the pod's order group, for Drain: lower leaves first.
	Order int `json:"order,omitempty"`
}

// The behaviours of drain.podRules and of the pod annotation
// node-agent.io/drain-behavior, as Cluster API's MachineDrainRules name
// them.
const (
	PodBehaviorDrain         = "Drain"
	PodBehaviorSkip          = "Skip"
	PodBehaviorWaitCompleted = "WaitCompleted"
)

// PodBehaviors are the behaviours, in the order the docs list them.
var PodBehaviors = []string{PodBehaviorDrain, PodBehaviorSkip, PodBehaviorWaitCompleted}

// The ends of a drain order group, in drain.podRules and the pod
// annotation node-agent.io/drain-order.
const (
	MinPodOrder = -1000
	MaxPodOrder = 1000
	// DefaultVMOrder is the order of virt-launcher pods in the default
	// drain.podRules: after every pod no rule matches (order 0).
	DefaultVMOrder = 100
)

// validatePodRules checks drain.podRules; the ranges of order and the
// list's length are Bounds'.
func validatePodRules(rules []PodRuleConfig) []error {
	var errs []error
	names := map[string]bool{}
	for i, r := range rules {
		at := fmt.Sprintf("drain.podRules[%d]", i)
		if msgs := validation.IsDNS1123Label(r.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", at, r.Name, strings.Join(msgs, "; ")))
		} else if names[r.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: used twice; give each rule a name of its own", at, r.Name))
		}
		names[r.Name] = true
		for _, ns := range r.Namespaces {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s (%s).namespaces: %q is not a namespace name (%s)", at, r.Name, ns, strings.Join(msgs, "; ")))
			}
		}
		if _, err := labels.Parse(r.PodSelector); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s).podSelector %q: %w", at, r.Name, r.PodSelector, err))
		}
		if !slices.Contains(PodBehaviors, r.Behavior) {
			errs = append(errs, fmt.Errorf("%s (%s).behavior %q: want one of %s", at, r.Name, r.Behavior, strings.Join(PodBehaviors, ", ")))
		} else if r.Behavior != PodBehaviorDrain && r.Order != 0 {
			errs = append(errs, fmt.Errorf("%s (%s).order %d: only a Drain rule has an order; a %s pod is never evicted", at, r.Name, r.Order, r.Behavior))
		}
	}
	return errs
}

// SlotsConfig configures the drain slots: how many nodes may drain at once,
// cluster-wide and per pool, and how the coordinator (node-agent-coordinator)
// keeps them (pkg/slots; the words are docs/glossary.md's). The agent reads
// HeartbeatBound; the coordinator reads all of it. These keys were
// drain.maxConcurrentNodes, drain.leaseNamespace, drain.pools and
// drain.slotSilenceBound, which a file may still use (oldkeys.go).
type SlotsConfig struct {
	// Limit bounds how many nodes hold a slot at once, cluster-wide (the
	// pool "default"): nodes that drain for maintenance requests
	// (annotation or NodeMaintenance object) or reboots. A shutdown drain
	// takes no slot: the host goes down anyway.
	Limit int `json:"limit"`
	// Namespace holds the slot Leases (how the coordinator stores a slot)
	// and the coordinator's leader election Lease; only the coordinator
	// writes them.
	Namespace string `json:"namespace"`
	// Pools are groups of nodes with limits of their own, beside Limit for
	// the whole cluster: a node drains only when every pool it belongs to
	// has room.
	Pools []PoolConfig `json:"pools,omitempty"`
	// HeartbeatBound is how long the heartbeat in the slot request of a
	// node holding a slot may go unchanged before the coordinator revokes
	// the slot and hands it to the next node. The agent bumps the
	// heartbeat every third of it.
	HeartbeatBound metav1.Duration `json:"heartbeatBound"`
	// PrometheusURL is the Prometheus the pools' gates (health checks
	// after a node's maintenance, slots.pools[].gates) are asked of.
	PrometheusURL string `json:"prometheusURL,omitempty"`
}

// The values of drain.onTimeout.
const (
	// OnTimeoutKeepCordoned leaves the node cordoned and tainted, so that
	// nothing new lands on it while an admin looks at the pods that stayed.
	OnTimeoutKeepCordoned = "keepCordoned"
	// OnTimeoutUncordon undoes what the agent did (uncordon, drain taint
	// removed, only where the agent did them), so the node serves again
	// while the maintenance stays requested and Failed.
	OnTimeoutUncordon = "uncordon"
)

// ShutdownConfig configures the systemd-logind shutdown guard.
type ShutdownConfig struct {
	// Enabled turns the shutdown guard on.
	Enabled bool `json:"enabled"`
	// SystemBusAddress is the D-Bus address of the system bus.
	SystemBusAddress string `json:"systemBusAddress"`
	// DrainBudget is the time wanted to drain before the host goes down.
	DrainBudget metav1.Duration `json:"drainBudget"`
	// SafetyMargin is how long before logind's delay expires the lock is
	// released, whatever the drain's state.
	SafetyMargin metav1.Duration `json:"safetyMargin"`
	// ManageLogindConfig allows writing a logind drop-in that raises
	// InhibitDelayMaxSec to DrainBudget.
	ManageLogindConfig bool `json:"manageLogindConfig"`
	// LogindDropInDir is where that drop-in is written.
	LogindDropInDir string `json:"logindDropInDir"`
}

// RebootConfig configures the reboot controller (pkg/reboot): it reboots
// this node when the host asks for it, inside a window, never past a
// blocker.
type RebootConfig struct {
	// Enabled turns the reboot controller on. Off by default: a node-agent
	// upgrade must not start rebooting nodes.
	Enabled bool `json:"enabled"`
	// SentinelFile is the path, as the agent sees it, of the file whose
	// existence means the host needs a reboot (Debian's and Ubuntu's
	// unattended-upgrades create /run/reboot-required). Empty: no file.
	SentinelFile string `json:"sentinelFile"`
	// SentinelCommand is run on the host, as a transient systemd unit; exit
	// status 0 means the host needs a reboot. Empty: no command.
	SentinelCommand []string `json:"sentinelCommand,omitempty"`
	// Window is when a reboot may start.
	Window RebootWindowConfig `json:"window"`
	// Windows, when set, replace Window: a reboot may start inside any of
	// them (several days and times, each in its own zone).
	Windows []RebootWindowConfig `json:"windows,omitempty"`
	// Exceptions are dates on which no reboot starts, whatever the
	// windows say: a change freeze, the holidays.
	Exceptions []RebootExceptionConfig `json:"exceptions,omitempty"`
	// MinInterval is the least time between the starts of two nodes'
	// reboots in the cluster; node-agent-coordinator keeps it when it
	// grants the reboots' drain slots. 0: none.
	MinInterval metav1.Duration `json:"minInterval"`
	// BlockingPodSelector: while a pod on this node matches it, no reboot
	// starts. Empty: no pod blocks.
	BlockingPodSelector string `json:"blockingPodSelector,omitempty"`
	// BlockingPodNamespaces limits BlockingPodSelector to the pods of
	// these namespaces. Empty: every namespace, so that any tenant who may
	// label a pod scheduled here holds the node's reboot (up to
	// BlockerBound).
	BlockingPodNamespaces []string `json:"blockingPodNamespaces,omitempty"`
	// PrometheusURL is queried for firing alerts; a firing alert whose
	// name matches BlockingAlertRegexp blocks the reboot. Empty: alerts
	// are not checked.
	PrometheusURL string `json:"prometheusURL,omitempty"`
	// Gates are PromQL queries asked of PrometheusURL at every check until
	// the drain starts (before and while the drain slot is waited for): a
	// gate whose answer holds a series blocks the reboot, and so does one
	// that cannot be asked.
	Gates []GateConfig `json:"gates,omitempty"`
	// BlockingAlertRegexp selects, by alertname, the firing alerts that
	// block a reboot. It is anchored at both ends, as Prometheus's own
	// =~ matchers. Empty: every firing alert blocks. It makes the first
	// gate: the query ALERTS{alertstate="firing",alertname=~"<regexp>"}
	// (pkg/reboot/policy AlertsQuery), whose alerts are named one by one.
	//
	// kured's --alert-filter-regexp names the alerts to ignore (unless
	// --alert-filter-match-only); this key names the alerts that block, so
	// it carries another name rather than kured's with the opposite meaning.
	BlockingAlertRegexp string `json:"blockingAlertRegexp,omitempty"`
	// RebootWithoutDrain reboots even when the drain did not finish within
	// drain.timeout. Off: the reboot is given up (reason DrainFailed),
	// because rebooting then drops the pods the drain could not move; the
	// coordinator withdraws its drain and releases the slot, and the next
	// attempt waits CheckInterval, doubling with each failure in a row up
	// to a day (reboot.DrainFailedBackoff), unless an admin asks again.
	RebootWithoutDrain bool `json:"rebootWithoutDrain"`
	// PreferNoScheduleTaint puts the PreferNoSchedule taint
	// node-agent.io/reboot-pending (pkg/reboot PendingTaintKey) on the Node
	// while its reboot is needed and not done, so that the scheduler places
	// new pods elsewhere when it can: they would be evicted again by the
	// reboot's drain. Off: the controller removes that taint where it is.
	// On by default (docs/reboots.md says why).
	PreferNoScheduleTaint bool `json:"preferNoScheduleTaint"`
	// CheckInterval is how often the sentinel (and, while a reboot is
	// needed, the blockers) are looked at. Changes of the Node and of the
	// drain slots wake the coordinator at once.
	CheckInterval metav1.Duration `json:"checkInterval"`
	// SlotHoldBound is how long the drain slot stays held while the host
	// reboots. The rebooted agent takes it back and gives it up once the
	// node is Ready and uncordoned; a node that is not back within the
	// bound loses the slot, so that the rest of the cluster can go on.
	SlotHoldBound metav1.Duration `json:"slotHoldBound"`
	// LoopBound is how long after a reboot a sentinel that is still there
	// does not cause another reboot (reported as RebootLoop); 0 turns the
	// guard off.
	LoopBound metav1.Duration `json:"loopBound"`
	// BeforeRebootBound is how long a drained node waits for the gates
	// marked beforeReboot, asked again once the drain finished; past it
	// the attempt is given up as a drain past drain.timeout is (drain
	// withdrawn, slot released, retried after a backoff).
	BeforeRebootBound metav1.Duration `json:"beforeRebootBound"`
	// BlockerBound is how long blockers (pods, alerts, gates, VMs) may
	// hold a needed reboot, counted from the first check they held it;
	// OnBlockerBound says what happens then: "wait" (the reboot keeps
	// waiting, and the Node, a Warning Event and
	// node_agent_wait_bound_exceeded_total say so) or "proceed" (the
	// blockers are passed over and the reboot starts).
	BlockerBound   metav1.Duration `json:"blockerBound"`
	OnBlockerBound string          `json:"onBlockerBound"`
}

// The values of reboot.onBlockerBound.
const (
	OnBoundWait    = "wait"
	OnBoundProceed = "proceed"
)

// RebootWindowConfig is when a reboot may start. A reboot already under way
// when the window closes finishes.
type RebootWindowConfig struct {
	// Days are the days of the week a reboot may start on (sun, mon, tue,
	// wed, thu, fri, sat). Empty: every day.
	Days []string `json:"days,omitempty"`
	// Start and End are the times of day ("HH:MM", 24-hour) between which
	// a reboot may start, in TimeZone. End before Start crosses midnight
	// (22:00 to 04:00); End equal to Start is the whole day.
	Start string `json:"start"`
	End   string `json:"end"`
	// TimeZone is an IANA time zone name, such as Europe/Berlin or UTC.
	TimeZone string `json:"timeZone"`
}

// RebootExceptionConfig is one entry of reboot.exceptions: the dates from
// From to To, both included, in TimeZone.
type RebootExceptionConfig struct {
	// From and To are dates, YYYY-MM-DD; To empty means From alone.
	From string `json:"from"`
	To   string `json:"to,omitempty"`
	// TimeZone is an IANA time zone name; empty means UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

// Schedule builds the reboot schedule these keys describe: Windows, or
// Window when Windows is empty, less Exceptions.
func (r *RebootConfig) Schedule() (policy.Schedule, []error) {
	var errs []error
	var s policy.Schedule
	windows, key := r.Windows, "reboot.windows"
	if len(windows) == 0 {
		windows, key = []RebootWindowConfig{r.Window}, "reboot.window"
	}
	for i, w := range windows {
		pw, err := policy.ParseWindow(w.Days, w.Start, w.End, w.TimeZone)
		if err != nil {
			prefix := key + "."
			if key == "reboot.windows" {
				prefix = fmt.Sprintf("%s[%d].", key, i)
			}
			for _, e := range unwrapAll(err) {
				errs = append(errs, fmt.Errorf("%s%w", prefix, e))
			}
			continue
		}
		s.Windows = append(s.Windows, pw)
	}
	for i, e := range r.Exceptions {
		pe, err := policy.ParseException(e.From, e.To, e.TimeZone)
		if err != nil {
			for _, x := range unwrapAll(err) {
				errs = append(errs, fmt.Errorf("reboot.exceptions[%d].%w", i, x))
			}
			continue
		}
		s.Exceptions = append(s.Exceptions, pe)
	}
	return s, errs
}

// GateConfig is one entry of reboot.gates.
type GateConfig struct {
	// Name names the gate in the reboot's reason and in reboot status.
	Name string `json:"name"`
	// Query is a PromQL expression; the gate holds while its answer (an
	// instant vector) has a series, as a Prometheus alert rule fires while
	// its expression does.
	Query string `json:"query"`
	// BeforeReboot asks the gate again once the node is drained, right
	// before the reboot: while it holds, the drained node waits, up to
	// reboot.beforeRebootBound. For gates the drain itself does not trip
	// (etcd quorum, a storage cluster's health), not for alerts a drain
	// raises. Only reboot.gates take it.
	BeforeReboot bool `json:"beforeReboot,omitempty"`
}

// MaxGateQuery bounds the text of one gate's query.
const MaxGateQuery = 4096

// validateGates checks reboot.gates: named, distinct, with a query.
func validateGates(r *RebootConfig) []error {
	return checkGates("reboot", "reboot", r.Gates, r.PrometheusURL)
}

// checkGates checks the gates of section: named, distinct, with a query,
// and a Prometheus to ask, urlSection.prometheusURL.
func checkGates(section, urlSection string, gates []GateConfig, prometheusURL string) []error {
	var errs []error
	seen := map[string]bool{}
	for i, g := range gates {
		if msgs := validation.IsDNS1123Label(g.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.gates[%d].name %q: %s", section, i, g.Name, strings.Join(msgs, "; ")))
		} else if seen[g.Name] {
			errs = append(errs, fmt.Errorf("%s.gates[%d].name %q: used twice", section, i, g.Name))
		}
		seen[g.Name] = true
		switch q := strings.TrimSpace(g.Query); {
		case q == "":
			errs = append(errs, fmt.Errorf("%s.gates[%d] (%s): empty query", section, i, g.Name))
		case len(g.Query) > MaxGateQuery:
			errs = append(errs, fmt.Errorf("%s.gates[%d] (%s): query of %d bytes, at most %d", section, i, g.Name, len(g.Query), MaxGateQuery))
		}
		if g.BeforeReboot && section != "reboot" {
			errs = append(errs, fmt.Errorf("%s.gates[%d] (%s): beforeReboot is for reboot.gates only; a maintenance has no reboot to ask it before", section, i, g.Name))
		}
	}
	if len(gates) > 0 && prometheusURL == "" {
		errs = append(errs, fmt.Errorf("%s.gates: set %s.prometheusURL, the Prometheus the gates are asked of", section, urlSection))
	}
	// reboot.prometheusURL is checked with the other reboot keys.
	if prometheusURL != "" && section == "maintenance" {
		if err := spec.CheckURL(prometheusURL); err != nil {
			errs = append(errs, fmt.Errorf("maintenance.prometheusURL: %w", err))
		}
	}
	return errs
}
