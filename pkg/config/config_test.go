package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/node-agent/node-agent/pkg/hostcpu"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "empty file keeps defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.Labeller.MinCPUModel != "Penryn" || c.MetricsBindAddress != ":9464" {
				t.Errorf("defaults lost: %+v", c)
			}
		}},
		{name: "nested keys", yaml: "labeller:\n  minCPUModel: Haswell\n  obsoleteCPUModels: [Nehalem]\ndrain:\n  timeout: 90s\n", check: func(t *testing.T, c Config) {
			if c.Labeller.MinCPUModel != "Haswell" || len(c.Labeller.ObsoleteCPUModels) != 1 || c.Drain.Timeout.Duration != 90*time.Second {
				t.Errorf("not applied: %+v", c)
			}
			if c.Drain.TaintKey != "kubevirt.io/drain" {
				t.Errorf("sibling default lost: %q", c.Drain.TaintKey)
			}
		}},
		{name: "unknown top-level key", yaml: "foo: 1\n", wantErr: `unknown field "foo"`},
		{name: "unknown nested key", yaml: "drain:\n  timeOut: 1s\n", wantErr: `unknown field "drain.timeOut"`},
		{name: "keys are case-sensitive", yaml: "labeller:\n  minCpuModel: x\n", wantErr: `unknown field "labeller.minCpuModel"`},
		{name: "bad duration names the key", yaml: "shutdown:\n  drainBudget: 5 minutes\n", wantErr: "shutdown.drainBudget"},
		{name: "bad duration beside top-level keys", yaml: "logFormat: text\nlogLevel: info\ndrain:\n  timeout: soon\n", wantErr: "drain.timeout"},
		{name: "reboot section", yaml: "reboot:\n  enabled: true\n  window:\n    days: [sat, sun]\n    start: \"22:00\"\n    end: \"04:00\"\n    timeZone: Europe/Berlin\n  loopBound: 12h\n", check: func(t *testing.T, c Config) {
			r := c.Reboot
			if !r.Enabled || len(r.SentinelCommand) != 0 || strings.Join(r.Window.Days, ",") != "sat,sun" || r.Window.End != "04:00" || r.LoopBound.Duration != 12*time.Hour {
				t.Errorf("not applied: %+v", r)
			}
			if r.SentinelFile != "/run/reboot-required" {
				t.Errorf("sibling default lost: %q", r.SentinelFile)
			}
		}},
		// A ConfigMap writer must not pick a program the host runs as root.
		{name: "sentinel command in a file", yaml: "reboot:\n  enabled: true\n  sentinelCommand: [/usr/bin/touch, /etc/owned]\n", wantErr: `reboot.sentinelCommand is taken only from the DaemonSet's arguments (--reboot-sentinel-command), never from the config file, because whoever may write the ConfigMap could otherwise choose a program every host runs as root`},
		{name: "sentinel command in a file, quoted", yaml: "reboot:\n  sentinelCommand: [\"/bin/sh\\u001b[2J\"]\n", wantErr: `reboot.sentinelCommand is taken only from the DaemonSet's arguments`},
		{name: "bad reboot duration names the key", yaml: "reboot:\n  loopBound: a day\n", wantErr: "reboot.loopBound"},
		{name: "unknown reboot key", yaml: "reboot:\n  window:\n    timezone: UTC\n", wantErr: `unknown field "reboot.window.timezone"`},
		{name: "wrong type", yaml: "slots:\n  limit: many\n", wantErr: "slots.limit"},
		{name: "not yaml", yaml: "a: [1\n", wantErr: "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := Parse([]byte(tt.yaml), Default())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestValidate(t *testing.T) {
	valid := Default()
	valid.NodeName = "node-1"
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		{name: "defaults with a node name are valid", mutate: func(*Config) {}},
		{name: "empty node name", mutate: func(c *Config) { c.NodeName = "" }, wantErr: "NODE_NAME"},
		{name: "node name not a DNS subdomain", mutate: func(c *Config) { c.NodeName = "Node_1" }, wantErr: "nodeName"},
		{name: "bad taint key", mutate: func(c *Config) { c.Drain.TaintKey = "a b" }, wantErr: "drain.taintKey"},
		{name: "bad selector", mutate: func(c *Config) { c.Drain.PodSelector = "a in (" }, wantErr: "drain.podSelector"},
		{name: "no drain timeout", mutate: func(c *Config) { c.Drain.Timeout.Duration = 0 }, wantErr: "drain.timeout 0s: a drain that never times out holds its drain slot"},
		{name: "negative drain timeout", mutate: func(c *Config) { c.Drain.Timeout.Duration = -time.Minute }, wantErr: "drain.timeout -1m0s: must be between 1s and 24h"},
		{name: "drain timeout past the bound", mutate: func(c *Config) { c.Drain.Timeout.Duration = 25 * time.Hour }, wantErr: "drain.timeout 25h0m0s: must be between 1s and 24h"},
		{name: "drain timeout at the bounds is valid", mutate: func(c *Config) { c.Drain.Timeout.Duration = MaxDrainTimeout }},
		{name: "drain timeout short is valid", mutate: func(c *Config) { c.Drain.Timeout.Duration = MinDrainTimeout }},
		{name: "uncordon on timeout is valid", mutate: func(c *Config) { c.Drain.OnTimeout = OnTimeoutUncordon }},
		{name: "unknown onTimeout", mutate: func(c *Config) { c.Drain.OnTimeout = "Uncordon" }, wantErr: `drain.onTimeout "Uncordon": must be keepCordoned or uncordon`},
		{name: "deleteAfter past the timeout", mutate: func(c *Config) { c.Drain.DeleteAfter.Duration = 2 * time.Hour }, wantErr: "drain.deleteAfter 2h0m0s: must be shorter than drain.timeout 1h0m0s"},
		{name: "deleteAfter within the timeout is valid", mutate: func(c *Config) { c.Drain.DeleteAfter.Duration = 30 * time.Minute }},
		{name: "pod rules of every behaviour are valid", mutate: func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{
				{Name: "db-last", Namespaces: []string{"db"}, PodSelector: "app=db", Behavior: PodBehaviorDrain, Order: 10},
				{Name: "first", Behavior: PodBehaviorDrain, Order: -5},
				{Name: "batch", PodSelector: "kind=batch", Behavior: PodBehaviorWaitCompleted},
				{Name: "agents", Namespaces: []string{"monitoring"}, Behavior: PodBehaviorSkip},
			}
		}},
		{name: "no pod rules is valid", mutate: func(c *Config) { c.Drain.PodRules = nil }},
		{name: "pod rule with an unknown behaviour", mutate: func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "r", Behavior: "skip"}}
		}, wantErr: `drain.podRules[0] (r).behavior "skip": want one of Drain, Skip, WaitCompleted`},
		{name: "pod rule without a behaviour", mutate: func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "r"}}
		}, wantErr: `drain.podRules[0] (r).behavior "": want one of`},
		{name: "pod rule with a bad selector", mutate: func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "r", PodSelector: "a in (", Behavior: PodBehaviorDrain}}
		}, wantErr: `drain.podRules[0] (r).podSelector "a in ("`},
		{name: "pod rule with a bad namespace", mutate: func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "r", Namespaces: []string{"Not_A_Namespace"}, Behavior: PodBehaviorDrain}}
		}, wantErr: `drain.podRules[0] (r).namespaces: "Not_A_Namespace" is not a namespace name`},
		{name: "pod rules named twice", mutate: func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "r", Behavior: PodBehaviorDrain}, {Name: "r", Behavior: PodBehaviorSkip}}
		}, wantErr: `drain.podRules[1].name "r": used twice`},
		{name: "pod rule without a name", mutate: func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Behavior: PodBehaviorDrain}}
		}, wantErr: `drain.podRules[0].name ""`},
		{name: "an order on a rule that evicts nothing", mutate: func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "r", Behavior: PodBehaviorWaitCompleted, Order: 3}}
		}, wantErr: "drain.podRules[0] (r).order 3: only a Drain rule has an order"},
		{name: "zero concurrency", mutate: func(c *Config) { c.Slots.Limit = 0 }, wantErr: "slots.limit"},
		{name: "concurrency past any cluster", mutate: func(c *Config) { c.Slots.Limit = 1 << 32 }, wantErr: "slots.limit 4294967296: must be between 1 and 100000"},
		{name: "silence bound too short", mutate: func(c *Config) { c.Slots.HeartbeatBound.Duration = time.Second }, wantErr: "slots.heartbeatBound 1s: must be between 10s and 1h"},
		{name: "pools are valid", mutate: func(c *Config) {
			pct := intstr.FromString("10%")
			c.Slots.Pools = []PoolConfig{{Name: "gpu", Selector: "gpu=true", Limit: 1}, {Name: "rack-a", Selector: "rack=a", MaxUnavailable: &pct}}
		}},
		{name: "pool without a limit", mutate: func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "gpu", Selector: "gpu=true"}} }, wantErr: "slots.pools[0]: set limit, maxUnavailable, maxUnhealthy, maxDomains or recoveryBound"},
		{name: "pool of zones is valid", mutate: func(c *Config) {
			one := intstr.FromInt32(1)
			c.Slots.Pools = []PoolConfig{{Name: "zones", Limit: 2, MaxDomains: 1, MaxUnhealthy: &one}, {Name: "racks", MaxDomains: 2, TopologyKey: "example.com/rack"}}
		}},
		{name: "pool with only a safety stop is valid", mutate: func(c *Config) {
			zero := intstr.FromString("0%")
			c.Slots.Pools = []PoolConfig{{Name: "all", MaxUnhealthy: &zero}}
		}},
		{name: "pool with only a recovery bound is valid", mutate: func(c *Config) {
			c.Slots.Pools = []PoolConfig{{Name: "all", RecoveryBound: metav1.Duration{Duration: 10 * time.Minute}}}
		}},
		{name: "pool with gates and a recovery bound is valid", mutate: func(c *Config) {
			c.Slots.PrometheusURL = "http://prometheus.monitoring.svc:9090"
			c.Slots.Pools = []PoolConfig{{Name: "all", RecoveryBound: metav1.Duration{Duration: 10 * time.Minute}, Gates: []GateConfig{{Name: "etcd", Query: "etcd_server_has_leader == 0"}}}}
		}},
		{name: "pool gates without a recovery bound", mutate: func(c *Config) {
			c.Slots.PrometheusURL = "http://prometheus.monitoring.svc:9090"
			c.Slots.Pools = []PoolConfig{{Name: "all", Limit: 1, Gates: []GateConfig{{Name: "etcd", Query: "up == 0"}}}}
		}, wantErr: "slots.pools[0].gates: set only with recoveryBound"},
		{name: "pool gates without a Prometheus", mutate: func(c *Config) {
			c.Slots.Pools = []PoolConfig{{Name: "all", RecoveryBound: metav1.Duration{Duration: time.Minute}, Gates: []GateConfig{{Name: "etcd", Query: "up == 0"}}}}
		}, wantErr: "slots.pools[0].gates: set slots.prometheusURL"},
		{name: "pool gate before a reboot", mutate: func(c *Config) {
			c.Slots.PrometheusURL = "http://prometheus.monitoring.svc:9090"
			c.Slots.Pools = []PoolConfig{{Name: "all", RecoveryBound: metav1.Duration{Duration: time.Minute}, Gates: []GateConfig{{Name: "etcd", Query: "up == 0", BeforeReboot: true}}}}
		}, wantErr: "slots.pools[0].gates[0] (etcd): beforeReboot is for reboot.gates only"},
		{name: "pool daemonSetNamespaces", mutate: func(c *Config) {
			c.Slots.Pools = []PoolConfig{{Name: "all", RecoveryBound: metav1.Duration{Duration: 10 * time.Minute}, DaemonSetNamespaces: []string{"kube-system", "kubevirt"}}}
		}},
		{name: "pool daemonSetNamespaces without a recovery bound", mutate: func(c *Config) {
			c.Slots.Pools = []PoolConfig{{Name: "all", Limit: 1, DaemonSetNamespaces: []string{"kube-system"}}}
		}, wantErr: "slots.pools[0].daemonSetNamespaces: set only with recoveryBound"},
		{name: "pool daemonSetNamespaces not a namespace name", mutate: func(c *Config) {
			c.Slots.Pools = []PoolConfig{{Name: "all", RecoveryBound: metav1.Duration{Duration: time.Minute}, DaemonSetNamespaces: []string{"kube-system", "Kube_System"}}}
		}, wantErr: `slots.pools[0].daemonSetNamespaces: "Kube_System" is not a namespace name`},
		{name: "pool daemonSetNamespaces too many", mutate: func(c *Config) {
			ns := make([]string, 65)
			for i := range ns {
				ns[i] = fmt.Sprintf("ns-%d", i)
			}
			c.Slots.Pools = []PoolConfig{{Name: "all", RecoveryBound: metav1.Duration{Duration: time.Minute}, DaemonSetNamespaces: ns}}
		}, wantErr: "slots.pools[].daemonSetNamespaces: 65 entries, at most 64"},
		{name: "slots.prometheusURL not a URL", mutate: func(c *Config) { c.Slots.PrometheusURL = "ftp://x" }, wantErr: "slots.prometheusURL"},
		{name: "pool with a recovery bound too short", mutate: func(c *Config) {
			c.Slots.Pools = []PoolConfig{{Name: "all", Limit: 1, RecoveryBound: metav1.Duration{Duration: time.Second}}}
		}, wantErr: "slots.pools[0].recoveryBound 1s: must be 0s (off) or between 30s and 24h"},
		{name: "pool with a bad topology key", mutate: func(c *Config) {
			c.Slots.Pools = []PoolConfig{{Name: "p", MaxDomains: 1, TopologyKey: "not a key"}}
		}, wantErr: `slots.pools[0].topologyKey "not a key": not a label key`},
		{name: "pool with a topology key and no maxDomains", mutate: func(c *Config) {
			c.Slots.Pools = []PoolConfig{{Name: "p", Limit: 1, TopologyKey: "example.com/rack"}}
		}, wantErr: `slots.pools[0].topologyKey "example.com/rack": set without maxDomains`},
		{name: "pool named default", mutate: func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "default", Limit: 1}} }, wantErr: `slots.pools[0].name "default": taken`},
		{name: "pool with a bad selector", mutate: func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", Selector: "a in (", Limit: 1}} }, wantErr: "slots.pools[0].selector"},
		{name: "pool with a bad percentage", mutate: func(c *Config) {
			pct := intstr.FromString("150%")
			c.Slots.Pools = []PoolConfig{{Name: "p", MaxUnavailable: &pct}}
		}, wantErr: `slots.pools[0].maxUnavailable "150%": want a count, or a percentage from 1% to 100%`},
		{name: "bad log format", mutate: func(c *Config) { c.LogFormat = "xml" }, wantErr: "logFormat"},
		// "" turns the subtraction off, as KubeVirt has it.
		{name: "empty min model is valid", mutate: func(c *Config) { c.Labeller.MinCPUModel = "" }},
		{name: "min model with spaces", mutate: func(c *Config) { c.Labeller.MinCPUModel = " Penryn" }, wantErr: "labeller.minCPUModel"},
		{name: "empty obsolete entry", mutate: func(c *Config) { c.Labeller.ObsoleteCPUModels = []string{""} }, wantErr: "obsoleteCPUModels"},
		{name: "no budget", mutate: func(c *Config) { c.Shutdown.DrainBudget.Duration = 0 }, wantErr: "shutdown.drainBudget"},
		{name: "reboot enabled with defaults is valid", mutate: func(c *Config) { c.Reboot.Enabled = true }},
		{name: "reboot window across midnight is valid", mutate: func(c *Config) {
			c.Reboot.Window = RebootWindowConfig{Days: []string{"sat", "Sun"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}
		}},
		{name: "reboot full setup is valid", mutate: func(c *Config) {
			c.Reboot.SentinelCommand = []string{"/usr/bin/needs-restarting", "-r"}
			c.Reboot.BlockingPodSelector = "app in (db, cache)"
			c.Reboot.PrometheusURL = "http://prometheus.monitoring.svc:9090"
			c.Reboot.BlockingAlertRegexp = "Kube.*|Etcd.*"
		}},
		{name: "reboot unknown time zone", mutate: func(c *Config) { c.Reboot.Window.TimeZone = "Europe/Atlantis" }, wantErr: `reboot.window.timeZone "Europe/Atlantis"`},
		{name: "reboot time zone names the fix", mutate: func(c *Config) { c.Reboot.Window.TimeZone = "CEST+2" }, wantErr: "use an IANA name"},
		{name: "reboot local time zone", mutate: func(c *Config) { c.Reboot.Window.TimeZone = "Local" }, wantErr: "reboot.window.timeZone"},
		{name: "reboot empty time zone", mutate: func(c *Config) { c.Reboot.Window.TimeZone = "" }, wantErr: "reboot.window.timeZone"},
		{name: "reboot bad day", mutate: func(c *Config) { c.Reboot.Window.Days = []string{"mon", "monday"} }, wantErr: `reboot.window.days "monday"`},
		{name: "reboot bad start", mutate: func(c *Config) { c.Reboot.Window.Start = "24:00" }, wantErr: `reboot.window.start "24:00"`},
		{name: "reboot end without leading zero", mutate: func(c *Config) { c.Reboot.Window.End = "4:00" }, wantErr: `reboot.window.end "4:00"`},
		{name: "reboot bad pod selector", mutate: func(c *Config) { c.Reboot.BlockingPodSelector = "a in (" }, wantErr: "reboot.blockingPodSelector"},
		{name: "reboot bad alert regexp", mutate: func(c *Config) { c.Reboot.BlockingAlertRegexp = "Kube(" }, wantErr: "reboot.blockingAlertRegexp"},
		{name: "reboot prometheus URL without scheme", mutate: func(c *Config) { c.Reboot.PrometheusURL = "prometheus:9090" }, wantErr: "reboot.prometheusURL"},
		{name: "reboot prometheus URL password not shown", mutate: func(c *Config) { c.Reboot.PrometheusURL = "ftp://u:s3cret@prometheus" }, wantErr: `reboot.prometheusURL "ftp://u:xxxxx@prometheus"`},
		{name: "reboot prometheus URL unparsable", mutate: func(c *Config) { c.Reboot.PrometheusURL = "http://u:s3cret@[::1" }, wantErr: "reboot.prometheusURL: not a URL"},
		{name: "reboot gate", mutate: func(c *Config) {
			c.Reboot.PrometheusURL = "http://prometheus:9090"
			c.Reboot.Gates = []GateConfig{{Name: "ceph-healthy", Query: "ceph_health_status > 0"}}
		}},
		{name: "reboot gate without prometheusURL", mutate: func(c *Config) { c.Reboot.Gates = []GateConfig{{Name: "a", Query: "up == 0"}} }, wantErr: "reboot.gates: set reboot.prometheusURL"},
		{name: "reboot gate badly named", mutate: func(c *Config) {
			c.Reboot.PrometheusURL = "http://p"
			c.Reboot.Gates = []GateConfig{{Name: "Ceph Healthy", Query: "up == 0"}}
		}, wantErr: `reboot.gates[0].name "Ceph Healthy"`},
		{name: "reboot gate named twice", mutate: func(c *Config) {
			c.Reboot.PrometheusURL = "http://p"
			c.Reboot.Gates = []GateConfig{{Name: "a", Query: "up == 0"}, {Name: "a", Query: "up == 1"}}
		}, wantErr: `reboot.gates[1].name "a": used twice`},
		{name: "reboot gate without a query", mutate: func(c *Config) {
			c.Reboot.PrometheusURL = "http://p"
			c.Reboot.Gates = []GateConfig{{Name: "a", Query: "  "}}
		}, wantErr: "reboot.gates[0] (a): empty query"},
		{name: "reboot gate with a long query", mutate: func(c *Config) {
			c.Reboot.PrometheusURL = "http://p"
			c.Reboot.Gates = []GateConfig{{Name: "a", Query: strings.Repeat("x", MaxGateQuery+1)}}
		}, wantErr: "reboot.gates[0] (a): query of 4097 bytes, at most 4096"},
		{name: "reboot gate asked again before the reboot", mutate: func(c *Config) {
			c.Reboot.PrometheusURL = "http://p"
			c.Reboot.Gates = []GateConfig{{Name: "etcd-quorum", Query: "up == 0", BeforeReboot: true}}
		}},
		{name: "maintenance gate with beforeReboot", mutate: func(c *Config) {
			c.Maintenance.PrometheusURL = "http://p"
			c.Maintenance.Gates = []GateConfig{{Name: "a", Query: "up == 0", BeforeReboot: true}}
		}, wantErr: "maintenance.gates[0] (a): beforeReboot is for reboot.gates only"},
		{name: "notification webhooks", mutate: func(c *Config) {
			c.Notifications.Webhooks = []WebhookConfig{
				{Name: "ops", URL: "https://hooks.example.com/x", Preset: "slack", Events: []string{"maintenance-failed", "reboot-failed"}},
				{Name: "relay", URLFile: "/etc/node-agent/webhook-url", Template: `{"text":{{json .Message}}}`},
			}
		}},
		{name: "webhook without a URL", mutate: func(c *Config) { c.Notifications.Webhooks = []WebhookConfig{{Name: "ops"}} }, wantErr: "notifications.webhooks[0] (ops): set url or urlFile, one of them"},
		{name: "webhook with a file URL", mutate: func(c *Config) { c.Notifications.Webhooks = []WebhookConfig{{Name: "ops", URL: "file:///etc/passwd"}} }, wantErr: "notifications.webhooks[0] (ops).url: want an absolute http:// or https:// URL"},
		{name: "webhook with a bad template", mutate: func(c *Config) {
			c.Notifications.Webhooks = []WebhookConfig{{Name: "ops", URL: "http://x", Template: "{{.Message"}}
		}, wantErr: "notifications.webhooks[0] (ops).template"},
		{name: "webhook with an unknown event", mutate: func(c *Config) {
			c.Notifications.Webhooks = []WebhookConfig{{Name: "ops", URL: "http://x", Events: []string{"drained"}}}
		}, wantErr: `notifications.webhooks[0] (ops).events: "drained" is not one of`},
		{name: "webhook with an unknown preset", mutate: func(c *Config) {
			c.Notifications.Webhooks = []WebhookConfig{{Name: "ops", URL: "http://x", Preset: "teams"}}
		}, wantErr: `notifications.webhooks[0] (ops).preset "teams"`},
		{name: "reboot windows and exceptions", mutate: func(c *Config) {
			c.Reboot.Windows = []RebootWindowConfig{{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}, {Start: "12:00", End: "13:00", TimeZone: "UTC"}}
			c.Reboot.Exceptions = []RebootExceptionConfig{{From: "2026-12-20", To: "2027-01-03", TimeZone: "Europe/Berlin"}, {From: "2026-05-01"}}
		}},
		{name: "reboot windows beside a window", mutate: func(c *Config) {
			c.Reboot.Window.Days = []string{"sun"}
			c.Reboot.Windows = []RebootWindowConfig{{Start: "12:00", End: "13:00", TimeZone: "UTC"}}
		}, wantErr: "reboot.windows is set, and so is reboot.window"},
		{name: "reboot windows, one bad", mutate: func(c *Config) {
			c.Reboot.Windows = []RebootWindowConfig{{Start: "12:00", End: "13:00", TimeZone: "UTC"}, {Start: "25:00", End: "13:00", TimeZone: "UTC"}}
		}, wantErr: `reboot.windows[1].start "25:00"`},
		{name: "reboot exception backwards", mutate: func(c *Config) {
			c.Reboot.Exceptions = []RebootExceptionConfig{{From: "2027-01-03", To: "2026-12-20"}}
		}, wantErr: `reboot.exceptions[0].to "2026-12-20": before from "2027-01-03"`},
		{name: "reboot relative sentinel command", mutate: func(c *Config) { c.Reboot.SentinelCommand = []string{"needs-restarting", "-r"} }, wantErr: "reboot.sentinelCommand"},
		{name: "reboot relative sentinel file", mutate: func(c *Config) { c.Reboot.SentinelFile = "reboot-required" }, wantErr: "reboot.sentinelFile"},
		{name: "reboot enabled without any sentinel", mutate: func(c *Config) { c.Reboot.Enabled = true; c.Reboot.SentinelFile = "" }, wantErr: "neither sentinelFile nor sentinelCommand"},
		{name: "reboot negative loop bound", mutate: func(c *Config) { c.Reboot.LoopBound.Duration = -time.Hour }, wantErr: "reboot.loopBound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows a password: %q", err)
			}
		})
	}
}

func TestLoadFlagsWinOverFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("logLevel: debug\nlabeller:\n  minCPUModel: Haswell\n  obsoleteCPUModels: [a]\ndrain:\n  timeout: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--min-cpu-model=Skylake-Client", "--obsolete-cpu-models=b,c", "--drain-timeout=2m"}); err != nil {
		t.Fatal(err)
	}
	got, _, err := Load(path, Default(), fs)
	if err != nil {
		t.Fatal(err)
	}
	if got.LogLevel != "debug" {
		t.Errorf("logLevel = %q, want the file's", got.LogLevel)
	}
	if got.Labeller.MinCPUModel != "Skylake-Client" || got.Drain.Timeout.Duration != 2*time.Minute {
		t.Errorf("flags did not win: %+v", got)
	}
	if strings.Join(got.Labeller.ObsoleteCPUModels, ",") != "b,c" {
		t.Errorf("obsoleteCPUModels = %v, want [b c]", got.Labeller.ObsoleteCPUModels)
	}
}

// reboot.rebootWithoutDrain's flag is --reboot-without-drain; its first
// name, --reboot-reboot-without-drain, still sets the key, also over the
// file, but is deprecated, hidden and left out of the reference.
func TestRebootWithoutDrainFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("reboot:\n  rebootWithoutDrain: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"reboot-without-drain", oldRebootWithoutDrainFlag} {
		c := Default()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.SetOutput(io.Discard) // the deprecation notice
		c.AddFlags(fs)
		if err := fs.Parse([]string{"--" + name}); err != nil {
			t.Fatalf("--%s: %v", name, err)
		}
		if !c.Reboot.RebootWithoutDrain {
			t.Errorf("--%s did not set reboot.rebootWithoutDrain", name)
		}
		got, _, err := Load(path, Default(), fs)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Reboot.RebootWithoutDrain {
			t.Errorf("--%s did not win over the file", name)
		}
		if f := fs.Lookup(name); (name == oldRebootWithoutDrainFlag) != (f.Hidden && f.Deprecated != "") {
			t.Errorf("--%s: hidden %v, deprecated %q", name, f.Hidden, f.Deprecated)
		}
	}
	var flags []string
	for _, k := range Keys() {
		if k.Path == "reboot.rebootWithoutDrain" {
			flags = append(flags, k.Flag)
		}
	}
	if len(flags) != 1 || flags[0] != "reboot-without-drain" {
		t.Errorf("Keys() lists reboot.rebootWithoutDrain as %q, want only reboot-without-drain", flags)
	}
}

// The sentinel command is a list of arguments, one flag each: an argument
// with a comma must reach the command whole, and flags must win over the file.
func TestLoadRebootFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("reboot:\n  window:\n    days: [mon]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--reboot-sentinel-command=/usr/bin/grep", "--reboot-sentinel-command=a,b", "--reboot-window-days=sat,sun", "--reboot-loop-bound=2h"}); err != nil {
		t.Fatal(err)
	}
	got, _, err := Load(path, Default(), fs)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/bin/grep", "a,b"}; !reflect.DeepEqual(got.Reboot.SentinelCommand, want) {
		t.Errorf("sentinelCommand = %q, want %q", got.Reboot.SentinelCommand, want)
	}
	if want := []string{"sat", "sun"}; !reflect.DeepEqual(got.Reboot.Window.Days, want) {
		t.Errorf("window.days = %q, want %q", got.Reboot.Window.Days, want)
	}
	if got.Reboot.LoopBound.Duration != 2*time.Hour {
		t.Errorf("loopBound = %s, want 2h", got.Reboot.LoopBound.Duration)
	}
}

// Every key must have a flag: the reference docs and the "keys mirror the
// flags" promise are built on that.
func TestEveryKeyHasAFlag(t *testing.T) {
	c := Default()
	paths := map[uintptr]string{}
	collectPaths(reflect.ValueOf(&c).Elem(), "", paths)
	documented := map[string]bool{}
	for _, k := range Keys() {
		documented[k.Path] = true
	}
	for _, p := range paths {
		if !documented[p] {
			t.Errorf("config key %s has no flag", p)
		}
	}
}

// An explicit empty minCPUModel, in the file or on the command line, must
// reach the policy as empty and not fall back to the default Penryn.
func TestLoadEmptyMinCPUModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("labeller:\n  minCPUModel: \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	base := Default()
	base.AddFlags(fs)
	c, _, err := Load(path, base, fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Labeller.MinCPUModel != "" {
		t.Errorf("minCPUModel from the file = %q; want empty", c.Labeller.MinCPUModel)
	}

	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	c = Default()
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--min-cpu-model="}); err != nil {
		t.Fatal(err)
	}
	if c.Labeller.MinCPUModel != "" {
		t.Errorf("--min-cpu-model= gave %q; want empty", c.Labeller.MinCPUModel)
	}
}

// The config key's "auto" and discovery's are one name: the wiring passes
// labeller.libvirtURI through unchanged.
func TestLibvirtURIAutoIsDiscoverys(t *testing.T) {
	if hostcpu.AutoURI != LibvirtURIAuto {
		t.Errorf("hostcpu.AutoURI %q and config.LibvirtURIAuto %q must be one name", hostcpu.AutoURI, LibvirtURIAuto)
	}
}

func TestSlotsPoolsFlag(t *testing.T) {
	c := Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse([]string{`--slots-pools=[{"name":"gpu","selector":"gpu=true","limit":1,"maxUnavailable":"10%"}]`}); err != nil {
		t.Fatal(err)
	}
	if len(c.Slots.Pools) != 1 || c.Slots.Pools[0].Name != "gpu" || c.Slots.Pools[0].Limit != 1 || c.Slots.Pools[0].MaxUnavailable.String() != "10%" {
		t.Errorf("pools %+v", c.Slots.Pools)
	}
	if err := fs.Parse([]string{`--slots-pools=[{"name":"gpu","maxConcurrentNodes":1}]`}); err == nil || !strings.Contains(err.Error(), `unknown field "maxConcurrentNodes"`) {
		t.Errorf("unknown field: %v", err)
	}
}

func TestDrainPodRulesFlag(t *testing.T) {
	c := Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse([]string{`--drain-pod-rules=[{"name":"db","namespaces":["db"],"podSelector":"app=db","behavior":"Drain","order":10}]`, "--drain-do-not-drain-bound=4h"}); err != nil {
		t.Fatal(err)
	}
	want := []PodRuleConfig{{Name: "db", Namespaces: []string{"db"}, PodSelector: "app=db", Behavior: PodBehaviorDrain, Order: 10}}
	if !reflect.DeepEqual(c.Drain.PodRules, want) || c.Drain.DoNotDrainBound.Duration != 4*time.Hour {
		t.Errorf("podRules %+v, doNotDrainBound %s; want %+v (the default replaced), 4h", c.Drain.PodRules, c.Drain.DoNotDrainBound.Duration, want)
	}
	// Cluster API's field names are not this list's.
	if err := fs.Parse([]string{`--drain-pod-rules=[{"name":"db","namespaceSelector":{}}]`}); err == nil || !strings.Contains(err.Error(), `unknown field "namespaceSelector"`) {
		t.Errorf("unknown field: %v", err)
	}
}

// The failure domain and safety stop keys of a pool, as an admin writes
// them in the ConfigMap.
func TestParsePoolDomainsAndSafetyStop(t *testing.T) {
	c, _, err := Parse([]byte(`
slots:
  pools:
    - name: zones
      limit: 2
      maxDomains: 1
      maxUnhealthy: "10%"
    - name: racks
      selector: rack
      maxDomains: 2
      topologyKey: example.com/rack
      maxUnhealthy: 0
`), Default())
	if err != nil {
		t.Fatal(err)
	}
	z, r := c.Slots.Pools[0], c.Slots.Pools[1]
	if z.MaxDomains != 1 || z.TopologyKey != "" || z.MaxUnhealthy.String() != "10%" {
		t.Errorf("pool zones %+v", z)
	}
	if r.MaxDomains != 2 || r.TopologyKey != "example.com/rack" || r.MaxUnhealthy == nil || r.MaxUnhealthy.IntValue() != 0 {
		t.Errorf("pool racks %+v", r)
	}
	if _, _, err := Parse([]byte("slots:\n  pools: [{name: p, limit: 1, maxDomain: 1}]\n"), Default()); err == nil || !strings.Contains(err.Error(), "maxDomain") {
		t.Errorf("a misspelt maxDomains: %v, want an error naming it", err)
	}
}
