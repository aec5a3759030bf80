package nodelifecycle

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"

	"github.com/node-agent/node-agent/pkg/nodelifecycle/spec"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		name string
		mode spec.Mode
		v    *version.Info
		want bool
	}{
		{"auto on 1.36", spec.Auto, &version.Info{Major: "1", Minor: "36", GitVersion: "v1.36.3"}, false},
		{"auto on 1.37", spec.Auto, &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}, true},
		{"auto on a distribution's 1.38+", spec.Auto, &version.Info{Major: "1", Minor: "38+", GitVersion: "v1.38.0-eks"}, true},
		{"auto from gitVersion alone", spec.Auto, &version.Info{GitVersion: "v1.37.0"}, true},
		{"auto, gitVersion alone, 1.36", spec.Auto, &version.Info{GitVersion: "v1.36.9"}, false},
		{"auto, version unknown", spec.Auto, nil, false},
		{"auto, version unreadable", spec.Auto, &version.Info{GitVersion: "devel"}, false},
		{"auto, major 2", spec.Auto, &version.Info{Major: "2", Minor: "0"}, false},
		{"on, even on 1.36", spec.On, &version.Info{Major: "1", Minor: "36"}, true},
		{"on, version unknown", spec.On, nil, true},
		{"off on 1.37", spec.Off, &version.Info{Major: "1", Minor: "37"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, why := Enabled(c.mode, c.v)
			if got != c.want || why == "" {
				t.Errorf("Enabled = %v (%q), want %v with a reason", got, why, c.want)
			}
		})
	}
}

func types(cs []Condition) []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for _, c := range cs {
		out = append(out, c.Type)
	}
	return out
}

func TestWant(t *testing.T) {
	for _, c := range []struct {
		s    State
		want []corev1.NodeConditionType
	}{
		{State{}, nil},
		{State{Stage: Planned, Reason: "WaitingForDrainSlot"}, []corev1.NodeConditionType{MaintenancePlanned}},
		{State{Stage: Draining, Reason: "Draining"}, []corev1.NodeConditionType{MaintenanceInProgress, DrainInProgress}},
		{State{Stage: DrainDone, Reason: "Drained"}, []corev1.NodeConditionType{MaintenanceInProgress, Drained}},
		{State{Stage: DrainFailed, Reason: "DrainFailed"}, []corev1.NodeConditionType{MaintenanceInProgress}},
		{State{ShuttingDown: true, ShutdownReason: "PrepareForShutdown"}, []corev1.NodeConditionType{GracefulNodeShutdownInProgress}},
		{State{Stage: Draining, Reason: "Draining", ShuttingDown: true, ShutdownReason: "PrepareForShutdown"},
			[]corev1.NodeConditionType{MaintenanceInProgress, DrainInProgress, GracefulNodeShutdownInProgress}},
	} {
		got := Want(c.s)
		if !slices.Equal(types(got), c.want) {
			t.Errorf("Want(%+v) = %v, want %v", c.s, types(got), c.want)
		}
		for _, g := range got {
			if !strings.HasPrefix(g.Reason, ReasonPrefix) || !Owned(corev1.NodeCondition{Reason: g.Reason}) {
				t.Errorf("Want(%+v): reason %q is not marked as node-agent's", c.s, g.Reason)
			}
		}
	}
}

var (
	t0 = metav1.NewTime(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Minute))
)

func cond(typ corev1.NodeConditionType, reason string) corev1.NodeCondition {
	return corev1.NodeCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: "m", LastTransitionTime: t0, LastHeartbeatTime: t0}
}

func node(cs ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{Status: corev1.NodeStatus{Conditions: cs}}
}

// apply runs patch on n as the apiserver would (RFC 6902) and returns the
// result, or the patch's error.
func apply(t *testing.T, n *corev1.Node, patch []byte) (*corev1.Node, error) {
	t.Helper()
	doc, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", patch, err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, err
	}
	var got corev1.Node
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got, nil
}

func summary(n *corev1.Node) []string {
	var out []string
	for _, c := range n.Status.Conditions {
		out = append(out, string(c.Type)+"="+c.Reason)
	}
	return out
}

func TestPatch(t *testing.T) {
	draining := Want(State{Stage: Draining, Reason: "Draining", Message: "m"})
	for _, c := range []struct {
		name string
		n    *corev1.Node
		want []Condition
		out  []string // the conditions after the patch; nil: no patch
	}{
		{
			name: "adds beside the kubelet's, to a Node with conditions",
			n:    node(cond("Ready", "KubeletReady")),
			want: draining,
			out:  []string{"Ready=KubeletReady", "MaintenanceInProgress=NodeAgentDraining", "DrainInProgress=NodeAgentDraining"},
		},
		{
			name: "adds to a Node without conditions",
			n:    node(),
			want: Want(State{Stage: Planned, Reason: "WaitingForDrainSlot", Message: "m"}),
			out:  []string{"MaintenancePlanned=NodeAgentWaitingForDrainSlot"},
		},
		{
			name: "moves on: removes its own, rewrites its own, adds the new one",
			n:    node(cond("Ready", "KubeletReady"), cond(MaintenancePlanned, "NodeAgentWaitingForDrainSlot"), cond(MaintenanceInProgress, "NodeAgentDraining"), cond(DrainInProgress, "NodeAgentDraining")),
			want: Want(State{Stage: DrainDone, Reason: "Drained", Message: "m"}),
			out:  []string{"Ready=KubeletReady", "MaintenanceInProgress=NodeAgentDrained", "Drained=NodeAgentDrained"},
		},
		{
			name: "an admin's condition of a wanted type stays as it is",
			n:    node(cond(MaintenanceInProgress, "ChangeTicket42"), cond(Drained, "NodeAgentDrained")),
			want: draining,
			out:  []string{"MaintenanceInProgress=ChangeTicket42", "DrainInProgress=NodeAgentDraining"},
		},
		{
			name: "ending removes only its own",
			n:    node(cond(MaintenancePlanned, "ChangeTicket42"), cond(MaintenanceInProgress, "NodeAgentDrained"), cond("Ready", "KubeletReady"), cond(Drained, "NodeAgentDrained")),
			want: nil,
			out:  []string{"MaintenancePlanned=ChangeTicket42", "Ready=KubeletReady"},
		},
		{
			name: "nothing to do",
			n:    node(cond(MaintenanceInProgress, "NodeAgentDraining"), cond(DrainInProgress, "NodeAgentDraining")),
			want: draining,
		},
		{
			name: "nothing of its own, nothing wanted",
			n:    node(cond(Drained, "AdminDrainedIt")),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			patch, err := Patch(c.n, c.want, t1)
			if err != nil {
				t.Fatal(err)
			}
			if c.out == nil {
				if patch != nil {
					t.Fatalf("patch %s, want none", patch)
				}
				return
			}
			got, err := apply(t, c.n, patch)
			if err != nil {
				t.Fatalf("patch %s: %v", patch, err)
			}
			if !slices.Equal(summary(got), c.out) {
				t.Errorf("after the patch: %v, want %v", summary(got), c.out)
			}
		})
	}
}

func TestPatchKeepsTransitionTime(t *testing.T) {
	n := node(cond(MaintenanceInProgress, "NodeAgentDraining"))
	patch, err := Patch(n, Want(State{Stage: DrainDone, Reason: "Drained", Message: "m"}), t1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := apply(t, n, patch)
	if err != nil {
		t.Fatal(err)
	}
	c := got.Status.Conditions[0]
	if c.Reason != "NodeAgentDrained" || !c.LastTransitionTime.Equal(&t0) || !c.LastHeartbeatTime.Equal(&t1) {
		t.Errorf("rewritten condition %+v: want the transition kept at %s and the heartbeat at %s", c, t0, t1)
	}
}

// TestPatchRefusesAChangedNode: a patch built from a stale read must fail
// rather than remove or rewrite another writer's condition.
func TestPatchRefusesAChangedNode(t *testing.T) {
	read := node(cond("Ready", "KubeletReady"), cond(Drained, "NodeAgentDrained"))
	patch, err := Patch(read, nil, t1)
	if err != nil {
		t.Fatal(err)
	}
	for name, now := range map[string]*corev1.Node{
		"an admin took the type over":  node(cond("Ready", "KubeletReady"), cond(Drained, "ChangeTicket42")),
		"another condition came first": node(cond("Ready", "KubeletReady"), cond(MaintenancePlanned, "ChangeTicket42"), cond(Drained, "NodeAgentDrained")),
	} {
		if got, err := apply(t, now, patch); err == nil {
			t.Errorf("%s: the stale patch applied: %v", name, summary(got))
		}
	}
	if got, err := apply(t, read, patch); err != nil || !slices.Equal(summary(got), []string{"Ready=KubeletReady"}) {
		t.Errorf("on the Node it was built from: %v, %v", summary(got), err)
	}
	// A condition appended since moves no index the patch names: it
	// applies, and the newcomer stays.
	later := node(cond("Ready", "KubeletReady"), cond(Drained, "NodeAgentDrained"), cond(MaintenancePlanned, "ChangeTicket42"))
	if got, err := apply(t, later, patch); err != nil || !slices.Equal(summary(got), []string{"Ready=KubeletReady", "MaintenancePlanned=ChangeTicket42"}) {
		t.Errorf("with a condition appended since: %v, %v", summary(got), err)
	}
}
