package reboot

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-agent/node-agent/pkg/reasontext"
)

// The values of node-agent.io/reboot the controller refuses, and what a
// refusal does (and does not do) on the Node.

func TestParseRequest(t *testing.T) {
	for _, tt := range []struct {
		value   string
		want    string
		refused bool
	}{
		{value: "", want: ""},
		{value: "kernel 6.12", want: "kernel 6.12"},
		{value: "true", want: "true"},
		{value: "false", refused: true},
		{value: " False ", refused: true},
		{value: "no", refused: true},
	} {
		n := &corev1.Node{}
		n.Annotations = map[string]string{RequestAnnotation: tt.value}
		got, err := ParseRequest(n)
		var re *reasontext.RefusedError
		if refused := errors.As(err, &re); refused != tt.refused || got != tt.want || (err != nil && !refused) {
			t.Errorf("ParseRequest(%q) = %q, %v; want %q, refused %t", tt.value, got, err, tt.want, tt.refused)
		}
	}
}

// refusals takes the Events recorded so far and returns the refusals.
func (b *bed) refusals() []string {
	var out []string
	for {
		select {
		case e := <-b.events.Events:
			if strings.HasPrefix(e, "Warning RebootRequestRefused") {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

func (b *bed) request(value *string) {
	b.update(func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		if value == nil {
			delete(n.Annotations, RequestAnnotation)
			return
		}
		n.Annotations[RequestAnnotation] = *value
	})
}

func ptrTo[T any](v T) *T { return &v }

// node-agent.io/reboot=false asks for no reboot: nothing is drained or
// rebooted, no slot is asked for, and one Warning Event a value says what
// is accepted.
func TestControllerRefusesFalse(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.request(ptrTo("false"))
	b.expect(b.step(), NotNeeded, "NotNeeded", PhaseIdle)
	b.expect(b.step(), NotNeeded, "NotNeeded", PhaseIdle)
	if b.slots.acquires != 0 || b.reboots.calls != 0 {
		t.Fatalf("acquires %d reboots %d on a refused request", b.slots.acquires, b.reboots.calls)
	}
	got := b.refusals()
	if len(got) != 1 {
		t.Fatalf("refusal Events %q; want one for the value, not one a step", got)
	}
	for _, want := range []string{`node-agent.io/reboot="false" is refused`, "its value is the reason", "no reboot starts"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("Event %q lacks %q", got[0], want)
		}
	}
	if _, ok := b.node().Annotations[RequestAnnotation]; !ok {
		t.Error("the refused request was removed: it is the admin's, and stays until they change it")
	}

	b.request(ptrTo("OFF"))
	b.step()
	if got := b.refusals(); len(got) != 1 || !strings.Contains(got[0], `"OFF"`) {
		t.Fatalf("refusal Events after another value %q; want one naming it", got)
	}

	// A reason asks.
	b.request(ptrTo("kernel 6.12"))
	b.step()
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
}

// A refused value over a request whose reboot is under way does not call it
// off: "false" is not how a request is withdrawn. Removing it is.
func TestControllerRefusedValueDoesNotCallTheRebootOff(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.request(ptrTo("kernel 6.12"))
	b.step()
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
	b.m = Maintenance{Active: true}

	b.request(ptrTo("false"))
	rec := b.step()
	b.expect(rec, Draining, "Draining", PhaseDraining)
	if !rec.Drain || b.slots.slot.released {
		t.Fatalf("drain %v released %v: the reboot under way was called off on a refused value", rec.Drain, b.slots.slot.released)
	}
	if got := b.refusals(); len(got) != 1 || !strings.Contains(got[0], "the reboot under way goes on") {
		t.Fatalf("refusal Events %q; want one that says the reboot goes on", got)
	}

	b.request(nil)
	b.expect(b.step(), NotNeeded, "NotNeeded", PhaseIdle)
}

// A reason of 200 KiB is cut where the controller repeats it: the record,
// the condition and the Events.
func TestControllerCutsALongRequest(t *testing.T) {
	// Outside the window, the request waits and nothing moves.
	b := newBed(t, mustWindow(t, []string{"sat"}, "02:00", "04:00", "UTC"))
	long := strings.Repeat("k", 200<<10)
	b.request(&long)
	rec := b.step()
	b.expect(rec, Pending, string(OutsideWindow), PhaseIdle)
	if len(rec.Message) > reasontext.MaxMessage || !strings.Contains(rec.Message, reasontext.Marker) {
		t.Errorf("record message of %d bytes; want at most %d, with the marker", len(rec.Message), reasontext.MaxMessage)
	}
	n := b.node()
	total := 0
	for k, v := range n.Annotations {
		total += len(k) + len(v)
	}
	if total > 256<<10 {
		t.Errorf("the Node's annotations hold %d bytes, past the apiserver's 256 KiB", total)
	}
	if cond := condition(n); cond == nil || len(cond.Message) > reasontext.MaxMessage {
		t.Errorf("condition message not cut")
	}
	for events := true; events; {
		select {
		case e := <-b.events.Events:
			if len(e) > reasontext.MaxMessage+100 {
				t.Errorf("Event of %d bytes", len(e))
			}
		default:
			events = false
		}
	}

}

// A message longer than its bound (here, alert names as long as whoever
// answers at reboot.prometheusURL sends) is cut in the record and the
// condition, and a second step with nothing new writes nothing: the cut
// message equals what the Node holds.
func TestControllerCutsALongMessageOnce(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	var alerts []Blocker
	for _, c := range "abcdef" {
		alerts = append(alerts, Blocker{Kind: BlockerAlert, Name: strings.Repeat(string(c), 2000)})
	}
	b.opts.Blockers = []BlockerSource{&staticBlockers{bs: alerts}}
	b.restart()
	b.setSentinel(true)
	rec := b.step()
	b.expect(rec, Pending, string(BlockedByAlerts), PhaseIdle)
	if len(rec.Message) > reasontext.MaxMessage || !strings.HasSuffix(rec.Message, reasontext.Marker) {
		t.Errorf("record message of %d bytes; want it cut to %d", len(rec.Message), reasontext.MaxMessage)
	}
	b.cs.ClearActions()
	b.step()
	for _, a := range b.cs.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("a step with nothing new wrote the Node: %s %s", a.GetVerb(), a.GetSubresource())
		}
	}
}

// The record's texts are cut, whatever set them.
func TestRecordEncodeCutsTexts(t *testing.T) {
	long := strings.Repeat("é", 10000)
	r := &Record{State: Pending, Reason: string(WaitingForSlot), Message: long, FailedRequest: long}
	got, err := DecodeRecord(r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Message) > reasontext.MaxMessage || len(got.FailedRequest) > reasontext.MaxReason ||
		!strings.HasSuffix(got.Message, reasontext.Marker) || !strings.HasSuffix(got.FailedRequest, reasontext.Marker) {
		t.Errorf("message %d bytes, failed request %d bytes: want them cut", len(got.Message), len(got.FailedRequest))
	}
	if r.Message != long {
		t.Error("Encode changed the record it encoded")
	}
}

// FuzzDecodeRecord: the record is on the Node, where whoever may patch it
// can write it. Decoding must never panic, and what decodes must encode and
// decode again to the same value, its texts within their bounds.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(`{"state":"NotNeeded","reason":"NotNeeded"}`)
	f.Add(`{"state":"Pending","reason":"WaitingForDrainSlot","message":"m","since":"2026-11-24T03:00:00Z","phase":"WaitingForSlot"}`)
	f.Add(`{"state":"Rebooting","reason":"Rebooting","phase":"RebootRequested","bootID":"b","requestedAt":"2026-11-24T03:00:00Z","slot":"s","drain":true}`)
	f.Add(`{"state":"Failed","reason":"Failed","failedAt":"2026-11-24T03:00:00Z","drainFailures":2,"failedRequest":"x"}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, raw string) {
		rec, err := DecodeRecord(raw)
		if err != nil {
			return
		}
		enc := rec.Encode()
		again, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("re-decoding %q: %v", enc, err)
		}
		if again.Encode() != enc {
			t.Fatalf("round trip changed %q to %q", enc, again.Encode())
		}
		if len(again.Message) > reasontext.MaxMessage || len(again.FailedRequest) > reasontext.MaxReason {
			t.Fatalf("encoded texts past their bounds: message %d, failedRequest %d bytes", len(again.Message), len(again.FailedRequest))
		}
	})
}
