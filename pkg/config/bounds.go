package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Bound is the range one number or size of the configuration must lie in,
// and why. Bounds lists one for every duration, count, rate and list of
// the configuration; Validate checks them, and the configuration reference
// (Reference) prints them, so what is refused and what the docs say are one
// table. A value past its bound is refused at start, or at a reload, with
// an error that names the key, the value, the bound and the reason.
type Bound struct {
	// Key is the key's path; "[]" stands for each element of a list.
	Key string
	// Min and Max are the bound's ends as the docs and the errors show
	// them.
	Min, Max string
	// Why says what each end guards against.
	Why string
	// check returns the errors of c's value of Key.
	check func(c *Config) []error
}

// The bounds Validate checks by name elsewhere too.
const (
	// MinDrainTimeout is the shortest drain.timeout: anything shorter
	// than a second is a typo.
	MinDrainTimeout = time.Second
	// MaxDrainTimeout is the longest: a drain allowed more than a day
	// holds its drain slot, and so every other node's maintenance, for
	// longer than anyone waits without looking.
	MaxDrainTimeout = 24 * time.Hour
	// MaxConfigFileBytes bounds the --config file: the most a ConfigMap
	// holds (kube-apiserver refuses one over 1 MiB), so nothing a
	// ConfigMap can carry is refused, and a file that is not one is not
	// read into memory whole.
	MaxConfigFileBytes = 1 << 20
)

// maxNodes bounds node counts in the configuration: Kubernetes supports
// 5,000 nodes a cluster; the bound leaves room and keeps arithmetic small
// (a count of 2^32 once divided by zero).
const maxNodes = 100000

// Bounds returns the bound of every number and size of the configuration,
// in the order of the configuration reference.
func Bounds() []Bound {
	bs := []Bound{
		floatBound("kubeAPIQPS", 1, 1000,
			"below one request a second, the drain slot's renewals and a drain's evictions wait on the client; above 1000, one agent (one on every node) could flood the apiserver, with only API Priority and Fairness in its way, for nothing a node's drain needs",
			func(c *Config) float64 { return float64(c.KubeAPIQPS) }),
		intBound("kubeAPIBurst", 1, 2000,
			"at least one request must pass; a burst is spent at once, and twice the highest kubeAPIQPS covers the start of any drain",
			func(c *Config) int { return c.KubeAPIBurst }),
		durationBound("labeller.rediscoveryPeriod", time.Second, 24*time.Hour,
			"a period under a second is a typo; past a day, a QEMU, libvirt or microcode update stays out of the labels for longer than a maintenance window",
			func(c *Config) time.Duration { return c.Labeller.RediscoveryPeriod.Duration }),
		durationBound("labeller.discoveryTimeout", time.Second, time.Hour,
			"a cold discovery with the embedded libvirt takes about 20 s; one still running after an hour is hung, and killing it lets the next period try again",
			func(c *Config) time.Duration { return c.Labeller.DiscoveryTimeout.Duration }),
		lenBound("labeller.obsoleteCPUModels", 256,
			"more names than libvirt has CPU models on all its architectures (a few hundred) is a mistake",
			func(c *Config) int { return len(c.Labeller.ObsoleteCPUModels) }),
	}
	bs = append(bs, drainBounds()...)
	bs = append(bs, []Bound{
		intBound("slots.limit", 1, maxNodes,
			"at least one node must be able to drain; Kubernetes supports 5,000 nodes a cluster, and the bound keeps the coordinator's arithmetic small",
			func(c *Config) int { return c.Slots.Limit }),
		intBound("drain.parallelism", 1, 1000,
			"at least one eviction must be in flight; a node runs a few hundred pods at most (the kubelet's maxPods is 110 by default), so more buys nothing and floods the apiserver at a drain's start",
			func(c *Config) int { return c.Drain.Parallelism }),
		lenBound("slots.pools", 100,
			"the coordinator checks every node against every pool at each decision; a hundred pools is more than any fleet has racks or node groups",
			func(c *Config) int { return len(c.Slots.Pools) }),
	}...)
	bs = append(bs, poolBounds()...)
	return append(bs, []Bound{
		durationBound("slots.heartbeatBound", 10*time.Second, time.Hour,
			"the agent bumps its heartbeat every third of it: under 10s, an apiserver's restart or an agent's rollout loses slots; past an hour, a dead node holds its slot for that long",
			func(c *Config) time.Duration { return c.Slots.HeartbeatBound.Duration }),
		durationBound("shutdown.drainBudget", time.Second, time.Hour,
			"logind's InhibitDelayMaxSec counts whole seconds; logind holds the host's power-off for up to this long (manageLogindConfig raises its delay to it), and a power-off, an admin's or the hardware's, held for more than an hour is no longer a shutdown",
			func(c *Config) time.Duration { return c.Shutdown.DrainBudget.Duration }),
		{
			Key: "shutdown.safetyMargin", Min: "0s", Max: "1m, and shorter than shutdown.drainBudget",
			Why:   "the margin covers what follows the release of the delay lock, seconds of work; one as long as the budget leaves no time to drain",
			check: checkSafetyMargin,
		},
		lenBound("reboot.sentinelCommand", 256,
			"a check such as needs-restarting -r takes a few arguments; a command line of hundreds is a mistake",
			func(c *Config) int { return len(c.Reboot.SentinelCommand) }),
		durationBound("maintenance.gateBound", time.Second, 7*24*time.Hour,
			"under a second is a typo; past a week, a maintenance a person asked for waits on a tenant's VM or a gate longer than anyone waits unseen",
			func(c *Config) time.Duration { return c.Maintenance.GateBound.Duration }),
		durationBound("maintenance.hookBound", time.Second, 7*24*time.Hour,
			"under a second is a typo; past a week, an outside controller's hook holds a maintenance a person asked for longer than anyone waits unseen",
			func(c *Config) time.Duration { return c.Maintenance.HookBound.Duration }),
		lenBound("maintenance.gates", 32,
			"each gate is one query to Prometheus every 30s while a maintenance waits; a few name what must be healthy",
			func(c *Config) int { return len(c.Maintenance.Gates) }),
		lenBound("reboot.gates", 32,
			"each gate is one query to Prometheus at every check; a few name what must be healthy, dozens belong in one alert rule",
			func(c *Config) int { return len(c.Reboot.Gates) }),
		lenBound("slots.pools[].gates", 32,
			"as maintenance.gates: each is a Prometheus query at every check of a recovering node, every few seconds",
			func(c *Config) int {
				n := 0
				for _, p := range c.Slots.Pools {
					n = max(n, len(p.Gates))
				}
				return n
			}),
		lenBound("reboot.windows", 32,
			"a window per day and shift is a few dozen at most; every check tests each, and the next opening is searched minute by minute",
			func(c *Config) int { return len(c.Reboot.Windows) }),
		lenBound("reboot.exceptions", 64,
			"a year's freezes and holidays; every check tests each",
			func(c *Config) int { return len(c.Reboot.Exceptions) }),
		lenBound("reboot.window.days", 7,
			"one entry for each day of the week",
			func(c *Config) int { return len(c.Reboot.Window.Days) }),
		durationBound("reboot.checkInterval", time.Second, 24*time.Hour,
			"under a second is a typo; past a day, a needed reboot goes unseen for longer than the wait after failed drains, which starts from it and stops at a day",
			func(c *Config) time.Duration { return c.Reboot.CheckInterval.Duration }),
		durationBound("reboot.slotHoldBound", time.Minute, 24*time.Hour,
			"shorter than a reboot, the slot is lost while the host boots; the slot Lease's duration is whole seconds in an int32, and a host not back within a day needs a person while its slot holds every other node's maintenance and reboot",
			func(c *Config) time.Duration { return c.Reboot.SlotHoldBound.Duration }),
		durationBound("reboot.beforeRebootBound", time.Minute, 24*time.Hour,
			"the drained node is out of service and holds a drain slot meanwhile: under a minute, one slow Prometheus answer gives the attempt up; past a day, a shut gate keeps the node and the slot for longer than anyone should wait unseen",
			func(c *Config) time.Duration { return c.Reboot.BeforeRebootBound.Duration }),
		durationBound("reboot.blockerBound", time.Second, 30*24*time.Hour,
			"under a second is a typo (a bound shorter than reboot.checkInterval runs out at the second check that finds a blocker); past a month, a security fix waits longer than a patch cycle before anyone is told",
			func(c *Config) time.Duration { return c.Reboot.BlockerBound.Duration }),
		lenBound("reboot.blockingPodNamespaces", 256,
			"a cluster's tenants' namespaces that may hold reboots; every check filters by it",
			func(c *Config) int { return len(c.Reboot.BlockingPodNamespaces) }),
		durationBound("silences.duration", time.Minute, 24*time.Hour,
			"extended every third of it: under a minute, an Alertmanager's short outage lets the silence lapse; past a day, a silence outlives a dead agent that long",
			func(c *Config) time.Duration { return c.Silences.Duration.Duration }),
		lenBound("silences.matchers", 16,
			"a silence names a few labels; Alertmanager itself takes more, but a list this long is a mistake",
			func(c *Config) int { return len(c.Silences.Matchers) }),
		lenBound("notifications.webhooks", 16,
			"each webhook has a sender and a queue of its own; a few receivers, or one relay that fans out",
			func(c *Config) int { return len(c.Notifications.Webhooks) }),
		durationBound("notifications.timeout", time.Second, time.Minute,
			"under a second fails a receiver across a slow network; a receiver that takes over a minute is down",
			func(c *Config) time.Duration { return c.Notifications.Timeout.Duration }),
		durationBound("notifications.giveUpAfter", time.Second, time.Hour,
			"at least one attempt; past an hour the notification is old news, and its queue holds newer ones back",
			func(c *Config) time.Duration { return c.Notifications.GiveUpAfter.Duration }),
		durationBound("reboot.minInterval", 0, 7*24*time.Hour,
			"0 spaces nothing; past a week, a cluster of a few dozen nodes takes a year to reboot once",
			func(c *Config) time.Duration { return c.Reboot.MinInterval.Duration }),
		durationBound("reboot.loopBound", 0, 7*24*time.Hour,
			"0 turns the loop guard off; past a week, a node that a kernel fix needs rebooted waits longer than a patch cycle",
			func(c *Config) time.Duration { return c.Reboot.LoopBound.Duration }),
	}...)
}

// drainBounds are the bounds of the drain's keys that Bounds lists before
// slots.limit: its timeout and its pod rules.
func drainBounds() []Bound {
	return []Bound{
		{
			Key: "drain.timeout", Min: fmtDuration(MinDrainTimeout), Max: fmtDuration(MaxDrainTimeout),
			Why:   "a drain that never times out holds its drain slot for as long as one pod cannot leave, and every other node's maintenance waits behind it; under a second is a typo; past a day, the slot is held for longer than anyone waits without looking",
			check: checkDrainTimeout,
		},
		{
			Key: "drain.deleteAfter", Min: "0s (never)", Max: "shorter than drain.timeout",
			Why:   "past drain.timeout the drain asks for nothing more, so it would delete no pod",
			check: checkDeleteAfter,
		},
		lenBound("drain.podRules", 64,
			"every pod on the node is matched against the rules in turn when a drain begins; a few dozen rules say more than any order a node's pods need",
			func(c *Config) int { return len(c.Drain.PodRules) }),
		{
			Key: "drain.podRules[].order", Min: strconv.Itoa(MinPodOrder), Max: strconv.Itoa(MaxPodOrder),
			Why:   "an order only ranks the groups; a few thousand ranks leave room between any groups, and the pod annotation node-agent.io/drain-order is held to the same range",
			check: checkPodRuleOrder,
		},
		lenBound("drain.podRules[].namespaces", 256,
			"as reboot.blockingPodNamespaces: a cluster's tenants' namespaces; every pod is matched against them",
			func(c *Config) int {
				return longest(c.Drain.PodRules, func(r PodRuleConfig) int { return len(r.Namespaces) })
			}),
		durationBound("drain.doNotDrainBound", 0, 24*time.Hour,
			"0 honours no opt-out; past a day, a tenant's pod holds the node's maintenance (within drain.timeout) and its reboot for longer than anyone waits without looking",
			func(c *Config) time.Duration { return c.Drain.DoNotDrainBound.Duration }),
	}
}

// poolBounds are the bounds of each slots.pools entry's numbers and of its
// daemonSetNamespaces.
func poolBounds() []Bound {
	return []Bound{
		{
			Key: "slots.pools[].limit", Min: "0 (no such limit)", Max: strconv.Itoa(maxNodes),
			Why:   "as slots.limit",
			check: checkPoolLimit,
		},
		{
			Key: "slots.pools[].maxUnavailable", Min: "1, or 1%", Max: strconv.Itoa(maxNodes) + ", or 100%",
			Why:   "a pool that allows no node unavailable never drains; as slots.limit for a count",
			check: checkPoolMaxUnavailable,
		},
		{
			Key: "slots.pools[].maxUnhealthy", Min: "0, or 0%", Max: strconv.Itoa(maxNodes) + ", or 100%",
			Why:   "0 stops new slots at the pool's first unhealthy node; as slots.limit for a count",
			check: checkPoolMaxUnhealthy,
		},
		{
			Key: "slots.pools[].maxDomains", Min: "0 (no such limit)", Max: strconv.Itoa(maxNodes),
			Why:   "a failure domain has at least one node, so more domains than slots.limit's bound on nodes is a mistake",
			check: checkPoolMaxDomains,
		},
		{
			Key: "slots.pools[].recoveryBound", Min: "0s (off), else " + fmtDuration(MinRecoveryBound), Max: fmtDuration(MaxRecoveryBound),
			Why:   "a node needs some seconds to become Ready and start its DaemonSet pods after a reboot; past a day, a node that never recovers stops its pool for longer than anyone waits without looking (the alert NodeAgentDrainSlotRecoveryStop fires at the bound)",
			check: checkPoolRecoveryBound,
		},
		lenBound("slots.pools[].daemonSetNamespaces", 64,
			"the namespaces of a node's own services (kube-system, the CNI's, the storage driver's, KubeVirt's) are a few; each recovering node's pods are matched against them every few seconds",
			func(c *Config) int {
				return longest(c.Slots.Pools, func(p PoolConfig) int { return len(p.DaemonSetNamespaces) })
			}),
	}
}

// rangeError is the error of a value past its bound.
func rangeError(b Bound, value string) error {
	return fmt.Errorf("%s %s: must be between %s and %s (%s)", b.Key, value, b.Min, b.Max, b.Why)
}

func durationBound(key string, lo, hi time.Duration, why string, get func(*Config) time.Duration) Bound {
	b := Bound{Key: key, Min: fmtDuration(lo), Max: fmtDuration(hi), Why: why}
	b.check = func(c *Config) []error {
		if d := get(c); d < lo || d > hi {
			return []error{rangeError(b, d.String())}
		}
		return nil
	}
	return b
}

func intBound(key string, lo, hi int, why string, get func(*Config) int) Bound {
	b := Bound{Key: key, Min: strconv.Itoa(lo), Max: strconv.Itoa(hi), Why: why}
	b.check = func(c *Config) []error {
		if n := get(c); n < lo || n > hi {
			return []error{rangeError(b, strconv.Itoa(n))}
		}
		return nil
	}
	return b
}

func floatBound(key string, lo, hi float64, why string, get func(*Config) float64) Bound {
	b := Bound{Key: key, Min: strconv.FormatFloat(lo, 'g', -1, 64), Max: strconv.FormatFloat(hi, 'g', -1, 64), Why: why}
	b.check = func(c *Config) []error {
		// NaN compares false both ways: !(v >= lo) refuses it.
		if v := get(c); !(v >= lo && v <= hi) {
			return []error{rangeError(b, strconv.FormatFloat(v, 'g', -1, 32))}
		}
		return nil
	}
	return b
}

// longest is the longest of the lists each item holds (length), for a
// lenBound on a list inside a list.
func longest[T any](items []T, length func(T) int) int {
	n := 0
	for _, it := range items {
		n = max(n, length(it))
	}
	return n
}

// lenBound bounds the entries of a list.
func lenBound(key string, hi int, why string, get func(*Config) int) Bound {
	b := Bound{Key: key, Min: "0 entries", Max: strconv.Itoa(hi) + " entries", Why: why}
	b.check = func(c *Config) []error {
		if n := get(c); n > hi {
			return []error{fmt.Errorf("%s: %d entries, at most %d (%s)", key, n, hi, why)}
		}
		return nil
	}
	return b
}

func checkDrainTimeout(c *Config) []error {
	switch t := c.Drain.Timeout.Duration; {
	case t == 0:
		return []error{fmt.Errorf("drain.timeout 0s: a drain that never times out holds its drain slot for as long as one pod cannot leave, and every other node's maintenance waits behind it; set a timeout between %s and %s (default %s)",
			fmtDuration(MinDrainTimeout), fmtDuration(MaxDrainTimeout), fmtDuration(Default().Drain.Timeout.Duration))}
	case t < MinDrainTimeout || t > MaxDrainTimeout:
		return []error{fmt.Errorf("drain.timeout %s: must be between %s and %s", t, fmtDuration(MinDrainTimeout), fmtDuration(MaxDrainTimeout))}
	}
	return nil
}

func checkDeleteAfter(c *Config) []error {
	d := &c.Drain
	switch a := d.DeleteAfter.Duration; {
	case a < 0:
		return []error{fmt.Errorf("drain.deleteAfter %s: must not be negative (0s: never)", a)}
	case a > 0 && d.Timeout.Duration > 0 && a >= d.Timeout.Duration:
		return []error{fmt.Errorf("drain.deleteAfter %s: must be shorter than drain.timeout %s, or the drain stops before it deletes any pod", a, d.Timeout.Duration)}
	}
	return nil
}

func checkPodRuleOrder(c *Config) []error {
	var errs []error
	for i, r := range c.Drain.PodRules {
		if r.Order < MinPodOrder || r.Order > MaxPodOrder {
			errs = append(errs, fmt.Errorf("drain.podRules[%d].order %d: must be between %d and %d", i, r.Order, MinPodOrder, MaxPodOrder))
		}
	}
	return errs
}

func checkPoolLimit(c *Config) []error {
	var errs []error
	for i, p := range c.Slots.Pools {
		if p.Limit < 0 || p.Limit > maxNodes {
			errs = append(errs, fmt.Errorf("slots.pools[%d].limit %d: must be between 0 and %d", i, p.Limit, maxNodes))
		}
	}
	return errs
}

func checkPoolMaxUnavailable(c *Config) []error {
	var errs []error
	for i, p := range c.Slots.Pools {
		if err := checkCountOrPercent(fmt.Sprintf("slots.pools[%d].maxUnavailable", i), p.MaxUnavailable, 1); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func checkPoolMaxUnhealthy(c *Config) []error {
	var errs []error
	for i, p := range c.Slots.Pools {
		if err := checkCountOrPercent(fmt.Sprintf("slots.pools[%d].maxUnhealthy", i), p.MaxUnhealthy, 0); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checkCountOrPercent checks u, at key at: nil, a count from least to
// maxNodes, or a percentage from least% to 100%.
func checkCountOrPercent(at string, u *intstr.IntOrString, least int) error {
	if u == nil {
		return nil
	}
	if u.Type == intstr.Int {
		if int(u.IntVal) < least || u.IntVal > maxNodes {
			return fmt.Errorf("%s %d: must be between %d and %d", at, u.IntVal, least, maxNodes)
		}
		return nil
	}
	v, ok := strings.CutSuffix(u.StrVal, "%")
	n, err := strconv.Atoi(v)
	if !ok || err != nil || n < least || n > 100 {
		return fmt.Errorf("%s %q: want a count, or a percentage from %d%% to 100%%", at, u.StrVal, least)
	}
	return nil
}

func checkPoolMaxDomains(c *Config) []error {
	var errs []error
	for i, p := range c.Slots.Pools {
		if p.MaxDomains < 0 || p.MaxDomains > maxNodes {
			errs = append(errs, fmt.Errorf("slots.pools[%d].maxDomains %d: must be between 0 (no such limit) and %d", i, p.MaxDomains, maxNodes))
		}
	}
	return errs
}

// The bounds of slots.pools[].recoveryBound.
const (
	MinRecoveryBound = 30 * time.Second
	MaxRecoveryBound = 24 * time.Hour
)

func checkPoolRecoveryBound(c *Config) []error {
	var errs []error
	for i, p := range c.Slots.Pools {
		if d := p.RecoveryBound.Duration; d != 0 && (d < MinRecoveryBound || d > MaxRecoveryBound) {
			errs = append(errs, fmt.Errorf("slots.pools[%d].recoveryBound %s: must be 0s (off) or between %s and %s", i, d, fmtDuration(MinRecoveryBound), fmtDuration(MaxRecoveryBound)))
		}
	}
	return errs
}

// maxSafetyMargin is shutdown.safetyMargin's own upper end.
const maxSafetyMargin = time.Minute

func checkSafetyMargin(c *Config) []error {
	m, budget := c.Shutdown.SafetyMargin.Duration, c.Shutdown.DrainBudget.Duration
	switch {
	case m < 0 || m > maxSafetyMargin:
		return []error{fmt.Errorf("shutdown.safetyMargin %s: must be between 0s and %s: the margin covers what follows the release of the delay lock, seconds of work", m, fmtDuration(maxSafetyMargin))}
	case budget > 0 && m >= budget:
		return []error{fmt.Errorf("shutdown.safetyMargin %s: must be shorter than shutdown.drainBudget %s, or no time is left to drain", m, budget)}
	}
	return nil
}

// checkBounds returns the errors of every bound whose key which selects.
func checkBounds(c *Config, which func(key string) bool) []error {
	var errs []error
	for _, b := range Bounds() {
		if which(b.Key) {
			errs = append(errs, b.check(c)...)
		}
	}
	return errs
}

// labellerKey selects the labeller's keys, which LabellerConfig.Validate
// checks: `node-agent labels` validates them alone.
func labellerKey(key string) bool { return strings.HasPrefix(key, "labeller.") }

// fmtDuration prints d without the zero units time.Duration adds: "24h",
// "1m" and "1h30m" rather than "24h0m0s", "1m0s" and "1h30m0s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
