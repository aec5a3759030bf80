package hooks

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/node-agent/node-agent/pkg/reasontext"
)

// Phase is where in the lifecycle a hook holds.
type Phase string

const (
	// PreDrain hooks hold a maintenance before its drain cordons the node.
	PreDrain Phase = "pre-drain"
	// PostDrain hooks hold a maintenance whose pods are gone before it is
	// reported done (the reboot waits, NodeMaintenance stays Running).
	PostDrain Phase = "post-drain"
)

// Phases are the phases a hook can hold in.
var Phases = []Phase{PreDrain, PostDrain}

// Prefix is the annotation key prefix of the phase's hooks; the name
// follows it.
func (p Phase) Prefix() string { return string(p) + ".hook.node-agent.io/" }

const (
	// MaxPerPhase is the most hooks of one phase that are named: more
	// still hold (the annotations are there, and someone meant them to),
	// but only a count of them is shown, so that the record and the Events
	// stay bounded.
	MaxPerPhase = 16
	// MaxOwner is the most bytes of a hook's value kept.
	MaxOwner = 128
	// maxName is the most bytes of a key's name part (the apiserver's
	// limit for a qualified name).
	maxName = 63
)

// Hook is one hook annotation.
type Hook struct {
	// Name is the key's part after the prefix.
	Name string
	// Owner is the annotation's value, printable and cut to MaxOwner.
	Owner string
	// Problem says why the annotation is malformed ("" when it is not).
	// A malformed hook holds all the same: whoever added it meant to hold
	// the node, and letting the drain go on a typo could cordon a node
	// that a controller still works on; maintenance.hookBound still ends
	// the wait.
	Problem string
}

func (h Hook) String() string {
	if h.Owner == "" {
		return h.Name
	}
	return h.Name + " (" + h.Owner + ")"
}

// Set is the hooks of one phase on a Node, sorted by name.
type Set struct {
	Phase Phase
	// Hooks are the first MaxPerPhase hooks.
	Hooks []Hook
	// More counts the hooks past MaxPerPhase; they hold too.
	More int
}

// Parse reads the hooks of phase p from a Node's annotations.
func Parse(annotations map[string]string, p Phase) Set {
	prefix := p.Prefix()
	var names []string
	for k := range annotations {
		if strings.HasPrefix(k, prefix) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	s := Set{Phase: p}
	for _, k := range names {
		if len(s.Hooks) == MaxPerPhase {
			s.More++
			continue
		}
		s.Hooks = append(s.Hooks, parseOne(k, prefix, annotations[k]))
	}
	return s
}

func parseOne(key, prefix, value string) Hook {
	h := Hook{Name: reasontext.ForNode(strings.TrimPrefix(key, prefix), maxName),
		Owner: reasontext.ForNode(strings.TrimSpace(value), MaxOwner)}
	switch {
	case h.Name == "":
		h.Problem = fmt.Sprintf("annotation %s names no hook: add a name after the %s prefix", key, prefix)
	case len(validation.IsQualifiedName(key)) > 0:
		h.Problem = fmt.Sprintf("annotation key %q is not a qualified name: %s", key, strings.Join(validation.IsQualifiedName(key), "; "))
	case h.Owner == "":
		h.Problem = fmt.Sprintf("annotation %s has no value: its value says who owns the hook and removes it", key)
	}
	return h
}

// Empty reports whether no hook of the phase is on the Node.
func (s Set) Empty() bool { return len(s.Hooks) == 0 && s.More == 0 }

// Names lists the hooks for people: "a (owner); b (owner) and 3 more".
func (s Set) Names() string {
	parts := make([]string, len(s.Hooks))
	for i, h := range s.Hooks {
		parts[i] = h.String()
	}
	out := strings.Join(parts, "; ")
	if s.More > 0 {
		out += fmt.Sprintf(" and %d more (at most %d are named)", s.More, MaxPerPhase)
	}
	return out
}

// Problems are the malformed hooks' problems, one each.
func (s Set) Problems() []string {
	var out []string
	for _, h := range s.Hooks {
		if h.Problem != "" {
			out = append(out, h.Problem)
		}
	}
	return out
}

// Hold is what the hooks of one phase do to a wait that began at Since.
type Hold struct {
	Set
	Since time.Time
	// Bound is maintenance.hookBound.
	Bound time.Duration
	// Passed says the bound ran out: the hooks no longer hold.
	Passed bool
}

// HoldOf is the hold of the hooks of phase p in annotations, for a wait
// that began at since, at now. A since after now (a clock set back) counts
// as now, so that no clock stretches the bound. A bound of 0 or less is
// no bound (config refuses it; pkg/config/bounds.go).
func HoldOf(annotations map[string]string, p Phase, since, now time.Time, bound time.Duration) Hold {
	return holdOfSet(Parse(annotations, p), since, now, bound)
}

// holdOfSet is HoldOf for hooks already parsed.
func holdOfSet(s Set, since, now time.Time, bound time.Duration) Hold {
	h := Hold{Set: s, Since: since, Bound: bound}
	if since.After(now) {
		h.Since = now
	}
	h.Passed = !h.Empty() && bound > 0 && !now.Before(h.Since.Add(bound))
	return h
}

// Holds reports whether the hooks hold the lifecycle now.
func (h Hold) Holds() bool { return !h.Empty() && !h.Passed }

// Until is when the bound ends the wait (zero without a bound).
func (h Hold) Until() time.Time {
	if h.Bound <= 0 {
		return time.Time{}
	}
	return h.Since.Add(h.Bound)
}

// Message says, for the Node and the Events, what the hooks do: "" when
// none is there.
func (h Hold) Message() string {
	switch {
	case h.Empty():
		return ""
	case h.Passed:
		return fmt.Sprintf("%s hooks %s passed over: they held since %s, past maintenance.hookBound (%s); the maintenance goes on, the annotations stay until their owners remove them",
			h.Phase, h.Names(), h.Since.UTC().Format(time.RFC3339), h.Bound)
	}
	until := ""
	if u := h.Until(); !u.IsZero() {
		until = fmt.Sprintf(", at most until %s (maintenance.hookBound)", u.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("waiting for %s hooks: %s; each is let go when its annotation %s<name> is removed%s",
		h.Phase, h.Names(), h.Phase.Prefix(), until)
}
