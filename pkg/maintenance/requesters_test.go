package maintenance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// One maintenance, several requesters: Decide starts one drain for the
// first, keeps it while any stays, whoever comes or goes, and ends it with
// the last.
func TestDecideSeveralRequesters(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	running := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerAnnotation, Reason: "kernel", StartTime: &t0}
	drained := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, Reason: "kernel", StartTime: &t0}
	timedOut := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerAnnotation, Reason: "kernel", StartTime: &t0}
	objTimedOut := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerNodeMaintenance, Reason: "NIC replacement", StartTime: &t0}
	object := nmObject("nodemaintenance.medik8s.io", "nm", t0.Time)
	other := nmObject("nodemaintenance.medik8s.io", "nm2", t0.Add(time.Second))
	net := Requester{Kind: KindOwner, Name: "network-team", Reason: "switch firmware"}
	storage := Requester{Kind: KindOwner, Name: "storage-team", Reason: "disk swap"}
	annotation := Requester{Kind: KindAnnotation, Name: "annotation", Reason: "kernel"}
	objReq := Requester{Kind: KindNodeMaintenance, Name: object.ID(), Reason: "NIC replacement"}

	tests := []struct {
		name        string
		req         Requests
		st          *selfdrain.Status
		recorded    []Requester
		running     bool
		want        Action
		wantTrigger selfdrain.Trigger
		wantReason  string
	}{
		{name: "an owner asks: a drain of the annotation trigger, its reason", req: Requests{Owners: []Requester{net}},
			want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation, wantReason: "switch firmware"},
		{name: "two owners ask: one drain, the first by name", req: Requests{Owners: []Requester{net, storage}},
			want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation, wantReason: "switch firmware"},
		{name: "a second requester joins a running drain: kept", req: Requests{Annotation: "kernel", Owners: []Requester{net}},
			st: running, recorded: []Requester{annotation}, running: true, want: Keep},
		{name: "the first requester ends while an owner stays, drain running: kept", req: Requests{Owners: []Requester{net}},
			st: running, recorded: []Requester{annotation, net}, running: true, want: Keep},
		{name: "the first requester ends while an object stays, drained: kept", req: Requests{Object: object},
			st: drained, recorded: []Requester{annotation, objReq}, want: Keep},
		{name: "one of two objects ends, drained: kept", req: Requests{Object: other, Objects: []*NodeMaintenance{other}},
			st: drained, want: Keep},
		{name: "timed out, the first requester ends while an owner stays: not started again", req: Requests{Owners: []Requester{net}},
			st: timedOut, recorded: []Requester{annotation, net}, want: Keep},
		{name: "timed out, the object ends while the annotation stays: not started again", req: Requests{Annotation: "kernel 6.12"},
			st: objTimedOut, recorded: []Requester{objReq, {Kind: KindAnnotation, Name: "annotation", Reason: "kernel 6.12"}}, want: Keep},
		{name: "timed out, a new requester alone: a new request", req: Requests{Owners: []Requester{storage}},
			st: timedOut, recorded: []Requester{annotation}, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation, wantReason: "disk swap"},
		{name: "timed out, the only owner asks with another reason: a new request", req: Requests{Owners: []Requester{{Kind: KindOwner, Name: "network-team", Reason: "again"}}},
			st: timedOut, recorded: []Requester{net}, want: StartDrain, wantTrigger: selfdrain.TriggerAnnotation, wantReason: "again"},
		{name: "the reboot ends while an owner stays: the owner takes the maintenance over", req: Requests{Owners: []Requester{net}},
			st:   &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerReboot, Reason: "reboot controller: kernel", StartTime: &t0},
			want: HandOver, wantTrigger: selfdrain.TriggerAnnotation, wantReason: "switch firmware"},
		{name: "the last requester ends, drain running: stopped", st: running, recorded: []Requester{net}, running: true, want: StopDrain},
		{name: "the last requester ends, drained: ended", st: drained, recorded: []Requester{net}, want: End},
		{name: "only objects being deleted are left: ended", req: Requests{Objects: []*NodeMaintenance{nmObject("nodemaintenance.medik8s.io", "gone", t0.Time, beingDeleted)}},
			st: drained, want: End},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Requests: tt.req, Record: tt.st, Recorded: tt.recorded}
			if tt.running {
				in.Running = &Running{Trigger: selfdrain.TriggerAnnotation, Reason: "kernel"}
			}
			d := Decide(in)
			if d.Action != tt.want {
				t.Fatalf("Decide = %v, want %v", d.Action, tt.want)
			}
			if (tt.want == StartDrain || tt.want == HandOver) && (d.Trigger != tt.wantTrigger || d.Reason != tt.wantReason) {
				t.Errorf("started %s %q, want %s %q", d.Trigger, d.Reason, tt.wantTrigger, tt.wantReason)
			}
		})
	}
}

func TestRequestsRequesters(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	obj := nmObject("nodemaintenance.medik8s.io", "nm", t0.Time)
	gone := nmObject("nodemaintenance.medik8s.io", "old", t0.Time, beingDeleted)
	req := Requests{Annotation: "kernel", Owners: []Requester{{Kind: KindOwner, Name: "net", Reason: "fw\x1b[2J"}},
		Object: obj, Objects: []*NodeMaintenance{gone, obj}, Reboot: "reboot controller: draining"}
	recorded := []Requester{{Kind: KindAnnotation, Name: "annotation", Reason: "kernel", Since: &t0}}
	got := req.Requesters(recorded, t1)
	var list []string
	for _, r := range got {
		list = append(list, fmt.Sprintf("%s|%s|%s", r.String(), r.Reason, r.Since.UTC().Format(time.RFC3339)))
	}
	want := []string{
		"annotation|kernel|2026-01-01T00:00:00Z",
		"owner net|fw\\x1b[2J|2026-01-01T01:00:00Z",
		"nodemaintenance " + obj.ID() + "|NIC replacement|2026-01-01T00:00:00Z",
		"reboot|reboot controller: draining|2026-01-01T01:00:00Z",
	}
	if strings.Join(list, "\n") != strings.Join(want, "\n") {
		t.Errorf("Requesters =\n%s\nwant\n%s", strings.Join(list, "\n"), strings.Join(want, "\n"))
	}
	// The annotation asked anew (another reason) is a new requester.
	req.Annotation = "kernel 6.12"
	if got := req.Requesters(recorded, t1); !got[0].Since.Equal(&t1) {
		t.Errorf("a new reason kept the old since %v", got[0].Since)
	}
}

func TestOwnerKey(t *testing.T) {
	for _, tt := range []struct {
		owner string
		ok    bool
	}{
		{"network-team", true}, {"ops.example.com", true}, {"a_b", true},
		{"", false}, {"has space", false}, {"slash/in/name", false}, {strings.Repeat("x", 64), false}, {"-lead", false},
	} {
		key, err := OwnerKey(tt.owner)
		if (err == nil) != tt.ok {
			t.Errorf("OwnerKey(%q) = %q, %v; want ok=%t", tt.owner, key, err, tt.ok)
		}
		if err == nil && key != OwnerAnnotationPrefix+tt.owner {
			t.Errorf("OwnerKey(%q) = %q", tt.owner, key)
		}
	}
}

func TestOwnerRequesters(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		OwnerAnnotationPrefix + "b": "disk swap",
		OwnerAnnotationPrefix + "a": "false",
		OwnerAnnotationPrefix + "c": "  ",
		OwnerAnnotationPrefix + "d": "no",
		"node-agent.io/maintenance": "kernel",
	}}}
	// a's refused value keeps the request it made before; d never asked.
	recorded := []Requester{{Kind: KindOwner, Name: "a", Reason: "fw"}}
	got := ownerRequesters(parseOwners(node), recorded)
	if len(got) != 2 || got[0].Name != "a" || got[0].Reason != "fw" || got[1].Name != "b" || got[1].Reason != "disk swap" {
		t.Errorf("owners = %+v, want a (held, fw) and b", got)
	}
	if !HasOwnerRequest(node) {
		t.Error("HasOwnerRequest = false with b asking")
	}
	if got := ownerRequesters(parseOwners(node), nil); len(got) != 1 || got[0].Name != "b" {
		t.Errorf("owners with nothing recorded = %+v, want b alone", got)
	}

	many := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	for i := range MaxOwners + 4 {
		many.Annotations[fmt.Sprintf("%so%02d", OwnerAnnotationPrefix, i)] = "r"
	}
	if got := ownerRequesters(parseOwners(many), nil); len(got) != MaxOwners || got[0].Name != "o00" {
		t.Errorf("%d owners served of %d, want %d from o00", len(got), MaxOwners+4, MaxOwners)
	}
}

// Two requesters, one drain: when the first ends the node stays drained,
// the list on the Node names the one left and an Event says who ended;
// when the last ends the agent undoes its changes and removes the list.
func TestControllerEndsWithTheLastRequester(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	c, v := h.controller()
	runController(t, c, v)

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel update","maintenance.node-agent.io/network-team":"switch firmware"}}}`)
	v.touch()
	h.waitFor("the drain to succeed", func() bool {
		st := h.status()
		return st != nil && st.Phase == selfdrain.PhaseSucceeded
	})
	h.waitFor("both requesters listed", func() bool {
		l, err := ParseRequesters(h.node())
		return err == nil && len(l) == 2
	})
	evictions := len(h.evicted())

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":null}}}`)
	v.touch()
	h.waitFor("the list to name the owner alone", func() bool {
		l, err := ParseRequesters(h.node())
		return err == nil && len(l) == 1 && l[0].Kind == KindOwner && l[0].Name == "network-team"
	})
	if st := h.status(); !st.Active() || st.Phase != selfdrain.PhaseSucceeded {
		t.Errorf("status after the first requester ended = %+v, want the maintenance going on, drained", st)
	}
	if n := h.node(); !n.Spec.Unschedulable {
		t.Error("node uncordoned while the owner still holds the maintenance")
	}
	if got := len(h.evicted()); got != evictions {
		t.Errorf("%d evictions after the first requester ended, want none more than %d: the drain started again", got, evictions)
	}
	// The Event follows the list's write: wait for it, as for the list.
	const ended = "Normal MaintenanceRequesterEnded annotation ended its request; the node stays in maintenance for owner network-team"
	h.waitFor("MaintenanceRequesterEnded naming who ended and who holds", func() bool { return hasEvent(h.events(), ended) })

	h.patchNode(`{"metadata":{"annotations":{"maintenance.node-agent.io/network-team":null}}}`)
	v.touch()
	h.waitFor("the maintenance to end", func() bool { return !h.status().Active() })
	h.waitFor("the list to go", func() bool { _, ok := h.node().Annotations[RequestersAnnotation]; return !ok })
	if n := h.node(); n.Spec.Unschedulable {
		t.Error("node still cordoned after the last requester ended")
	}
}

// The annotation alone is the record's trigger: no list is written for
// it (two Node patches fewer per maintenance). Once an owner joins, the
// list names both, and it stays, naming the annotation alone, after the
// owner ends, until the maintenance ends.
func TestSingleRequesterIsNotListed(t *testing.T) {
	for _, c := range []struct {
		list []Requester
		want bool
	}{
		{nil, false},
		{[]Requester{{Kind: KindAnnotation, Name: "annotation"}}, false},
		{[]Requester{{Kind: KindReboot, Name: "reboot"}}, false},
		{[]Requester{{Kind: KindOwner, Name: "net"}}, true},
		{[]Requester{{Kind: KindNodeMaintenance, Name: "nm"}}, true},
		{[]Requester{{Kind: KindAnnotation, Name: "annotation"}, {Kind: KindReboot, Name: "reboot"}}, true},
	} {
		if got := worthListing(c.list); got != c.want {
			t.Errorf("worthListing(%+v) = %t, want %t", c.list, got, c.want)
		}
	}

	h := newHarness(t, testPod("a"))
	h.onEvict(func(eviction) error { return nil })
	ctl, v := h.controller()
	runController(t, ctl, v)
	listed := func() bool { _, ok := h.node().Annotations[RequestersAnnotation]; return ok }

	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel update"}}}`)
	v.touch()
	h.waitFor("the drain to succeed", func() bool { st := h.status(); return st != nil && st.Phase == selfdrain.PhaseSucceeded })
	if listed() {
		t.Errorf("requesters list %q written for the annotation alone", h.node().Annotations[RequestersAnnotation])
	}

	h.patchNode(`{"metadata":{"annotations":{"maintenance.node-agent.io/network-team":"switch firmware"}}}`)
	v.touch()
	h.waitFor("the list to name both", func() bool { l, err := ParseRequesters(h.node()); return err == nil && len(l) == 2 })
	h.patchNode(`{"metadata":{"annotations":{"maintenance.node-agent.io/network-team":null}}}`)
	v.touch()
	h.waitFor("the list to name the annotation alone", func() bool {
		l, err := ParseRequesters(h.node())
		return err == nil && len(l) == 1 && l[0].Kind == KindAnnotation
	})
	h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":null}}}`)
	v.touch()
	h.waitFor("the maintenance to end", func() bool { return !h.status().Active() })
	h.waitFor("the list to go", func() bool { return !listed() })
}

// A refused value of the maintenance annotation holds only what the
// annotation itself asked for: a record of the annotation trigger that an
// owner's request started is not the annotation's.
func TestHeldAnnotationFollowsTheList(t *testing.T) {
	h := newHarness(t)
	c, _ := h.controller()
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, Reason: "switch firmware", StartTime: &t0}
	owner := Requester{Kind: KindOwner, Name: "net", Reason: "switch firmware"}
	if got := c.heldAnnotation(st, nil, []Requester{owner}); got != "" {
		t.Errorf("held %q for an owner's record, want nothing", got)
	}
	both := []Requester{{Kind: KindAnnotation, Name: "annotation", Reason: "kernel"}, owner}
	if got := c.heldAnnotation(st, nil, both); got != "kernel" {
		t.Errorf("held %q, want the annotation's listed reason", got)
	}
	if got := c.heldAnnotation(st, nil, nil); got != "switch firmware" {
		t.Errorf("held %q without a list, want the record's reason", got)
	}
}

// The requesters list is read from the Node: whatever it holds, parsing
// never panics, and a list that parses is written back the same.
func FuzzParseRequesters(f *testing.F) {
	f.Add(`[{"kind":"owner","name":"net","reason":"fw","since":"2026-01-01T00:00:00Z"}]`)
	f.Add(`[]`)
	f.Add(`{"kind":"owner"}`)
	f.Add(`[{"kind":"annotation","name":"annotation","reason":"\u202e"}]`)
	f.Fuzz(func(t *testing.T, raw string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{RequestersAnnotation: raw}}}
		list, err := ParseRequesters(n)
		if err != nil {
			return
		}
		for _, r := range list {
			_ = r.String()
		}
		_ = Requests{Owners: list}.answeredByList(list)
	})
}
