package config

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	erspec "github.com/node-agent/node-agent/pkg/evictionrequest/spec"
	nlspec "github.com/node-agent/node-agent/pkg/nodelifecycle/spec"
	notifyspec "github.com/node-agent/node-agent/pkg/notify/spec"
	"github.com/node-agent/node-agent/pkg/reboot/policy"
	vmspec "github.com/node-agent/node-agent/pkg/vmdrain/spec"
)

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
	errs = append(errs, validatePodRules(c.Drain.PodRules)...)
	switch c.Drain.OnTimeout {
	case OnTimeoutKeepCordoned, OnTimeoutUncordon:
	default:
		errs = append(errs, fmt.Errorf("drain.onTimeout %q: must be %s or %s", c.Drain.OnTimeout, OnTimeoutKeepCordoned, OnTimeoutUncordon))
	}
	errs = append(errs, validatePools(c.Slots.Pools, c.Slots.PrometheusURL)...)
	if c.Slots.PrometheusURL != "" {
		if err := notifyspec.CheckURL(c.Slots.PrometheusURL); err != nil {
			errs = append(errs, fmt.Errorf("slots.prometheusURL: %w", err))
		}
	}
	if msgs := validation.IsDNS1123Label(c.Slots.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("slots.namespace %q: %s", c.Slots.Namespace, strings.Join(msgs, "; ")))
	}
	errs = append(errs, c.Reboot.validate()...)
	errs = append(errs, checkGates("maintenance", "maintenance", c.Maintenance.Gates, c.Maintenance.PrometheusURL)...)
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
