// Package confinement owns the agent's check, at start, that the cluster
// holds it to its own Node: that the admission policy deploy/ installs
// (node-agent-own-node) matches this agent's identity and refuses it a
// change outside what it owns. The policy matches the agent's
// ServiceAccount by name; an install under another name, a policy left out
// or a binding deleted would leave every agent token free to change any part
// of any Node that RBAC allows, and nothing would say so. The check makes
// that visible: a log line, the Warning Event AdmissionPolicyNotEnforced on
// the Node, and the metric node_agent_admission_policy_enforced.
//
// The probe is a dry run (nothing is stored): a merge patch that adds a
// label outside the agent's prefixes to its own Node. The policy must refuse
// it; the apiserver runs admission on dry runs too.
package confinement

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/node-agent/node-agent/pkg/events"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/metrics"
)

// ProbeLabel is the label the dry run tries to add: outside every prefix the
// agent owns, so the policy must refuse it.
const ProbeLabel = "node-agent.io/confinement-probe"

// FieldManager names the probe's request, so that an audit of the agent's
// requests can tell its expected refusal from a real one.
const FieldManager = "node-agent-confinement-probe"

// IsProbe says whether a request URI is the probe's.
func IsProbe(requestURI string) bool {
	return strings.Contains(requestURI, "dryRun=All") && strings.Contains(requestURI, "fieldManager="+FieldManager)
}

// Result is what the probe found.
type Result int

const (
	// Unknown: the probe could not tell (the apiserver unreachable, or an
	// answer that is neither a refusal by an admission policy nor success).
	Unknown Result = iota
	// Enforced: an admission policy refused the write.
	Enforced
	// NotEnforced: the write would have been stored.
	NotEnforced
)

func (r Result) String() string {
	switch r {
	case Enforced:
		return "enforced"
	case NotEnforced:
		return "not enforced"
	}
	return "unknown"
}

// Probe asks, with a dry run, whether the Node policy refuses the agent a
// change outside what it owns on its own Node.
func Probe(ctx context.Context, client kube.Interface, node string) (Result, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{ProbeLabel: "dry-run"}}})
	if err != nil {
		return Unknown, err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch,
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: FieldManager})
	switch {
	case err == nil:
		return NotEnforced, nil
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		return Enforced, nil
	case apierrors.IsInvalid(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		return Enforced, nil
	}
	return Unknown, err
}

// Checker runs Probe at start and reports what it found. A policy applied
// with the DaemonSet takes effect in the apiserver a few seconds after it is
// created, so a write it has not refused yet is asked again every Interval
// for Grace before it is reported; one still not refused then is reported,
// and asked again every Recheck, so that a policy applied later shows.
type Checker struct {
	Client   kube.Interface
	NodeName string
	Logger   *slog.Logger
	Recorder events.Recorder
	// Gauge is node_agent_admission_policy_enforced: 1 enforced, 0 not,
	// -1 not known.
	Gauge prometheus.Gauge
	// Grace, Interval and Recheck: zero means 2m, 2s and 10m.
	Grace, Interval, Recheck time.Duration
}

// NewGauge registers node_agent_admission_policy_enforced on reg.
func NewGauge(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "admission_policy_enforced",
		Help: "Whether the admission policy node-agent-own-node holds this agent to its own Node, by a dry-run write it must refuse (asked at start, and every 10 minutes while it is not refused): 1 yes, 0 no (the agent's token may change any part of any Node RBAC allows), -1 not known yet.",
	})
	g.Set(-1)
	reg.MustRegister(g)
	return g
}

// Name is the component's name.
func (c *Checker) Name() string { return "confinement" }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Check probes until the write is refused or Grace passes, and reports the
// last answer. It returns it.
func (c *Checker) Check(ctx context.Context) Result {
	var res Result
	var last error
	_ = wait.PollUntilContextTimeout(ctx, orDefault(c.Interval, 2*time.Second), orDefault(c.Grace, 2*time.Minute), true, func(ctx context.Context) (bool, error) {
		res, last = Probe(ctx, c.Client, c.NodeName)
		return res == Enforced, nil
	})
	switch res {
	case Enforced:
		c.Gauge.Set(1)
		// Not the apiserver's text: it says "forbidden", and a refusal here
		// is the good outcome.
		c.Logger.Info("The admission policy holds this agent to its own Node (a dry-run change outside it was refused)")
	case NotEnforced:
		c.Gauge.Set(0)
		msg := "No admission policy holds this agent to its own Node: a dry-run change of a label it does not own was allowed. " +
			"Apply deploy/admission-policy.yaml, and if the agent's ServiceAccount is not named node-agent, change the policies' match to its name"
		c.Logger.Warn(msg)
		c.Recorder.Event(kube.NodeReference(c.NodeName), corev1.EventTypeWarning, "AdmissionPolicyNotEnforced", msg)
	default:
		c.Gauge.Set(-1)
		if ctx.Err() == nil {
			c.Logger.Warn("Could not tell whether the admission policy holds this agent to its own Node", "err", last)
		}
	}
	return res
}

// Run checks until the policy holds the agent, every Recheck after the
// first check; it returns nil, so the agent goes on either way.
func (c *Checker) Run(ctx context.Context) error {
	for c.Check(ctx) != Enforced {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(orDefault(c.Recheck, 10*time.Minute)):
		}
	}
	return nil
}
