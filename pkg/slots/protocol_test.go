package slots

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecodeRequest(t *testing.T) {
	for _, tt := range []struct {
		raw, err string
	}{
		{raw: `{"purpose":"maintenance","id":"a","requestedAt":"2026-11-26T10:00:00Z"}`},
		{raw: `{"purpose":"reboot","id":"a","requestedAt":"2026-11-26T10:00:00Z","heartbeat":3,"holdSeconds":1800}`},
		{raw: `{"purpose":"drain","id":"a","requestedAt":"2026-11-26T10:00:00Z"}`, err: `purpose "drain" is neither`},
		{raw: `{"purpose":"reboot","requestedAt":"2026-11-26T10:00:00Z"}`, err: "id must be 1 to 64 characters"},
		{raw: `{"purpose":"reboot","id":"a","requestedAt":"2026-11-26T10:00:00Z","holdSeconds":-1}`, err: "negative"},
		{raw: `{"purpose":"reboot","id":"a","requestedAt":"2026-11-26T10:00:00Z","slot":"x"}`, err: `unknown field "slot"`},
		{raw: `{"purpose":"reboot","id":"a"} {}`, err: "trailing data"},
		{raw: `reboot please`, err: "not valid JSON"},
		{raw: `{"purpose":"reboot","id":"` + strings.Repeat("x", 5000) + `"}`, err: "longer than 4096"},
	} {
		r, err := DecodeRequest(tt.raw)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.raw, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%.80s: %v, want an error with %q", tt.raw, err, tt.err)
		case tt.err == "" && r.Encode() != tt.raw:
			t.Errorf("round trip %s -> %s", tt.raw, r.Encode())
		}
	}
}

func TestDecodeGrant(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for _, g := range []*Grant{
		{ID: "a", Purpose: PurposeMaintenance, State: Queued, Reason: "pool default: 1 of 1 nodes drain", Time: now},
		{ID: "a", Purpose: PurposeReboot, State: Granted, Slot: LeaseName("n1"), Time: now},
		{ID: "a", Purpose: PurposeReboot, State: Revoked, Reason: "silent", Time: now},
	} {
		got, err := DecodeGrant(g.Encode())
		if err != nil || got.Encode() != g.Encode() {
			t.Errorf("round trip %s: %+v, %v", g.Encode(), got, err)
		}
	}
	if _, err := DecodeGrant(`{"id":"a","purpose":"reboot","state":"Granted","time":"2026-11-26T10:00:00Z"}`); err == nil || !strings.Contains(err.Error(), "names no slot") {
		t.Errorf("Granted without a slot: %v", err)
	}
	if _, err := DecodeGrant(`{"id":"a","purpose":"reboot","state":"Held","time":"2026-11-26T10:00:00Z"}`); err == nil || !strings.Contains(err.Error(), `unknown state "Held"`) {
		t.Errorf("unknown state: %v", err)
	}
}

func TestParseFromNode(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	if r, err := ParseRequest(n); r != nil || err != nil {
		t.Errorf("no annotation: %v, %v", r, err)
	}
	n.Annotations[RequestAnnotation] = "{"
	if _, err := ParseRequest(n); err == nil || !strings.Contains(err.Error(), RequestAnnotation) {
		t.Errorf("malformed request: %v, want an error naming the annotation", err)
	}
	n.Annotations[GrantAnnotation] = "{"
	if _, err := ParseGrant(n); err == nil || !strings.Contains(err.Error(), GrantAnnotation) {
		t.Errorf("malformed grant: %v, want an error naming the annotation", err)
	}
}

// FuzzDecodeRequest: whatever an agent's token writes, decoding never
// panics, and what decodes is valid and encodes to a value that decodes the
// same.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(`{"purpose":"maintenance","id":"a","requestedAt":"2026-11-26T10:00:00Z"}`)
	f.Add(`{"purpose":"reboot","id":"a","requestedAt":"9999-12-31T23:59:59Z","heartbeat":-5,"holdSeconds":2147483648}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := DecodeRequest(raw)
		if err != nil {
			return
		}
		again, err := DecodeRequest(r.Encode())
		if err != nil || again.Encode() != r.Encode() {
			t.Fatalf("%q decodes to %+v, which does not round-trip: %v", raw, r, err)
		}
	})
}

// FuzzDecodeGrant: likewise for what lands in the grant annotation.
func FuzzDecodeGrant(f *testing.F) {
	f.Add(`{"id":"a","purpose":"reboot","state":"Granted","slot":"node-agent-drain-slot-n1","time":"2026-11-26T10:00:00Z"}`)
	f.Add(`{"state":"Queued"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		g, err := DecodeGrant(raw)
		if err != nil {
			return
		}
		if g.State == Granted && g.Slot == "" {
			t.Fatalf("%q: Granted without a slot", raw)
		}
	})
}
