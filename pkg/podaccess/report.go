package podaccess

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// Metrics is the package's one gauge family.
type Metrics struct {
	// Mode is 1 for the mode the last probe found, 0 for the others.
	Mode *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace,
		Name:      "pod_access",
		Help:      "How the agent reaches its node's pods, 1 for the mode in use: node (it impersonates its node: constrained impersonation), cluster-wide (the ServiceAccount's own grant, deploy/components/cluster-wide-eviction), none (drains are refused).",
	}, []string{"mode"})}
	if reg != nil {
		reg.MustRegister(m.Mode)
	}
	return m
}

func (m *Metrics) set(mode Mode) {
	if m == nil {
		return
	}
	metrics.SetOneOf(m.Mode, Modes, mode)
}

// Reporter probes on demand and says so when the answer changes: one log
// line (Access.Line) the first time and on every change, and the metric.
type Reporter struct {
	Prober  Prober
	Logger  *slog.Logger
	Metrics *Metrics
	// Reuse is how long an answer of ModeNode stands without a new probe
	// (zero: every Check probes). Only ModeNode is kept: it is the mode of
	// least power and the one deploy/ sets up, and it changes only with
	// the cluster's configuration (its RBAC, its authorizer). Every other
	// answer is asked again at the next Check, so the fix an admin applies
	// is used by the next drain.
	Reuse time.Duration
	// Now is the clock for Reuse (nil: time.Now).
	Now func() time.Time

	mu      sync.Mutex
	last    Mode
	kept    Access
	keptAt  time.Time
	hasKept bool
}

// Check probes (see Prober.Probe), reports a changed mode and returns the
// answer. The engine calls it before each drain begins; within Reuse of a
// probe that found ModeNode it answers ModeNode without asking again.
func (r *Reporter) Check(ctx context.Context) (Access, error) {
	now := r.now()
	r.mu.Lock()
	if r.hasKept && now.Sub(r.keptAt) < r.Reuse {
		acc := r.kept
		r.mu.Unlock()
		return acc, nil
	}
	r.mu.Unlock()
	acc, err := r.Prober.Probe(ctx)
	if err != nil {
		return acc, err
	}
	r.mu.Lock()
	changed := acc.Mode != r.last
	r.last = acc.Mode
	r.kept, r.keptAt, r.hasKept = acc, now, acc.Mode == ModeNode
	r.mu.Unlock()
	r.Metrics.set(acc.Mode)
	if changed && r.Logger != nil {
		level := slog.LevelInfo
		if acc.Mode != ModeNode {
			level = slog.LevelWarn
		}
		r.Logger.Log(ctx, level, acc.Line(), "podAccess", acc.Mode)
	}
	return acc, nil
}

// ReuseNodeMode is the agent's Reporter.Reuse: as long as the agent keeps
// what discovery told it (kube.DiscoveryTTL), for the same reason: the
// answer follows the cluster's configuration, which rarely changes. A
// drain within it skips the probe's request. Rights withdrawn meanwhile
// show in that drain's watch of the pods: the drain records the refusal on
// the Node (its lastError, the Warning Event DrainRefused) and calls
// Forget, so its next attempt probes again.
const ReuseNodeMode = 10 * time.Minute

// Forget drops a kept answer: the next Check probes. The drain calls it
// when the node's pods refuse the client a kept answer gave it.
func (r *Reporter) Forget() {
	r.mu.Lock()
	r.hasKept = false
	r.mu.Unlock()
}

func (r *Reporter) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// StartTimeout bounds Run's one check.
const StartTimeout = 10 * time.Second

// Run checks once, at the agent's start, so that the log says how the
// node's pods will be reached before a drain or the reboot's pod blockers
// need them; an apiserver that cannot be asked now is asked again before
// each of those. It returns when that check is done: Run is the agent
// component "podaccess", which ends once it has said its line.
func (r *Reporter) Run(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	if _, err := r.Check(cctx); err != nil && ctx.Err() == nil && r.Logger != nil {
		r.Logger.Warn("Could not tell yet how this node's pods are reached; asking again before a drain", "err", err)
	}
	return nil
}
