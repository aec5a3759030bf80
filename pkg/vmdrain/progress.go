package vmdrain

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// The phases of a VM during a drain, as Track reports them.
const (
	// PhaseWaiting: still on the node; no evacuation asked for yet (the
	// drain's eviction of its launcher pod comes, or is retried).
	PhaseWaiting = "Waiting"
	// PhaseEvacuating: KubeVirt marked it for evacuation; no migration
	// runs yet.
	PhaseEvacuating = "Evacuating"
	// PhaseMigrating: a migration to Target runs, since Since.
	PhaseMigrating = "Migrating"
	// PhaseMigrationFailed: its last migration failed; Message says why.
	// KubeVirt tries again while the evacuation stands.
	PhaseMigrationFailed = "MigrationFailed"
	// PhaseMigrated: it left the node (to Target, when seen).
	PhaseMigrated = "Migrated"
	// PhaseStopped: it left the node without a migration (stopped by the
	// drain's eviction: strategy None, or LiveMigrateIfPossible and not
	// live-migratable).
	PhaseStopped = "Stopped"
)

// StuckAfter is how long a VM may stay on the node during a drain without
// moving before its progress says what holds it.
const StuckAfter = 10 * time.Minute

// Progress is one VM's state during a drain.
type Progress struct {
	VM     string
	Phase  string
	Target string
	// Since is when the current migration started, or when the VM was
	// first seen waiting.
	Since time.Time
	// Message says what holds it or what happened, for people.
	Message string
}

// Tracker follows the VMs of one drain: those on the node when it began,
// until each left it. It is not safe for concurrent use.
type Tracker struct {
	// List lists the VMs on the node now (ListOnNode).
	List func(ctx context.Context) ([]VM, error)
	// Get reads one VM wherever it runs now (GetVM), for a VM that left
	// the node: where it went. Nil: only the last target seen tells.
	Get func(ctx context.Context, namespace, name string) (VM, bool, error)
	// Planned are the plans made when the drain began, by VM key.
	Planned map[string]VMPlan
	// Now is the clock.
	Now func() time.Time
	// Node is the node drained.
	Node string

	seen   map[string]Progress // the last progress of each VM
	target map[string]string   // the last target seen of each VM
	gone   map[string]Progress // the VMs that left, as found out once
}

// Track reads the VMs on the node and returns the progress of every VM the
// drain began with, sorted by name. A VM no longer on the node has left:
// by migration (Migrated, to the last target seen) or, if its plan was to
// be stopped, Stopped.
func (t *Tracker) Track(ctx context.Context) ([]Progress, error) {
	if t.seen == nil {
		t.seen, t.target, t.gone = map[string]Progress{}, map[string]string{}, map[string]Progress{}
	}
	vms, err := t.List(ctx)
	if err != nil {
		return nil, err
	}
	now := t.Now()
	here := map[string]VM{}
	for _, v := range vms {
		here[v.Key()] = v
	}
	keys := make([]string, 0, len(t.Planned))
	for k := range t.Planned {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Progress, 0, len(keys))
	for _, k := range keys {
		p, ok := t.gone[k]
		if !ok {
			p = t.progress(k, here, now)
			if _, on := here[k]; !on && t.Get != nil {
				var settled bool
				if p, settled = t.departed(ctx, k, p); settled {
					t.gone[k] = p
				}
			}
		}
		t.seen[k] = p
		out = append(out, p)
	}
	return out, nil
}

// departed finds out where a VM that left the node went: p is what the
// node alone tells. settled is false while that cannot be told yet (the VM
// read failed, or it still shows this node: KubeVirt moves its label and its
// status in separate writes), and the next poll asks again.
func (t *Tracker) departed(ctx context.Context, key string, p Progress) (Progress, bool) {
	ns, name, _ := strings.Cut(key, "/")
	v, found, err := t.Get(ctx, ns, name)
	switch {
	case err != nil:
		return p, false
	case !found:
		p.Phase, p.Message = PhaseStopped, "deleted"
	case v.Phase == "Succeeded" || v.Phase == "Failed":
		p.Phase, p.Target, p.Message = PhaseStopped, "", "stopped (phase "+v.Phase+")"
	case v.Node == "" || v.Node == t.Node:
		return p, false
	default:
		p.Phase, p.Target, p.Message = PhaseMigrated, v.Node, "live-migrated to "+v.Node
	}
	return p, true
}

func (t *Tracker) progress(key string, here map[string]VM, now time.Time) Progress {
	plan := t.Planned[key]
	prev, known := t.seen[key]
	v, on := here[key]
	if on && (v.Phase == "Succeeded" || v.Phase == "Failed") {
		// Its launcher pod is gone: KubeVirt ends the VMI.
		return Progress{VM: key, Phase: PhaseStopped, Since: since(prev, now, PhaseStopped), Message: "stopped (phase " + v.Phase + ")"}
	}
	if !on {
		if plan.Way == Stopped {
			return Progress{VM: key, Phase: PhaseStopped, Since: since(prev, now, PhaseStopped), Message: plan.Why}
		}
		target := t.target[key]
		msg := "left the node"
		if target != "" {
			msg = "live-migrated to " + target
		}
		return Progress{VM: key, Phase: PhaseMigrated, Target: target, Since: since(prev, now, PhaseMigrated), Message: msg}
	}
	if m := v.Migration; m != nil && m.SourceNode == v.Node && m.TargetNode != "" {
		t.target[key] = m.TargetNode
		start := parseTime(m.StartTimestamp, now)
		switch {
		case m.Failed:
			return Progress{VM: key, Phase: PhaseMigrationFailed, Target: m.TargetNode, Since: parseTime(m.EndTimestamp, now),
				Message: fmt.Sprintf("migration to %s failed: %s", m.TargetNode, orDefault(m.FailureReason, "no reason given"))}
		case !m.Completed:
			return Progress{VM: key, Phase: PhaseMigrating, Target: m.TargetNode, Since: start,
				Message: fmt.Sprintf("migrating to %s", m.TargetNode)}
		}
	}
	phase, msg := PhaseWaiting, "waiting for the drain to evict its launcher pod"
	if v.EvacuationNode == v.Node && v.Node != "" {
		phase, msg = PhaseEvacuating, "marked for evacuation; no migration runs yet"
	}
	p := Progress{VM: key, Phase: phase, Since: now, Message: msg}
	if known && (prev.Phase == PhaseWaiting || prev.Phase == PhaseEvacuating) {
		p.Since = prev.Since
	}
	if now.Sub(p.Since) >= StuckAfter {
		p.Message = fmt.Sprintf("has not moved in %s: %s (%s)", StuckAfter, msg, plan.Why)
	}
	return p
}

func since(prev Progress, now time.Time, phase string) time.Time {
	if prev.Phase == phase && !prev.Since.IsZero() {
		return prev.Since
	}
	return now
}

func parseTime(s string, fallback time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t
	}
	return fallback
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
