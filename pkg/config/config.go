// Package config owns node-agent's configuration: the Config struct, its
// defaults, the command-line flags that mirror its keys, the strict loading of
// the --config YAML file, and validation. Every concept has one name here, and
// that name is used by flags (kebab-case), config keys (camelCase), metrics,
// log keys and the docs.
package config

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	erspec "github.com/node-agent/node-agent/pkg/evictionrequest/spec"
	nlspec "github.com/node-agent/node-agent/pkg/nodelifecycle/spec"
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
	Slots       SlotsConfig       `json:"slots"`
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
			Parallelism:             32,
			// VMs last: see docs/drain-order.md. With KubeVirt's taint
			// the VMs begin to migrate at the cordon anyway, so the
			// other pods' evictions, seconds each, need not wait behind
			// migrations of minutes.
			PodRules: []PodRuleConfig{{Name: "virt-launchers-last", PodSelector: "kubevirt.io=virt-launcher",
				Behavior: PodBehaviorDrain, Order: DefaultVMOrder}},
			// As long as the default drain.timeout: an opt-out holds
			// the drain no longer than a PodDisruptionBudget can.
			DoNotDrainBound: metav1.Duration{Duration: time.Hour},
		},
		Slots: SlotsConfig{
			Limit:     1,
			Namespace: "node-agent",
			// Four heartbeats missed (the agent bumps it every 20s):
			// long enough for an apiserver restart or an agent's
			// rollout, short enough that a dead node's slot goes on
			// within minutes.
			HeartbeatBound: metav1.Duration{Duration: time.Minute},
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
			// An hour, as the gates: a hook whose controller is gone is heard of.
			HookBound: metav1.Duration{Duration: time.Hour},
		},
		Reboot: defaultReboot(),
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

// defaultReboot is the reboot section of Default.
func defaultReboot() RebootConfig {
	return RebootConfig{
		SentinelFile:          "/run/reboot-required",
		PreferNoScheduleTaint: true, // soft, never leaves a pod Pending: docs/reboots.md
		Window:                RebootWindowConfig{Start: "00:00", End: "00:00", TimeZone: "UTC"},
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
	if len(c.Slots.Pools) == 0 {
		c.Slots.Pools = nil
	}
	return c
}
