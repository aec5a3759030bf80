// Package nodelifecycle owns the Kubernetes node lifecycle conditions of
// KEP-5683 (Kubernetes 1.37, gate NodeLifecycleConditions) on the agent's
// own Node: which of the five condition types node-agent's maintenance state
// stands for, whether the cluster gets them at all (the mode and the server
// version), and the one write that sets and removes them, touching only the
// conditions node-agent wrote.
//
// Kubernetes v1.37.2 defines the five types and leaves their writing to
// whoever drives maintenance; its gate guards no code, so the apiserver
// accepts them on any release and no API tells whether the gate is on. The
// agent therefore writes them where the apiserver is 1.37 or later (spec.Auto),
// or where the admin says so (spec.On), and never on 1.36 unless told.
//
// A condition is node-agent's when its reason starts with ReasonPrefix.
// Another writer's condition of the same type (an admin's, another tool's)
// is never overwritten or removed.
package nodelifecycle

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"

	"github.com/node-agent/node-agent/pkg/nodelifecycle/spec"
	"github.com/node-agent/node-agent/pkg/reasontext"
)

// The condition types of KEP-5683, as k8s.io/api v0.37 names them.
const (
	MaintenancePlanned             corev1.NodeConditionType = "MaintenancePlanned"
	MaintenanceInProgress          corev1.NodeConditionType = "MaintenanceInProgress"
	DrainInProgress                corev1.NodeConditionType = "DrainInProgress"
	Drained                        corev1.NodeConditionType = "Drained"
	GracefulNodeShutdownInProgress corev1.NodeConditionType = "GracefulNodeShutdownInProgress"
)

// Types lists the five types, in the order a maintenance passes them.
var Types = []corev1.NodeConditionType{MaintenancePlanned, MaintenanceInProgress, DrainInProgress, Drained, GracefulNodeShutdownInProgress}

// ReasonPrefix starts the reason of every condition node-agent writes; it is
// how the agent tells its own conditions from another writer's.
const ReasonPrefix = "NodeAgent"

// FirstRelease is the first Kubernetes minor release that defines the
// conditions.
const FirstRelease = 37

// Enabled decides whether the agent writes the conditions, from the mode and
// the apiserver's version (nil when it could not be read), and says why in a
// sentence for the log.
func Enabled(mode spec.Mode, v *version.Info) (bool, string) {
	switch mode {
	case spec.On:
		return true, "drain.nodeLifecycleConditions is on"
	case spec.Off:
		return false, "drain.nodeLifecycleConditions is off"
	}
	if v == nil {
		return false, "the apiserver's version is unknown, so drain.nodeLifecycleConditions auto writes none"
	}
	minor, ok := parseMinor(v)
	if !ok {
		return false, fmt.Sprintf("the apiserver's version %q does not parse, so drain.nodeLifecycleConditions auto writes none", v.GitVersion)
	}
	if minor < FirstRelease {
		return false, fmt.Sprintf("the apiserver is %s, older than 1.%d, which defines the node lifecycle conditions", v.GitVersion, FirstRelease)
	}
	return true, fmt.Sprintf("the apiserver is %s, which defines the node lifecycle conditions", v.GitVersion)
}

// parseMinor reads the minor release of a major-1 version: from Minor
// ("37", or "37+" on some distributions), else from GitVersion ("v1.37.2").
func parseMinor(v *version.Info) (int, bool) {
	major, minor := v.Major, v.Minor
	if major == "" || minor == "" {
		parts := strings.SplitN(strings.TrimPrefix(v.GitVersion, "v"), ".", 3)
		if len(parts) < 2 {
			return 0, false
		}
		major, minor = parts[0], parts[1]
	}
	if strings.TrimRight(major, "+") != "1" {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimRight(minor, "+"))
	return n, err == nil
}

// Stage is where a maintenance stands, as node-agent's own conditions say.
type Stage int

// The stages.
const (
	// None: no maintenance.
	None Stage = iota
	// Planned: requested, waiting (for a drain slot, a gate, a window).
	Planned
	// Draining: cordoned, pods being evicted.
	Draining
	// DrainDone: every pod evicted; the maintenance goes on.
	DrainDone
	// DrainFailed: the drain stopped with pods left; the maintenance is
	// not over until it is ended.
	DrainFailed
)

// State is node-agent's maintenance state on its Node.
type State struct {
	Stage Stage
	// Reason and Message are those of node-agent's own condition
	// (UnderMaintenance): the KEP conditions carry the message, and the
	// reason after ReasonPrefix.
	Reason, Message string
	// ShuttingDown: the host is powering off and the agent drains within
	// logind's delay (NodeShuttingDown).
	ShuttingDown    bool
	ShutdownReason  string
	ShutdownMessage string
}

// Condition is one condition the agent wants True.
type Condition struct {
	Type            corev1.NodeConditionType
	Reason, Message string
}

// Want returns the conditions s stands for, in Types order; every other of
// the five types, where node-agent wrote it, is to go.
func Want(s State) []Condition {
	var out []Condition
	add := func(t corev1.NodeConditionType, reason, msg string) {
		out = append(out, Condition{Type: t, Reason: ReasonPrefix + reason, Message: msg})
	}
	switch s.Stage {
	case Planned:
		add(MaintenancePlanned, s.Reason, s.Message)
	case Draining:
		add(MaintenanceInProgress, s.Reason, s.Message)
		add(DrainInProgress, s.Reason, s.Message)
	case DrainDone:
		add(MaintenanceInProgress, s.Reason, s.Message)
		add(Drained, s.Reason, s.Message)
	case DrainFailed:
		add(MaintenanceInProgress, s.Reason, s.Message)
	}
	if s.ShuttingDown {
		add(GracefulNodeShutdownInProgress, s.ShutdownReason, s.ShutdownMessage)
	}
	return out
}

// Owned reports whether node-agent wrote c.
func Owned(c corev1.NodeCondition) bool { return strings.HasPrefix(c.Reason, ReasonPrefix) }

// Patch returns the JSON patch (RFC 6902) of the Node's status subresource
// that brings node's five conditions to want, or nil when nothing changes.
// It adds a wanted condition that is absent, rewrites one of node-agent's
// own whose reason or message changed, and removes node-agent's own ones
// that are not wanted; it leaves every condition of another writer alone,
// even of a wanted type. Each change to an existing entry is guarded by
// "test" operations on its index, type and reason, so a Node changed since
// node was read makes the whole patch fail instead of touching another
// writer's condition: the caller reads the Node again and retries.
// lastTransitionTime is kept on a rewrite (the status stays True).
func Patch(node *corev1.Node, want []Condition, now metav1.Time) ([]byte, error) {
	conds := node.Status.Conditions
	wanted := map[corev1.NodeConditionType]Condition{}
	for _, w := range want {
		wanted[w.Type] = w
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	var ops []op
	guard := func(i int, c corev1.NodeCondition) {
		p := fmt.Sprintf("/status/conditions/%d", i)
		ops = append(ops, op{Op: "test", Path: p + "/type", Value: string(c.Type)}, op{Op: "test", Path: p + "/reason", Value: c.Reason})
	}
	present := map[corev1.NodeConditionType]bool{}
	var removals []int
	for i, c := range conds {
		if !isLifecycleType(c.Type) {
			continue
		}
		present[c.Type] = true
		if !Owned(c) {
			continue
		}
		w, ok := wanted[c.Type]
		switch {
		case !ok:
			removals = append(removals, i)
		case c.Status != corev1.ConditionTrue || c.Reason != w.Reason || c.Message != cut(w.Message):
			guard(i, c)
			transition := c.LastTransitionTime
			if c.Status != corev1.ConditionTrue || transition.IsZero() {
				transition = now
			}
			ops = append(ops, op{Op: "replace", Path: fmt.Sprintf("/status/conditions/%d", i), Value: entry(w, now, transition)})
		}
	}
	// Removals last, from the highest index down, so no removal shifts
	// an index another operation names.
	for j := len(removals) - 1; j >= 0; j-- {
		i := removals[j]
		guard(i, conds[i])
		ops = append(ops, op{Op: "remove", Path: fmt.Sprintf("/status/conditions/%d", i)})
	}
	var adds []any
	for _, w := range want {
		if !present[w.Type] {
			adds = append(adds, entry(w, now, now))
		}
	}
	if len(adds) > 0 {
		if len(conds) == 0 {
			ops = append(ops, op{Op: "add", Path: "/status/conditions", Value: adds})
		} else {
			for _, a := range adds {
				ops = append(ops, op{Op: "add", Path: "/status/conditions/-", Value: a})
			}
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

func cut(msg string) string { return reasontext.ForNode(msg, reasontext.MaxMessage) }

func entry(w Condition, now, transition metav1.Time) map[string]any {
	return map[string]any{
		"type": w.Type, "status": corev1.ConditionTrue, "reason": w.Reason, "message": cut(w.Message),
		"lastHeartbeatTime": now, "lastTransitionTime": transition,
	}
}

func isLifecycleType(t corev1.NodeConditionType) bool { return slices.Contains(Types, t) }
