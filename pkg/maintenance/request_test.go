package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/selfdrain"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/reasontext"
)

// The values of the maintenance annotation the agent refuses, and what a
// refusal does (and does not do) on the Node.

func TestParseMaintenanceRequest(t *testing.T) {
	for _, tt := range []struct {
		value   *string
		want    string
		refused bool
	}{
		{value: nil, want: ""},
		{value: ptrTo(""), want: ""},
		{value: ptrTo("kernel update"), want: "kernel update"},
		{value: ptrTo(" kernel update "), want: "kernel update"},
		{value: ptrTo("false"), refused: true},
		{value: ptrTo("No"), refused: true},
		{value: ptrTo("0"), refused: true},
		{value: ptrTo("OFF"), refused: true},
	} {
		n := &corev1.Node{}
		if tt.value != nil {
			n.Annotations = map[string]string{selfdrain.MaintenanceAnnotation: *tt.value}
		}
		got, err := selfdrain.ParseMaintenanceRequest(n)
		var re *reasontext.RefusedError
		if refused := errors.As(err, &re); refused != tt.refused || got != tt.want || (err != nil && !refused) {
			t.Errorf("ParseMaintenanceRequest(%v) = %q, %v; want %q, refused %t", tt.value, got, err, tt.want, tt.refused)
		}
	}
}

// reconciler calls the controller's reconcile once per call, as the queue
// does after a change of the Node.
func reconciler(t *testing.T, h *harness) (*Controller, func()) {
	c, v := h.controller()
	t.Cleanup(func() { c.takeActive().stop() })
	return c, func() {
		t.Helper()
		if err := c.reconcile(context.Background(), v); err != nil {
			t.Fatal(err)
		}
	}
}

func refusals(events []string) []string {
	var out []string
	for _, ev := range events {
		if strings.HasPrefix(ev, "Warning MaintenanceRequestRefused") {
			out = append(out, ev)
		}
	}
	return out
}

// node-agent.io/maintenance=false on a node in service changes nothing: no
// drain starts, nothing is cordoned, tainted or recorded. A Warning Event on
// the Node says why and what is accepted, once per value.
func TestControllerRefusesFalse(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	c, reconcile := reconciler(t, h)

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"false"}}}`)
	reconcile()
	reconcile()
	if c.active != nil {
		t.Fatal("a drain started on node-agent.io/maintenance=false")
	}
	n := h.node()
	if n.Spec.Unschedulable || hasTaint(n, h.engine.Config.TaintKey) || n.Annotations[selfdrain.StatusAnnotation] != "" || h.condition(selfdrain.ConditionType) != nil {
		t.Fatalf("node changed on a refused value: %+v, annotations %v", n.Spec, n.Annotations)
	}
	if len(h.evicted()) > 0 {
		t.Fatal("pods evicted on a refused value")
	}
	got := refusals(h.events())
	if len(got) != 1 {
		t.Fatalf("refusal Events %q; want one for the value, not one a reconcile", got)
	}
	for _, want := range []string{`node-agent.io/maintenance="false" is refused`, "its value is the reason", "no maintenance starts"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("Event %q lacks %q", got[0], want)
		}
	}

	// Another refused value is reported again.
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"No"}}}`)
	reconcile()
	reconcile()
	if got := refusals(h.events()); len(got) != 1 || !strings.Contains(got[0], `"No"`) {
		t.Fatalf("refusal Events after the second value %q; want one naming it", got)
	}

	// A reason starts the drain.
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel update"}}}`)
	reconcile()
	run := c.active
	if run == nil || run.reason != "kernel update" {
		t.Fatalf("active run %+v, want the annotation's", run)
	}
	h.run(func() { <-run.done }, nil)
	if st := h.status(); st.Phase != selfdrain.PhaseSucceeded || !h.node().Spec.Unschedulable {
		t.Fatalf("status %s; want the drain done", st.Encode())
	}
}

// A refused value over a maintenance the annotation asked for earlier
// changes nothing either: the node stays drained and cordoned, the record
// unchanged, until the annotation is removed. Ending the maintenance on
// "false" would uncordon the node on a value the agent does not accept.
func TestControllerRefusedValueKeepsTheMaintenance(t *testing.T) {
	h := newHarness(t)
	c, reconcile := reconciler(t, h)
	st, err := h.engine.Begin(context.Background(), selfdrain.Request{Trigger: selfdrain.TriggerAnnotation, Reason: "NIC"})
	if err != nil {
		t.Fatal(err)
	}
	st.Phase = selfdrain.PhaseSucceeded
	h.patchNode(fmt.Sprintf(`{"metadata":{"annotations":{"node-agent.io/maintenance":"NIC",%q:%q}}}`, selfdrain.StatusAnnotation, st.Encode()))
	reconcile()
	before := h.node().Annotations[selfdrain.StatusAnnotation]

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"false"}}}`)
	reconcile()
	reconcile()
	n := h.node()
	if !n.Spec.Unschedulable || n.Annotations[selfdrain.StatusAnnotation] != before || c.active != nil {
		t.Fatalf("the maintenance changed on a refused value: unschedulable %t, status %s", n.Spec.Unschedulable, n.Annotations[selfdrain.StatusAnnotation])
	}
	got := refusals(h.events())
	if len(got) != 1 || !strings.Contains(got[0], `the maintenance asked for before (reason "NIC") goes on`) {
		t.Fatalf("refusal Events %q; want one that says the maintenance goes on", got)
	}

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":null}}}`)
	reconcile()
	if st := h.status(); st.Active() || h.node().Spec.Unschedulable {
		t.Fatalf("after the annotation went: %s; want the maintenance ended and the node uncordoned", st.Encode())
	}
}

// A refused value while the annotation's drain waits for its slot leaves
// the wait as it is: nothing on the node changed yet, and nothing does now.
func TestControllerRefusedValueLeavesAWaitingDrain(t *testing.T) {
	h := newHarness(t)
	h.slots.hold("node-2")
	c, reconcile := reconciler(t, h)
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"NIC"}}}`)
	reconcile()
	run := c.active
	if run == nil {
		t.Fatal("no drain for the annotation")
	}
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"off"}}}`)
	reconcile()
	if c.active != run {
		t.Fatal("the waiting drain was stopped or replaced on a refused value")
	}
	if h.node().Spec.Unschedulable {
		t.Fatal("node cordoned while its drain waits")
	}
}

// A reason of 200 KiB is cut where the agent repeats it: in its status, the
// condition and the Events. Copied whole, the status alone would push the
// Node's annotations past the apiserver's 256 KiB, and every write of the
// record would fail.
func TestControllerCutsALongReason(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	c, reconcile := reconciler(t, h)
	long := strings.Repeat("x", 200<<10)
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{selfdrain.MaintenanceAnnotation: long}}})
	h.patchNode(string(b))
	reconcile()
	run := c.active
	if run == nil {
		t.Fatal("no drain for a long reason")
	}
	h.run(func() { <-run.done }, nil)
	st := h.status()
	if st.Phase != selfdrain.PhaseSucceeded {
		t.Fatalf("status %s; want Succeeded", st.Encode())
	}
	if len(st.Reason) > reasontext.MaxReason || !strings.HasSuffix(st.Reason, reasontext.Marker) {
		t.Errorf("status reason of %d bytes, ending %q; want at most %d, ending in the marker", len(st.Reason), st.Reason[max(0, len(st.Reason)-10):], reasontext.MaxReason)
	}
	if total := annotationBytes(h.node()); total > 256<<10 {
		t.Errorf("the Node's annotations hold %d bytes, past the apiserver's 256 KiB", total)
	}
	if cond := h.condition(selfdrain.ConditionType); cond == nil || len(cond.Message) > reasontext.MaxMessage {
		t.Errorf("condition %v: want its message within %d bytes", cond != nil, reasontext.MaxMessage)
	}
	for _, ev := range h.events() {
		// "type reason message"
		if len(ev) > reasontext.MaxMessage+100 {
			t.Errorf("Event of %d bytes: %.80s...", len(ev), ev)
		}
	}

	// The same long value is the same request: reconciled again, the drain
	// that answered it is not started anew.
	reconcile()
	if c.active != nil {
		t.Error("the drain started again for the same long reason")
	}
}

func annotationBytes(n *corev1.Node) int {
	total := 0
	for k, v := range n.Annotations {
		total += len(k) + len(v)
	}
	return total
}

// The texts of the record are cut, whatever set them.
func TestStatusEncodeCutsTexts(t *testing.T) {
	long := strings.Repeat("é", 10000)
	st := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerNodeMaintenance, Reason: long, LastError: long,
		Blockers: []selfdrain.Blocker{{Pod: "ns/a", Reason: selfdrain.BlockerEvictionFailed, Detail: long}}, StartTime: &metav1.Time{}}
	got, err := selfdrain.DecodeStatus(st.Encode())
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]struct {
		text  string
		limit int
	}{"reason": {got.Reason, reasontext.MaxReason}, "lastError": {got.LastError, reasontext.MaxMessage}, "blocker detail": {got.Blockers[0].Detail, reasontext.MaxReason}} {
		if len(s.text) > s.limit || !strings.HasSuffix(s.text, reasontext.Marker) {
			t.Errorf("%s: %d bytes, want at most %d ending in the marker", name, len(s.text), s.limit)
		}
	}
	if st.Reason != long || st.Blockers[0].Detail != long {
		t.Error("Encode changed the status it encoded")
	}
}
