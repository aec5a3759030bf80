package config

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Every key that holds a number, a duration or a list has a bound, and
// every bound names a key.
func TestEveryNumberAndListHasABound(t *testing.T) {
	bounded := map[string]bool{}
	for _, b := range Bounds() {
		bounded[b.Key] = true
		if b.Min == "" || b.Max == "" || b.Why == "" || b.check == nil {
			t.Errorf("bound %+v: want both ends, a reason and a check", b)
		}
	}
	keys := map[string]bool{}
	for _, k := range Keys() {
		keys[k.Path] = true
		switch k.Type {
		case "int", "float32", "duration", "stringSlice", "stringArray", "json":
			if !bounded[k.Path] {
				t.Errorf("key %s (%s) has no bound in Bounds", k.Path, k.Type)
			}
		}
	}
	for key := range bounded {
		base, _, _ := strings.Cut(key, "[]")
		if !keys[base] {
			t.Errorf("bound %s names no key", key)
		}
	}
}

// Each bound: its ends are valid, and a value past either is refused with
// an error that names the key, the value and the bound.
func TestBounds(t *testing.T) {
	valid := Default()
	valid.NodeName = "node-1"
	long := func(n int) []string { return strings.Split(strings.Repeat("x,", n-1)+"x", ",") }
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	count := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		{"qps at its ends", func(c *Config) { c.KubeAPIQPS = 1; c.KubeAPIBurst = 1 }, ""},
		{"qps at its top", func(c *Config) { c.KubeAPIQPS = 1000; c.KubeAPIBurst = 2000 }, ""},
		{"qps zero", func(c *Config) { c.KubeAPIQPS = 0 }, "kubeAPIQPS 0: must be between 1 and 1000 (below one request a second"},
		{"qps below one", func(c *Config) { c.KubeAPIQPS = 0.5 }, "kubeAPIQPS 0.5: must be between 1 and 1000"},
		{"qps past the top", func(c *Config) { c.KubeAPIQPS = 1e6 }, "kubeAPIQPS 1e+06: must be between 1 and 1000"},
		{"qps not a number", func(c *Config) { c.KubeAPIQPS = float32(math.NaN()) }, "kubeAPIQPS NaN: must be between 1 and 1000"},
		{"burst zero", func(c *Config) { c.KubeAPIBurst = 0 }, "kubeAPIBurst 0: must be between 1 and 2000"},
		{"burst past the top", func(c *Config) { c.KubeAPIBurst = 1 << 31 }, "kubeAPIBurst 2147483648: must be between 1 and 2000"},
		{"rediscovery a day", func(c *Config) { c.Labeller.RediscoveryPeriod.Duration = 24 * time.Hour }, ""},
		{"rediscovery past a day", func(c *Config) { c.Labeller.RediscoveryPeriod.Duration = 25 * time.Hour }, "labeller.rediscoveryPeriod 25h0m0s: must be between 1s and 24h"},
		{"rediscovery under a second", func(c *Config) { c.Labeller.RediscoveryPeriod.Duration = time.Millisecond }, "labeller.rediscoveryPeriod 1ms: must be between 1s and 24h"},
		{"discovery timeout past an hour", func(c *Config) { c.Labeller.DiscoveryTimeout.Duration = 61 * time.Minute }, "labeller.discoveryTimeout 1h1m0s: must be between 1s and 1h"},
		{"256 obsolete models", func(c *Config) { c.Labeller.ObsoleteCPUModels = long(256) }, ""},
		{"257 obsolete models", func(c *Config) { c.Labeller.ObsoleteCPUModels = long(257) }, "labeller.obsoleteCPUModels: 257 entries, at most 256"},
		{"parallelism 1000", func(c *Config) { c.Drain.Parallelism = 1000 }, ""},
		{"parallelism zero", func(c *Config) { c.Drain.Parallelism = 0 }, "drain.parallelism 0: must be between 1 and 1000"},
		{"parallelism past the top", func(c *Config) { c.Drain.Parallelism = 1001 }, "drain.parallelism 1001: must be between 1 and 1000"},
		{"concurrency at the top", func(c *Config) { c.Slots.Limit = maxNodes }, ""},
		{"pod rule orders at their ends", func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "a", Behavior: PodBehaviorDrain, Order: MinPodOrder}, {Name: "b", Behavior: PodBehaviorDrain, Order: MaxPodOrder}}
		}, ""},
		{"pod rule order past the top", func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "a", Behavior: PodBehaviorDrain, Order: MaxPodOrder + 1}}
		}, "drain.podRules[0].order 1001: must be between -1000 and 1000"},
		{"pod rule order below the bottom", func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "a", Behavior: PodBehaviorDrain, Order: MinPodOrder - 1}}
		}, "drain.podRules[0].order -1001: must be between -1000 and 1000"},
		{"65 pod rules", func(c *Config) {
			c.Drain.PodRules = make([]PodRuleConfig, 65)
			for i := range c.Drain.PodRules {
				c.Drain.PodRules[i] = PodRuleConfig{Name: fmt.Sprintf("r%d", i), Behavior: PodBehaviorDrain}
			}
		}, "drain.podRules: 65 entries, at most 64"},
		{"257 namespaces in a pod rule", func(c *Config) {
			c.Drain.PodRules = []PodRuleConfig{{Name: "a", Behavior: PodBehaviorDrain, Namespaces: long(257)}}
		}, "drain.podRules[].namespaces: 257 entries, at most 256"},
		{"doNotDrainBound off", func(c *Config) { c.Drain.DoNotDrainBound.Duration = 0 }, ""},
		{"doNotDrainBound a day", func(c *Config) { c.Drain.DoNotDrainBound.Duration = 24 * time.Hour }, ""},
		{"doNotDrainBound past a day", func(c *Config) { c.Drain.DoNotDrainBound.Duration = 25 * time.Hour }, "drain.doNotDrainBound 25h0m0s: must be between 0s and 24h"},
		{"doNotDrainBound negative", func(c *Config) { c.Drain.DoNotDrainBound.Duration = -time.Second }, "drain.doNotDrainBound -1s: must be between 0s and 24h"},
		{"negative deleteAfter", func(c *Config) { c.Drain.DeleteAfter.Duration = -time.Second }, "drain.deleteAfter -1s: must not be negative"},
		{"100 pools", func(c *Config) {
			for range 100 {
				c.Slots.Pools = append(c.Slots.Pools, PoolConfig{Name: "p" + string(rune('a'+len(c.Slots.Pools)%26)) + strings.Repeat("x", len(c.Slots.Pools)/26), Limit: 1})
			}
		}, ""},
		{"101 pools", func(c *Config) {
			c.Slots.Pools = make([]PoolConfig, 101)
		}, "slots.pools: 101 entries, at most 100"},
		{"pool concurrency past the top", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", Limit: maxNodes + 1}} }, "slots.pools[0].limit 100001: must be between 0 and 100000"},
		{"pool unavailable count past the top", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxUnavailable: count(maxNodes + 1)}} }, "slots.pools[0].maxUnavailable 100001: must be between 1 and 100000"},
		{"pool unavailable zero percent", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxUnavailable: pct("0%")}} }, `slots.pools[0].maxUnavailable "0%": want a count, or a percentage from 1% to 100%`},
		{"pool unhealthy zero", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxUnhealthy: count(0)}} }, ""},
		{"pool unhealthy zero percent", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxUnhealthy: pct("0%")}} }, ""},
		{"pool unhealthy negative", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxUnhealthy: count(-1)}} }, "slots.pools[0].maxUnhealthy -1: must be between 0 and 100000"},
		{"pool unhealthy past 100%", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxUnhealthy: pct("101%")}} }, `slots.pools[0].maxUnhealthy "101%": want a count, or a percentage from 0% to 100%`},
		{"pool unhealthy not a percentage", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxUnhealthy: pct("half")}} }, `slots.pools[0].maxUnhealthy "half": want a count, or a percentage from 0% to 100%`},
		{"pool domains at the top", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxDomains: maxNodes}} }, ""},
		{"pool domains negative", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", Limit: 1, MaxDomains: -1}} }, "slots.pools[0].maxDomains -1: must be between 0 (no such limit) and 100000"},
		{"pool domains past the top", func(c *Config) { c.Slots.Pools = []PoolConfig{{Name: "p", MaxDomains: maxNodes + 1}} }, "slots.pools[0].maxDomains 100001: must be between 0 (no such limit) and 100000"},
		{"silence bound past an hour", func(c *Config) { c.Slots.HeartbeatBound.Duration = 2 * time.Hour }, "slots.heartbeatBound 2h0m0s: must be between 10s and 1h"},
		{"budget an hour", func(c *Config) { c.Shutdown.DrainBudget.Duration = time.Hour }, ""},
		{"budget past an hour", func(c *Config) { c.Shutdown.DrainBudget.Duration = 2 * time.Hour }, "shutdown.drainBudget 2h0m0s: must be between 1s and 1h (logind's InhibitDelayMaxSec counts whole seconds"},
		{"budget under a second", func(c *Config) {
			c.Shutdown.DrainBudget.Duration = 500 * time.Millisecond
			c.Shutdown.SafetyMargin.Duration = 0
		}, "shutdown.drainBudget 500ms: must be between 1s and 1h"},
		{"margin a minute", func(c *Config) { c.Shutdown.SafetyMargin.Duration = time.Minute }, ""},
		{"margin past a minute", func(c *Config) { c.Shutdown.SafetyMargin.Duration = 61 * time.Second }, "shutdown.safetyMargin 1m1s: must be between 0s and 1m"},
		{"negative margin", func(c *Config) { c.Shutdown.SafetyMargin.Duration = -time.Second }, "shutdown.safetyMargin -1s: must be between 0s and 1m"},
		{"margin as long as the budget", func(c *Config) {
			c.Shutdown.DrainBudget.Duration = 30 * time.Second
			c.Shutdown.SafetyMargin.Duration = 30 * time.Second
		},
			"shutdown.safetyMargin 30s: must be shorter than shutdown.drainBudget 30s"},
		{"256 sentinel arguments", func(c *Config) { c.Reboot.SentinelCommand = append([]string{"/usr/bin/true"}, long(255)...) }, ""},
		{"257 sentinel arguments", func(c *Config) { c.Reboot.SentinelCommand = append([]string{"/usr/bin/true"}, long(256)...) }, "reboot.sentinelCommand: 257 entries, at most 256"},
		{"eight window days", func(c *Config) {
			c.Reboot.Window.Days = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun", "mon"}
		}, "reboot.window.days: 8 entries, at most 7"},
		{"check interval a day", func(c *Config) { c.Reboot.CheckInterval.Duration = 24 * time.Hour }, ""},
		{"check interval past a day", func(c *Config) { c.Reboot.CheckInterval.Duration = 25 * time.Hour }, "reboot.checkInterval 25h0m0s: must be between 1s and 24h"},
		{"check interval under a second", func(c *Config) { c.Reboot.CheckInterval.Duration = 0 }, "reboot.checkInterval 0s: must be between 1s and 24h"},
		{"slot hold a day", func(c *Config) { c.Reboot.SlotHoldBound.Duration = 24 * time.Hour }, ""},
		{"slot hold past a day", func(c *Config) { c.Reboot.SlotHoldBound.Duration = 25 * time.Hour }, "reboot.slotHoldBound 25h0m0s: must be between 1m and 24h (shorter than a reboot"},
		{"slot hold past the Lease's int32 seconds", func(c *Config) { c.Reboot.SlotHoldBound.Duration = (1 << 31) * time.Second }, "reboot.slotHoldBound 596523h14m8s: must be between 1m and 24h"},
		{"slot hold under a minute", func(c *Config) { c.Reboot.SlotHoldBound.Duration = 30 * time.Second }, "reboot.slotHoldBound 30s: must be between 1m and 24h"},
		{"loop bound off", func(c *Config) { c.Reboot.LoopBound.Duration = 0 }, ""},
		{"loop bound a week", func(c *Config) { c.Reboot.LoopBound.Duration = 7 * 24 * time.Hour }, ""},
		{"loop bound past a week", func(c *Config) { c.Reboot.LoopBound.Duration = 8 * 24 * time.Hour }, "reboot.loopBound 192h0m0s: must be between 0s and 168h"},
		{"negative loop bound", func(c *Config) { c.Reboot.LoopBound.Duration = -time.Hour }, "reboot.loopBound -1h0m0s: must be between 0s and 168h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			c.Slots.Pools = nil
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
		})
	}
}

// `node-agent labels` validates the labeller's keys alone: their bounds
// hold there too.
func TestLabellerValidateChecksItsBounds(t *testing.T) {
	l := Default().Labeller
	l.RediscoveryPeriod.Duration = 48 * time.Hour
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "labeller.rediscoveryPeriod 48h0m0s: must be between 1s and 24h") {
		t.Fatalf("error = %v", err)
	}
}

// A --config file larger than a ConfigMap can be is refused, not read
// whole.
func TestLoadRefusesAFileLargerThanAConfigMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	data := []byte("logLevel: info\n# " + strings.Repeat("x", MaxConfigFileBytes) + "\n")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := Load(path, Default(), nil)
	if err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes (1 MiB)") {
		t.Fatalf("error = %v", err)
	}
	// One just within the bound loads.
	if err := os.WriteFile(path, data[:MaxConfigFileBytes-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(path, Default(), nil); err != nil {
		t.Fatal(err)
	}
}

func TestFmtDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 10 * time.Second: "10s", time.Minute: "1m", 90 * time.Minute: "1h30m",
		24 * time.Hour: "24h", 7 * 24 * time.Hour: "168h", 0: "0s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
