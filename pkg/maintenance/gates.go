package maintenance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/gates"
)

// GateChecker asks the maintenance gates (maintenance.gates): the texts of
// those that hold, none when the maintenance may go on. gates.Prometheus
// is one.
type GateChecker interface {
	Blockers(ctx context.Context) []gates.Blocker
}

// Check is one kind of gate a maintenance waits for: What names it in the
// wait's reason ("maintenance gates", "VMs that cannot leave").
type Check struct {
	What    string
	Checker GateChecker
}

// Gates is the lifecycle's gate stage: the checks a maintenance drain
// waits for before it asks for its slot (the maintenance gates, the VMs
// that cannot leave the node). Wait asks them again every Interval until
// none holds, saying on the Node what holds, with the gate's query and
// answer or the VM and why it cannot leave. The checks are asked before the
// cordon, so a maintenance they hold changes nothing on the node.
//
// Bound (maintenance.gateBound) limits how long the checks may hold one
// maintenance, counted from its first wait; then Bound.Proceed decides
// (GateBoundDecision).
type Gates struct {
	Checks   []Check
	Interval time.Duration
	Clock    clock.Clock
	Bound    GateBound
	// Wake, when not nil, asks the checks again before Interval is over
	// (the pre-drain hooks: when their annotations change).
	Wake <-chan struct{}
}

// GateInterval is how often the maintenance gates are asked again while
// one holds.
const GateInterval = 30 * time.Second

// GateBound is maintenance.gateBound and maintenance.onGateBound: a VM of a
// tenant's that cannot leave, or a gate's outside Prometheus, must not hold
// a maintenance an admin asked for without anyone hearing of it.
type GateBound struct {
	// After is how long the checks may hold a maintenance from its first
	// wait; 0 holds it as long as they do.
	After time.Duration
	// Proceed passes what holds over once After ran out; otherwise the
	// maintenance keeps waiting, and its reason says so.
	Proceed bool
	// Exceeded is told once per maintenance when After runs out, with the
	// decision (GateBoundWait or GateBoundProceed) and the Node's text of
	// what held it (a Warning Event and the metric, in the wiring).
	Exceeded func(decision, message string)
	// Held is told whether the maintenance keeps waiting past After now.
	Held func(held bool)
}

// The decisions once maintenance.gateBound runs out.
const (
	GateBoundWait    = "wait"
	GateBoundProceed = "proceed"
)

// GateBoundDecision is what a maintenance held by its checks since since
// does at now: "" within the bound (or with no bound), else the decision.
// A since after now (a clock set back) counts as now, so that no clock
// stretches the bound.
func GateBoundDecision(since, now time.Time, b GateBound) string {
	if b.After <= 0 || since.After(now) || now.Before(since.Add(b.After)) {
		return ""
	}
	if b.Proceed {
		return GateBoundProceed
	}
	return GateBoundWait
}

// gateWait is the drain's reason to wait while a gate holds.
type gateWait struct{ why string }

func (g gateWait) Error() string      { return g.why }
func (g gateWait) WaitReason() string { return g.why }

// Wait returns once no check holds, or the bound lets the maintenance pass
// what holds; it fails only when ctx ends. A nil Gates holds nothing.
func (g *Gates) Wait(ctx context.Context, onWait func(error)) error {
	if g == nil {
		return nil
	}
	// since is this maintenance's first wait; it lives as long as the
	// attempt does (an agent restarted starts it afresh, which an admin
	// hears of at worst one bound late).
	var since time.Time
	decided := ""
	defer g.held(false)
	for {
		var why []string
		for _, c := range g.Checks {
			held := c.Checker.Blockers(ctx)
			if len(held) == 0 {
				continue
			}
			names := make([]string, len(held))
			for i, b := range held {
				names[i] = b.Name
			}
			why = append(why, "waiting for "+c.What+": "+strings.Join(names, "; "))
		}
		if len(why) == 0 {
			break
		}
		now := g.Clock.Now()
		if since.IsZero() {
			since = now
		}
		held := strings.Join(why, "; and ")
		decision := GateBoundDecision(since, now, g.Bound)
		if decision != "" {
			past := fmt.Sprintf("since %s, past maintenance.gateBound (%s)", since.UTC().Format(time.RFC3339), g.Bound.After)
			if decision == GateBoundProceed {
				held = "going on past " + held + " " + past + ", as maintenance.onGateBound=proceed says"
			} else {
				held += " " + past + "; the maintenance keeps waiting, as maintenance.onGateBound=wait says: remove what holds it, or set maintenance.onGateBound to proceed"
			}
			if decided != decision {
				decided = decision
				if g.Bound.Exceeded != nil {
					g.Bound.Exceeded(decision, held)
				}
			}
			if decision == GateBoundProceed {
				break
			}
			g.held(true)
		}
		onWait(gateWait{held})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.Clock.After(nextCheck(since, now, g.Interval, g.Bound)):
		case <-g.Wake:
		}
	}
	return nil
}

// nextCheck is how long Wait waits before it asks the checks again: the
// interval, or less when maintenance.gateBound runs out sooner, so that
// the decision is taken when the bound passes, not up to an interval
// later.
func nextCheck(since, now time.Time, interval time.Duration, b GateBound) time.Duration {
	if b.After <= 0 || since.After(now) {
		return interval
	}
	left := since.Add(b.After).Sub(now)
	if left <= 0 || left >= interval {
		return interval
	}
	return left
}

func (g *Gates) held(held bool) {
	if g.Bound.Held != nil {
		g.Bound.Held(held)
	}
}

// GatesFor is the gate stage of mc: the VMs that cannot leave the node
// (vms) first, then, with maintenance.gates, those gates asked of
// maintenance.prometheusURL, each query bounded by gates.Timeout;
// asked every GateInterval and bounded by bound (maintenance.gateBound).
func GatesFor(mc config.MaintenanceConfig, vms GateChecker, clk clock.Clock, bound GateBound) *Gates {
	checks := []Check{{What: VMGateWhat, Checker: vms}}
	if len(mc.Gates) > 0 {
		gs := make([]gates.Gate, len(mc.Gates))
		for i, g := range mc.Gates {
			gs[i] = gates.Gate{Name: g.Name, Query: g.Query}
		}
		checks = append(checks, Check{What: "maintenance gates",
			Checker: gates.Prometheus{URL: mc.PrometheusURL, Gates: gs, Client: &http.Client{Timeout: gates.Timeout}}})
	}
	return &Gates{Checks: checks, Interval: GateInterval, Clock: clk, Bound: bound}
}
