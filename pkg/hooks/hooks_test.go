package hooks

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		phase       Phase
		want        string // Names()
		problems    int
		empty       bool
	}{
		{name: "none", annotations: map[string]string{"node-agent.io/maintenance": "x"}, phase: PreDrain, empty: true},
		{name: "other phase only", annotations: map[string]string{PostDrain.Prefix() + "backup": "backup-operator"}, phase: PreDrain, empty: true},
		{name: "look-alike prefix", annotations: map[string]string{"x.pre-drain.hook.node-agent.io/a": "me", "pre-drain.hook.node-agent.io.evil/a": "me"}, phase: PreDrain, empty: true},
		{name: "sorted by name", annotations: map[string]string{PreDrain.Prefix() + "storage": "ceph-operator", PreDrain.Prefix() + "backup": "velero"},
			phase: PreDrain, want: "backup (velero); storage (ceph-operator)"},
		{name: "empty value is malformed and holds", annotations: map[string]string{PreDrain.Prefix() + "a": "  "}, phase: PreDrain, want: "a", problems: 1},
		{name: "no name is malformed and holds", annotations: map[string]string{PreDrain.Prefix(): "me"}, phase: PreDrain, want: " (me)", problems: 1},
		{name: "key that is not a qualified name", annotations: map[string]string{PreDrain.Prefix() + "a b": "me"}, phase: PreDrain, want: "a b (me)", problems: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Parse(tc.annotations, tc.phase)
			if s.Empty() != tc.empty {
				t.Fatalf("Empty() = %v, want %v (%+v)", s.Empty(), tc.empty, s)
			}
			if got := s.Names(); got != tc.want {
				t.Errorf("Names() = %q, want %q", got, tc.want)
			}
			if got := len(s.Problems()); got != tc.problems {
				t.Errorf("problems %q, want %d", s.Problems(), tc.problems)
			}
		})
	}
}

func TestParseValuePrintableAndCut(t *testing.T) {
	s := Parse(map[string]string{PostDrain.Prefix() + "a": "bad\x1bvalue\n" + strings.Repeat("x", 300)}, PostDrain)
	if len(s.Hooks) != 1 {
		t.Fatalf("%+v, want one hook", s)
	}
	o := s.Hooks[0].Owner
	if !strings.HasPrefix(o, `bad\x1bvalue\n`) || len(o) > MaxOwner || strings.ContainsAny(o, "\x1b\n") {
		t.Errorf("owner %q (%d bytes), want it printable and at most %d bytes", o, len(o), MaxOwner)
	}
}

func TestParseBoundsTheCount(t *testing.T) {
	a := map[string]string{}
	for i := range MaxPerPhase + 5 {
		a[fmt.Sprintf("%sh%02d", PreDrain.Prefix(), i)] = "owner"
	}
	s := Parse(a, PreDrain)
	if len(s.Hooks) != MaxPerPhase || s.More != 5 {
		t.Fatalf("%d hooks named and %d more, want %d and 5", len(s.Hooks), s.More, MaxPerPhase)
	}
	if !strings.HasSuffix(s.Names(), "and 5 more (at most 16 are named)") {
		t.Errorf("Names() = %q, want the count of the rest", s.Names())
	}
	h := HoldOf(a, PreDrain, time.Unix(0, 0), time.Unix(10, 0), time.Hour)
	if !h.Holds() {
		t.Error("more hooks than are named do not hold; want them to hold")
	}
}

func TestHoldOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := map[string]string{PostDrain.Prefix() + "firmware": "fw-controller"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		since, now  time.Time
		bound       time.Duration
		holds       bool
		passed      bool
		msg         string
	}{
		{name: "none holds nothing", annotations: nil, since: t0, now: t0.Add(2 * time.Hour), bound: time.Hour, msg: ""},
		{name: "within the bound", annotations: a, since: t0, now: t0.Add(time.Hour - time.Second), bound: time.Hour, holds: true,
			msg: "waiting for post-drain hooks: firmware (fw-controller); each is let go when its annotation post-drain.hook.node-agent.io/<name> is removed, at most until 2026-01-01T01:00:00Z (maintenance.hookBound)"},
		{name: "at the bound", annotations: a, since: t0, now: t0.Add(time.Hour), bound: time.Hour, passed: true,
			msg: "post-drain hooks firmware (fw-controller) passed over: they held since 2026-01-01T00:00:00Z, past maintenance.hookBound (1h0m0s); the maintenance goes on, the annotations stay until their owners remove them"},
		{name: "a clock set back does not stretch it", annotations: a, since: t0.Add(time.Hour), now: t0, bound: time.Hour, holds: true,
			msg: "waiting for post-drain hooks: firmware (fw-controller); each is let go when its annotation post-drain.hook.node-agent.io/<name> is removed, at most until 2026-01-01T01:00:00Z (maintenance.hookBound)"},
		{name: "no bound holds", annotations: a, since: t0, now: t0.Add(1000 * time.Hour), bound: 0, holds: true,
			msg: "waiting for post-drain hooks: firmware (fw-controller); each is let go when its annotation post-drain.hook.node-agent.io/<name> is removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := HoldOf(tc.annotations, PostDrain, tc.since, tc.now, tc.bound)
			if h.Holds() != tc.holds || h.Passed != tc.passed {
				t.Errorf("holds %v passed %v, want %v %v", h.Holds(), h.Passed, tc.holds, tc.passed)
			}
			if got := h.Message(); got != tc.msg {
				t.Errorf("message\n%s\nwant\n%s", got, tc.msg)
			}
		})
	}
}

// FuzzParse: any annotations parse without panic into a bounded, printable
// set that holds whenever a key has the phase's prefix.
func FuzzParse(f *testing.F) {
	f.Add("backup", "velero", "storage", "")
	f.Add("", "\x00\xff", "a b", strings.Repeat("é", 200))
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		a := map[string]string{PreDrain.Prefix() + n1: v1, PreDrain.Prefix() + n2: v2, "other/" + n1: v1}
		s := Parse(a, PreDrain)
		if s.Empty() || len(s.Hooks)+s.More != len(map[string]bool{n1: true, n2: true}) {
			t.Fatalf("%+v: want every prefixed key", s)
		}
		for _, h := range s.Hooks {
			if len(h.Owner) > MaxOwner || len(h.Name) > maxName || !utf8.ValidString(h.Owner) || !utf8.ValidString(h.Name) {
				t.Fatalf("hook %+v is not bounded or not printable", h)
			}
		}
	})
}
