// Package config owns node-agent's configuration: the Config struct, its
// defaults, the command-line flags that mirror its keys, the strict loading of
// the --config YAML file, and validation. Every concept has one name here, and
// that name is used by flags (kebab-case), config keys (camelCase), metrics,
// log keys and the docs.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	erspec "github.com/node-agent/node-agent/pkg/evictionrequest/spec"
	nlspec "github.com/node-agent/node-agent/pkg/nodelifecycle/spec"
	"github.com/node-agent/node-agent/pkg/notify/spec"
	"github.com/node-agent/node-agent/pkg/reboot/policy"
	vmspec "github.com/node-agent/node-agent/pkg/vmdrain/spec"
)

// LibvirtURIAuto asks discovery to find libvirt itself: qemu:///system first,
// then the embedded QEMU driver under the state directory.
const LibvirtURIAuto = "auto"

// Values of labeller.kubeVirtCR.
const (
	// KubeVirtCRAuto reads the KubeVirt CR wherever the cluster serves
	// kubevirts.kubevirt.io, and follows its settings.
	KubeVirtCRAuto = "auto"
	// KubeVirtCRIgnore never reads it: the labeller keys apply.
	KubeVirtCRIgnore = "ignore"
)

// Config is the whole configuration of `node-agent run`. The JSON tags are the
// keys of the --config file.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file; empty means kubectl's
	// order, which in the DaemonSet's pod ends at its service account.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// NodeName is the Node this agent runs on and is allowed to change.
	NodeName string `json:"nodeName,omitempty"`
	// MetricsBindAddress serves /metrics; "0" disables it.
	MetricsBindAddress string `json:"metricsBindAddress"`
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string `json:"healthProbeBindAddress"`
	// LogFormat is "text" or "json".
	LogFormat string `json:"logFormat"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"logLevel"`
	// KubeAPIQPS and KubeAPIBurst are the client-side rate limits towards
	// the apiserver. client-go's defaults (5 and 10) would make a parallel
	// drain wait on the client rather than on the cluster.
	KubeAPIQPS   float32 `json:"kubeAPIQPS"`
	KubeAPIBurst int     `json:"kubeAPIBurst"`
	// StateDir holds the embedded libvirt's cache and other local state.
	StateDir string `json:"stateDir"`

	Labeller    LabellerConfig    `json:"labeller"`
	Drain       DrainConfig       `json:"drain"`
	Maintenance MaintenanceConfig `json:"maintenance"`
	Shutdown    ShutdownConfig    `json:"shutdown"`
	Reboot      RebootConfig      `json:"reboot"`
	// Notifications are webhooks told of maintenance and reboots on this
	// node (pkg/notify).
	Notifications NotificationsConfig `json:"notifications"`
	// Silences keep an Alertmanager silence of this node's alerts while it
	// is drained or rebooting (pkg/silence).
	Silences SilencesConfig `json:"silences"`
}

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
	// body instead (a Go text/template over .Event, .Node, .Reason,
	// .Type, .Message, .Time; json quotes a value).
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
	// drain is left to the reboot coordinator either way.
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
	// MaxConcurrentNodes bounds how many nodes drain for maintenance
	// requests (annotation or NodeMaintenance object) or reboots at once,
	// cluster-wide. A shutdown drain takes no slot: the host goes down anyway.
	MaxConcurrentNodes int `json:"maxConcurrentNodes"`
	// Parallelism bounds the evictions in flight on this node.
	Parallelism int `json:"parallelism"`
	// LeaseNamespace holds the drain slot Leases and the coordinator's
	// leader election Lease; only the coordinator (node-agent-coordinator)
	// writes them.
	LeaseNamespace string `json:"leaseNamespace"`
	// Pools are groups of nodes with limits of their own, beside
	// MaxConcurrentNodes for the whole cluster: a node drains only when
	// every pool it belongs to has room. The coordinator reads them.
	Pools []PoolConfig `json:"pools,omitempty"`
	// SlotSilenceBound is how long the agent of a node holding a drain
	// slot may show no sign of life before the coordinator gives the slot
	// to the next node. The agent renews its request every third of it.
	SlotSilenceBound metav1.Duration `json:"slotSilenceBound"`
}

// PoolConfig is a group of nodes with a drain limit of its own, as the
// budgets of Karpenter and the system-upgrade-controller have.
type PoolConfig struct {
	// Name names the pool in reasons, Events and metrics.
	Name string `json:"name"`
	// Selector is a label selector over Nodes; empty selects every node.
	Selector string `json:"selector"`
	// MaxConcurrentNodes is how many of the pool's nodes may drain at
	// once; 0 sets no such limit.
	MaxConcurrentNodes int `json:"maxConcurrentNodes,omitempty"`
	// MaxUnavailable is how many of the pool's nodes may be unavailable at
	// once (draining, not Ready or cordoned), as a count or a percentage
	// ("10%", rounded down, at least 1).
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
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

// RebootConfig configures the reboot coordinator (pkg/reboot): it reboots
// this node when the host asks for it, inside a window, never past a
// blocker.
type RebootConfig struct {
	// Enabled turns the reboot coordinator on. Off by default: a node-agent
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

// Default returns the configuration used when neither a flag nor the config
// file sets a key.
func Default() Config {
	return Config{
		MetricsBindAddress:     ":9464",
		HealthProbeBindAddress: ":9465",
		LogFormat:              "text",
		LogLevel:               "info",
		KubeAPIQPS:             50,
		KubeAPIBurst:           100,
		StateDir:               "/var/lib/node-agent",
		Labeller: LabellerConfig{
			Enabled:           true,
			LibvirtURI:        LibvirtURIAuto,
			VirtType:          "auto",
			RediscoveryPeriod: metav1.Duration{Duration: 10 * time.Minute},
			DiscoveryTimeout:  metav1.Duration{Duration: 2 * time.Minute},
			KubeVirtCR:        KubeVirtCRAuto,
			MinCPUModel:       "Penryn",
		},
		Drain: DrainConfig{
			TaintKey: "kubevirt.io/drain",
			// An hour. KubeVirt live-migrates at most two VMs at a time
			// out of a node by default (parallelOutboundMigrationsPerNode)
			// and a migration of a few GiB over a 10 Gb/s link takes less
			// than a minute, so a busy node of 60 VMs drains in under half
			// an hour; an hour leaves twice that. A drain still going
			// after an hour is held by something that waiting does not
			// cure (a PodDisruptionBudget that allows nothing, a VM that
			// cannot migrate), and past it the slot goes to the next
			// node. Nodes with larger VMs or slower links raise it.
			Timeout:                 metav1.Duration{Duration: time.Hour},
			OnTimeout:               OnTimeoutKeepCordoned,
			NodeLifecycleConditions: string(nlspec.Auto),
			EvictionAPI:             string(erspec.Eviction),
			VMWithoutTarget:         string(vmspec.Wait),
			MaxConcurrentNodes:      1,
			Parallelism:             32,
			LeaseNamespace:          "node-agent",
			// Four renewals missed (the agent renews every 20s): long
			// enough for an apiserver restart or an agent's rollout,
			// short enough that a dead node's slot goes on within
			// minutes.
			SlotSilenceBound: metav1.Duration{Duration: time.Minute},
		},
		Shutdown: ShutdownConfig{
			Enabled:          true,
			SystemBusAddress: "unix:path=/run/dbus/system_bus_socket",
			DrainBudget:      metav1.Duration{Duration: 5 * time.Minute},
			SafetyMargin:     metav1.Duration{Duration: 2 * time.Second},
			LogindDropInDir:  "/etc/systemd/logind.conf.d",
		},
		Maintenance: MaintenanceConfig{
			// A maintenance is asked for by a person who waits for it; an
			// hour outlasts a wave of live migrations and a gate's flap,
			// and then they hear what holds it (the Node's status, a
			// Warning Event, NodeAgentWaitBoundExceeded). Wait, not
			// proceed: what holds is a tenant's VM that would be stopped,
			// or a health gate, which a person should overrule, not the
			// agent.
			GateBound:   metav1.Duration{Duration: time.Hour},
			OnGateBound: OnBoundWait,
		},
		Reboot: RebootConfig{
			SentinelFile: "/run/reboot-required",
			Window:       RebootWindowConfig{Start: "00:00", End: "00:00", TimeZone: "UTC"},
			// A day. A sentinel that survives a reboot was not cleared by
			// it, and another reboot rarely clears it either (kured#1269);
			// each attempt drains the node and moves its VMs. With a day,
			// such a node reboots at most once a day, once per daily
			// window, and the RebootLoop reason stays up long enough to be
			// alerted on. A shorter bound, such as kured's one-hour
			// --period, repeats the futile reboot 24 times a day.
			LoopBound: metav1.Duration{Duration: 24 * time.Hour},
			// A file check is a stat; a sentinel command is one transient
			// unit on the host. Neither makes an API request.
			CheckInterval: metav1.Duration{Duration: time.Minute},
			// A server's firmware and boot take 5 to 15 minutes; twice
			// that, so a slow node keeps its slot, yet a dead one frees
			// it within the hour.
			SlotHoldBound:     metav1.Duration{Duration: 30 * time.Minute},
			BeforeRebootBound: metav1.Duration{Duration: 15 * time.Minute},
			// A reboot carries a fix that should not wait for weeks, yet
			// a blocker is an admin's own guard (a job that must finish,
			// a storage gate): a day lets nightly jobs and a slow
			// recovery end, and after it a person hears of it (the
			// NodeAgentWaitBoundExceeded alert) and decides, rather than
			// the agent overriding the guard unseen: hence wait.
			BlockerBound:   metav1.Duration{Duration: 24 * time.Hour},
			OnBlockerBound: OnBoundWait,
		},
		Silences: SilencesConfig{
			// node_exporter's and kube-state-metrics' alerts carry it as
			// the monitoring component's rules do.
			NodeLabel: "node",
			// Extended every 5m while the node is disrupted; an agent
			// that dies leaves a silence of at most this long.
			Duration: metav1.Duration{Duration: 15 * time.Minute},
		},
		Notifications: NotificationsConfig{
			// A receiver that answers within seconds is well; one that
			// takes longer is as good as down.
			Timeout: metav1.Duration{Duration: 5 * time.Second},
			// Outlasts a receiver's restart; a notification older than
			// this is news no longer.
			GiveUpAfter: metav1.Duration{Duration: 2 * time.Minute},
		},
	}
}

// equalWindow compares two reboot.window values.
func equalWindow(a, b RebootWindowConfig) bool {
	return slices.Equal(a.Days, b.Days) && a.Start == b.Start && a.End == b.End && a.TimeZone == b.TimeZone
}

// NormalizeEmpty returns c with every empty list as nil: a file's `[]`
// decodes to an empty list where the default is nil, and both mean none.
func (c Config) NormalizeEmpty() Config {
	if len(c.Labeller.ObsoleteCPUModels) == 0 {
		c.Labeller.ObsoleteCPUModels = nil
	}
	if len(c.Notifications.Webhooks) == 0 {
		c.Notifications.Webhooks = nil
	}
	if len(c.Maintenance.Gates) == 0 {
		c.Maintenance.Gates = nil
	}
	if len(c.Silences.Matchers) == 0 {
		c.Silences.Matchers = nil
	}
	if len(c.Reboot.Windows) == 0 {
		c.Reboot.Windows = nil
	}
	if len(c.Reboot.Exceptions) == 0 {
		c.Reboot.Exceptions = nil
	}
	if len(c.Reboot.BlockingPodNamespaces) == 0 {
		c.Reboot.BlockingPodNamespaces = nil
	}
	if len(c.Reboot.Window.Days) == 0 {
		c.Reboot.Window.Days = nil
	}
	if len(c.Reboot.SentinelCommand) == 0 {
		c.Reboot.SentinelCommand = nil
	}
	if len(c.Reboot.Window.Days) == 0 {
		c.Reboot.Window.Days = nil
	}
	if len(c.Reboot.Gates) == 0 {
		c.Reboot.Gates = nil
	}
	if len(c.Drain.Pools) == 0 {
		c.Drain.Pools = nil
	}
	return c
}

// validatePools checks drain.pools.
func validatePools(pools []PoolConfig) []error {
	var errs []error
	names := map[string]bool{}
	for i, p := range pools {
		at := fmt.Sprintf("drain.pools[%d]", i)
		if msgs := validation.IsDNS1123Label(p.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", at, p.Name, strings.Join(msgs, "; ")))
		} else if p.Name == "default" || names[p.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: taken (\"default\" is drain.maxConcurrentNodes); give each pool a name of its own", at, p.Name))
		}
		names[p.Name] = true
		if _, err := labels.Parse(p.Selector); err != nil {
			errs = append(errs, fmt.Errorf("%s.selector %q: %w", at, p.Selector, err))
		}
		// The ranges of maxConcurrentNodes and maxUnavailable are
		// Bounds'.
		if p.MaxConcurrentNodes == 0 && p.MaxUnavailable == nil {
			errs = append(errs, fmt.Errorf("%s: set maxConcurrentNodes or maxUnavailable, or the pool limits nothing", at))
		}
	}
	return errs
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
	return checkGates("reboot", r.Gates, r.PrometheusURL)
}

// checkGates checks the gates of section: named, distinct, with a query,
// and a Prometheus to ask.
func checkGates(section string, gates []GateConfig, prometheusURL string) []error {
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
		errs = append(errs, fmt.Errorf("%s.gates: set %s.prometheusURL, the Prometheus the gates are asked of", section, section))
	}
	// reboot.prometheusURL is checked with the other reboot keys.
	if prometheusURL != "" && section == "maintenance" {
		if err := spec.CheckURL(prometheusURL); err != nil {
			errs = append(errs, fmt.Errorf("maintenance.prometheusURL: %w", err))
		}
	}
	return errs
}

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
	fs.StringVar(&c.Drain.OnTimeout, "drain-on-timeout", c.Drain.OnTimeout, "What a maintenance drain that passed --drain-timeout leaves on the node: keepCordoned (cordoned and tainted until the maintenance is ended) or uncordon (the agent's cordon and taint undone; the maintenance stays requested and Failed). A reboot's drain is left to the reboot coordinator.")
	fs.Var(durationValue{&c.Drain.DeleteAfter}, "drain-delete-after", "Delete pods whose eviction is still refused after this long, overriding their PodDisruptionBudget; shorter than --drain-timeout. 0 means never.")
	fs.IntVar(&c.Drain.MaxConcurrentNodes, "drain-max-concurrent-nodes", c.Drain.MaxConcurrentNodes, "Most nodes that drain at once for maintenance requests (annotation or NodeMaintenance object) or reboots, cluster-wide. A shutdown drain takes no slot.")
	fs.IntVar(&c.Drain.Parallelism, "drain-parallelism", c.Drain.Parallelism, "Most evictions in flight at once on this node.")
	fs.StringVar(&c.Drain.LeaseNamespace, "drain-lease-namespace", c.Drain.LeaseNamespace, "Namespace of the drain slot Leases and of the coordinator's leader election; only node-agent-coordinator writes them.")
	fs.Var(&jsonList[PoolConfig]{&c.Drain.Pools, `[{"name":"gpu","selector":"gpu=true","maxConcurrentNodes":1}]`}, "drain-pools", `Pools of nodes with drain limits of their own, as JSON: [{"name":"gpu","selector":"gpu=true","maxConcurrentNodes":1,"maxUnavailable":"10%"}]. A node drains only when every pool it is in has room.`)
	fs.Var(durationValue{&c.Drain.SlotSilenceBound}, "drain-slot-silence-bound", "How long the agent of a node holding a drain slot may be silent before the coordinator gives the slot to the next node.")
	fs.BoolVar(&c.Maintenance.NodeMaintenance, "maintenance-node-maintenance", c.Maintenance.NodeMaintenance, "Serve NodeMaintenance objects (nodemaintenance.medik8s.io or nodemaintenance.kubevirt.io) that name this node. Leave off where node-maintenance-operator runs.")
	fs.Var(durationValue{&c.Maintenance.GateBound}, "maintenance-gate-bound", "How long the maintenance gates and the VMs that cannot leave (--drain-vm-without-target=wait) may hold one maintenance, from its first wait; then --maintenance-on-gate-bound decides.")
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
	fs.Var(&jsonList[WebhookConfig]{&c.Notifications.Webhooks, `[{"name":"ops","url":"https://hooks.example.com/x","preset":"slack"}]`}, "notifications-webhooks", `Webhooks told of maintenance and reboots on this node, as JSON: [{"name":"ops","url":"https://hooks.example.com/x","preset":"slack","events":["maintenance-failed","reboot-failed"]}]. url, or urlFile (a mounted Secret holding it); preset json (default) or slack, or a Go template; events: maintenance-started, maintenance-drained, maintenance-failed, maintenance-ended, reboot-rebooting, reboot-back, reboot-failed (empty: all). A notification never holds up a drain or a reboot. Empty: none.`)
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

// Load reads the YAML file at path into a copy of base. An unknown key is an
// error that names the key. Flags that were set explicitly on fs are then
// applied again on top, so the command line wins over the file.
func Load(path string, base Config, fs *pflag.FlagSet) (Config, error) {
	data, err := readLimited(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config file: %w", err)
	}
	if len(data) > MaxConfigFileBytes {
		return Config{}, fmt.Errorf("config file %s: larger than %d bytes (1 MiB), the most a ConfigMap holds; this is not a node-agent configuration", path, MaxConfigFileBytes)
	}
	cfg, err := Parse(data, base)
	if err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	if fs == nil {
		return cfg, nil
	}
	// Re-apply explicit flags by binding a fresh flag set to cfg.
	again := pflag.NewFlagSet("reapply", pflag.ContinueOnError)
	cfg.AddFlags(again)
	var ferr error
	fs.Visit(func(f *pflag.Flag) {
		if ferr != nil || f.Name == "config" {
			return
		}
		target := again.Lookup(f.Name)
		if target == nil {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			if tv, ok := target.Value.(pflag.SliceValue); ok {
				ferr = tv.Replace(sv.GetSlice())
				return
			}
		}
		ferr = target.Value.Set(f.Value.String())
	})
	if ferr != nil {
		return Config{}, ferr
	}
	return cfg, nil
}

// readLimited reads at most MaxConfigFileBytes+1 bytes of the file at path:
// enough to tell that it is too large, without reading a large one whole.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxConfigFileBytes+1))
}

// Parse decodes YAML config data over base, refusing unknown keys.
func Parse(data []byte, base Config) (Config, error) {
	cfg := base
	if len(bytes.TrimSpace(data)) == 0 {
		return cfg, nil
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Config{}, fmt.Errorf("not valid YAML: %w", err)
	}
	// Who may write the file decides which keys it may hold (trust.go);
	// asked first, so that such a key is refused for what it is even when
	// its value would not decode.
	if err := daemonSetOnlyInFile(js); err != nil {
		return Config{}, err
	}
	// sigs.k8s.io/json matches keys case-sensitively (encoding/json does
	// not), so a misspelt key such as minCpuModel is refused, not accepted.
	strict, err := sigsjson.UnmarshalStrict(js, &cfg)
	if err != nil {
		if key := badDurationKey(js); key != "" {
			return Config{}, fmt.Errorf("%s: %w; use a duration such as 90s, 5m or 1h", key, err)
		}
		return Config{}, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = strings.TrimPrefix(e.Error(), "json: ")
		}
		return Config{}, errors.New(strings.Join(msgs, "; "))
	}
	return cfg, nil
}

// durationKeys are the keys whose values are Go durations.
var durationKeys = [][2]string{
	{"labeller", "rediscoveryPeriod"},
	{"labeller", "discoveryTimeout"},
	{"drain", "timeout"},
	{"maintenance", "gateBound"},
	{"drain", "deleteAfter"},
	{"shutdown", "drainBudget"},
	{"shutdown", "safetyMargin"},
	{"reboot", "loopBound"},
	{"reboot", "checkInterval"},
	{"reboot", "slotHoldBound"},
	{"reboot", "beforeRebootBound"},
	{"reboot", "blockerBound"},
	{"reboot", "minInterval"},
	{"silences", "duration"},
	{"notifications", "timeout"},
	{"notifications", "giveUpAfter"},
}

// badDurationKey finds the first duration key in js whose value does not
// parse, because metav1.Duration's own error does not name the key.
func badDurationKey(js []byte) string {
	var doc map[string]any
	if json.Unmarshal(js, &doc) != nil {
		return ""
	}
	for _, k := range durationKeys {
		section, _ := doc[k[0]].(map[string]any)
		v, ok := section[k[1]]
		if !ok {
			continue
		}
		s, isString := v.(string)
		if _, err := time.ParseDuration(s); !isString || err != nil {
			return k[0] + "." + k[1]
		}
	}
	return ""
}

// joinErrors joins errs on one line, so that a refused start prints a
// one-line message.
func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Validate checks every key and returns all problems at once.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("nodeName: empty; set --node-name or the NODE_NAME environment variable"))
	} else if msgs := validation.IsDNS1123Subdomain(c.NodeName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("nodeName %q: %s", c.NodeName, strings.Join(msgs, "; ")))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("logFormat %q: must be text or json", c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("logLevel %q: must be debug, info, warn or error", c.LogLevel))
	}
	// Every number and size is checked against its bound (bounds.go);
	// the labeller's by Labeller.Validate.
	errs = append(errs, checkBounds(c, func(key string) bool { return !labellerKey(key) })...)
	if err := c.Labeller.Validate(); err != nil {
		errs = append(errs, err)
	}
	if msgs := validation.IsQualifiedName(c.Drain.TaintKey); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("drain.taintKey %q: %s", c.Drain.TaintKey, strings.Join(msgs, "; ")))
	}
	if _, err := labels.Parse(c.Drain.PodSelector); err != nil {
		errs = append(errs, fmt.Errorf("drain.podSelector %q: %w", c.Drain.PodSelector, err))
	}
	if _, err := nlspec.ParseMode(c.Drain.NodeLifecycleConditions); err != nil {
		errs = append(errs, fmt.Errorf("drain.nodeLifecycleConditions %w", err))
	}
	if _, err := erspec.ParseMode(c.Drain.EvictionAPI); err != nil {
		errs = append(errs, fmt.Errorf("drain.evictionAPI %w", err))
	}
	if _, err := vmspec.ParseMode(c.Drain.VMWithoutTarget); err != nil {
		errs = append(errs, fmt.Errorf("drain.vmWithoutTarget %w", err))
	}
	switch c.Drain.OnTimeout {
	case OnTimeoutKeepCordoned, OnTimeoutUncordon:
	default:
		errs = append(errs, fmt.Errorf("drain.onTimeout %q: must be %s or %s", c.Drain.OnTimeout, OnTimeoutKeepCordoned, OnTimeoutUncordon))
	}
	errs = append(errs, validatePools(c.Drain.Pools)...)
	if msgs := validation.IsDNS1123Label(c.Drain.LeaseNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("drain.leaseNamespace %q: %s", c.Drain.LeaseNamespace, strings.Join(msgs, "; ")))
	}
	errs = append(errs, c.Reboot.validate()...)
	errs = append(errs, checkGates("maintenance", c.Maintenance.Gates, c.Maintenance.PrometheusURL)...)
	if o := c.Maintenance.OnGateBound; o != OnBoundWait && o != OnBoundProceed {
		errs = append(errs, fmt.Errorf("maintenance.onGateBound %q: want %q (keep waiting past maintenance.gateBound, and say so) or %q (drain past what holds)", o, OnBoundWait, OnBoundProceed))
	}
	errs = append(errs, validateNotifications(&c.Notifications)...)
	errs = append(errs, validateSilences(&c.Silences)...)
	return joinErrors(errs)
}

// validate checks the reboot keys. They are checked even when the
// coordinator is off, so that turning it on later does not reveal a
// mistake made earlier.
func (r *RebootConfig) validate() []error {
	var errs []error
	if len(r.SentinelCommand) > 0 && !filepath.IsAbs(r.SentinelCommand[0]) {
		// Over D-Bus systemd does not search PATH: a bare name fails to
		// run (status 203 on systemd 252).
		errs = append(errs, fmt.Errorf("reboot.sentinelCommand %q: the program must be an absolute path, such as /usr/bin/test", r.SentinelCommand[0]))
	}
	if r.SentinelFile != "" && !filepath.IsAbs(r.SentinelFile) {
		errs = append(errs, fmt.Errorf("reboot.sentinelFile %q: must be an absolute path, such as /run/reboot-required, or empty", r.SentinelFile))
	}
	if r.Enabled && r.SentinelFile == "" && len(r.SentinelCommand) == 0 {
		errs = append(errs, errors.New("reboot: enabled with neither sentinelFile nor sentinelCommand; set one, or turn reboot.enabled off"))
	}
	if len(r.Windows) > 0 && !equalWindow(r.Window, Default().Reboot.Window) {
		errs = append(errs, errors.New("reboot.windows is set, and so is reboot.window: windows replaces window; set one of them"))
	}
	_, serrs := r.Schedule()
	errs = append(errs, serrs...)
	if _, err := labels.Parse(r.BlockingPodSelector); err != nil {
		errs = append(errs, fmt.Errorf("reboot.blockingPodSelector %q: %w", r.BlockingPodSelector, err))
	}
	if r.OnBlockerBound != OnBoundWait && r.OnBlockerBound != OnBoundProceed {
		errs = append(errs, fmt.Errorf("reboot.onBlockerBound %q: want %q (keep waiting past reboot.blockerBound, and say so) or %q (pass the blockers over)", r.OnBlockerBound, OnBoundWait, OnBoundProceed))
	}
	for _, ns := range r.BlockingPodNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("reboot.blockingPodNamespaces: %q is not a namespace name (%s)", ns, strings.Join(msgs, "; ")))
		}
	}
	if r.PrometheusURL != "" {
		u, err := url.Parse(r.PrometheusURL)
		if err != nil {
			// url.Parse's error quotes the URL, password and all.
			errs = append(errs, errors.New("reboot.prometheusURL: not a URL; want one such as http://prometheus.monitoring.svc:9090, or empty"))
		} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("reboot.prometheusURL %q: want an http or https URL such as http://prometheus.monitoring.svc:9090, or empty", u.Redacted()))
		}
	}
	errs = append(errs, validateGates(r)...)
	if _, err := policy.CompileAlertRegexp(r.BlockingAlertRegexp); err != nil {
		errs = append(errs, fmt.Errorf("reboot.blockingAlertRegexp %q: %w", r.BlockingAlertRegexp, err))
	}
	// reboot.loopBound, checkInterval and slotHoldBound: Bounds.
	return errs
}

// unwrapAll returns the errors joined in err (errors.Join), or err alone.
func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Validate checks the labelling keys; `node-agent labels` uses it alone.
func (l *LabellerConfig) Validate() error {
	var errs []error
	if err := CheckLibvirtURI(l.LibvirtURI); err != nil {
		errs = append(errs, err)
	}
	switch l.VirtType {
	case "auto", "kvm", "qemu":
	default:
		errs = append(errs, fmt.Errorf("labeller.virtType %q: must be auto, kvm or qemu", l.VirtType))
	}
	c := Config{Labeller: *l}
	errs = append(errs, checkBounds(&c, labellerKey)...)
	switch l.KubeVirtCR {
	case KubeVirtCRAuto, KubeVirtCRIgnore:
	default:
		errs = append(errs, fmt.Errorf("labeller.kubeVirtCR %q: must be %s or %s", l.KubeVirtCR, KubeVirtCRAuto, KubeVirtCRIgnore))
	}
	if l.MinCPUModel != strings.TrimSpace(l.MinCPUModel) {
		errs = append(errs, fmt.Errorf("labeller.minCPUModel %q: has surrounding spaces; use a model name such as Penryn, or \"\" for no subtraction", l.MinCPUModel))
	}
	for _, m := range l.ObsoleteCPUModels {
		if strings.TrimSpace(m) == "" {
			errs = append(errs, errors.New("labeller.obsoleteCPUModels: contains an empty name"))
		}
	}
	return joinErrors(errs)
}
