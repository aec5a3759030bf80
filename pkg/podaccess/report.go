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

	mu   sync.Mutex
	last Mode
}

// Check probes (see Prober.Probe), reports a changed mode and returns the
// answer. The engine calls it before each drain begins.
func (r *Reporter) Check(ctx context.Context) (Access, error) {
	acc, err := r.Prober.Probe(ctx)
	if err != nil {
		return acc, err
	}
	r.mu.Lock()
	changed := acc.Mode != r.last
	r.last = acc.Mode
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
