package hooks

import (
	"context"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/gates"
)

// BlockerHook is the kind of a hook that holds (gates.Blocker).
const BlockerHook gates.BlockerKind = "hook"

// PreDrainCheck asks the pre-drain hooks on the agent's Node: it is a check of
// the lifecycle's gate stage (pkg/maintenance's GateChecker). Its wait's
// start lives as long as the agent does, as the gates' does: a restarted
// agent starts it afresh, which lets a hook hold at most one bound longer.
type PreDrainCheck struct {
	// Node reads the agent's Node (from the informer's cache).
	Node  func() (*corev1.Node, error)
	Clock clock.Clock
	// Bound is maintenance.hookBound.
	Bound time.Duration
	// Begun, when set, reports whether the Node's drain has begun (an
	// agent restarted mid-drain resumes it): no pre-drain hook holds
	// that. The node is cordoned and pods are leaving already; held
	// there, it would stay half-drained for the hook's sake.
	Begun func(*corev1.Node) bool
	// Warn is told of a malformed hook and of hooks passed over at the
	// bound, each once per wait (a Warning Event, in the wiring).
	Warn func(reason, message string)

	mu     sync.Mutex
	since  time.Time
	warned map[string]bool
}

// Event reasons of PreDrain and of the post-drain wait.
const (
	ReasonMalformed = "MalformedMaintenanceHook"
	ReasonPassed    = "MaintenanceHookBoundExceeded"
)

// Blockers returns the pre-drain hooks that hold, none when the drain may
// go on. A Node that cannot be read holds (fail closed) and says so.
func (p *PreDrainCheck) Blockers(context.Context) []gates.Blocker {
	node, err := p.Node()
	if err != nil || node == nil {
		why := "the Node is not read yet"
		if err != nil {
			why = "cannot read the Node: " + err.Error()
		}
		return []gates.Blocker{{Kind: BlockerHook, Name: why}}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.Clock.Now()
	s := Parse(node.Annotations, PreDrain)
	if s.Empty() || (p.Begun != nil && p.Begun(node)) {
		// The wait is over: the next one counts its bound afresh.
		p.since, p.warned = time.Time{}, nil
		return nil
	}
	if p.since.IsZero() {
		p.since = now
	}
	h := holdOfSet(s, p.since, now, p.Bound)
	for _, problem := range h.Problems() {
		p.warn(ReasonMalformed, problem+"; the hook holds all the same, at most maintenance.hookBound")
	}
	if h.Passed {
		p.warn(ReasonPassed, h.Message())
		return nil
	}
	return []gates.Blocker{{Kind: BlockerHook, Name: strings.TrimPrefix(h.Message(), "waiting for pre-drain hooks: ")}}
}

// warn tells Warn of message once per wait.
func (p *PreDrainCheck) warn(reason, message string) {
	if p.warned[message] || p.Warn == nil {
		return
	}
	if p.warned == nil {
		p.warned = map[string]bool{}
	}
	p.warned[message] = true
	p.Warn(reason, message)
}
