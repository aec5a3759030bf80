package reasontext

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

const key = "node-agent.io/maintenance"

func TestParseRequest(t *testing.T) {
	long := strings.Repeat("a", 128<<10)
	tests := []struct {
		raw     string
		want    string
		refused bool
	}{
		{raw: "", want: ""},
		{raw: "   ", want: ""},
		{raw: "BIOS update", want: "BIOS update"},
		{raw: "  kernel 6.12\n", want: "kernel 6.12"},
		// A reason that happens to be a yes is a reason.
		{raw: "true", want: "true"},
		{raw: "yes", want: "yes"},
		{raw: "1", want: "1"},
		{raw: "on", want: "on"},
		// Words that only start like a refused value are reasons.
		{raw: "no network on eth1", want: "no network on eth1"},
		{raw: "offline firmware update", want: "offline firmware update"},
		{raw: "false alarm, replace fan", want: "false alarm, replace fan"},
		{raw: "false", refused: true},
		{raw: "False", refused: true},
		{raw: "FALSE", refused: true},
		{raw: " no ", refused: true},
		{raw: "NO", refused: true},
		{raw: "n", refused: true},
		{raw: "f", refused: true},
		{raw: "0", refused: true},
		{raw: "off", refused: true},
		{raw: "Off", refused: true},
		{raw: "null", refused: true},
		{raw: "~", refused: true},
		{raw: "nil", refused: true},
		{raw: "None", refused: true},
		{raw: long, want: long[:MaxReason-len(Marker)] + Marker},
	}
	for _, tt := range tests {
		name := tt.raw
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			got, err := ParseRequest(key, tt.raw)
			var re *RefusedError
			if tt.refused {
				if !errors.As(err, &re) || got != "" {
					t.Fatalf("ParseRequest(%q) = %q, %v; want it refused", tt.raw, got, err)
				}
				if re.Value != tt.raw || re.Annotation != key {
					t.Errorf("error %+v does not carry the value and the annotation", re)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseRequest(%q) = %q, %v; want %q", tt.raw, cut40(got), err, cut40(tt.want))
			}
		})
	}
}

// The refusal says what is refused and what is accepted, on one line.
func TestRefusedErrorSaysWhatIsAccepted(t *testing.T) {
	_, err := ParseRequest(key, "false")
	msg := err.Error()
	for _, want := range []string{`node-agent.io/maintenance="false" is refused`, "its value is the reason", "remove the annotation", "off"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("message spans lines: %q", msg)
	}
	// Accepted is written out: it must name the length and every value
	// refused.
	if !strings.Contains(Accepted, "cut to "+strconv.Itoa(MaxReason)+" bytes") {
		t.Errorf("Accepted %q does not give MaxReason", Accepted)
	}
	for _, v := range refused {
		if !strings.Contains(Accepted, v+", ") {
			t.Errorf("Accepted %q does not list %q", Accepted, v)
		}
	}
	_, err = ParseRequest(key, "off"+strings.Repeat(" ", 10000))
	if len(err.Error()) > 1000 {
		t.Errorf("a refused value padded with spaces gives a message of %d bytes", len(err.Error()))
	}
}

func TestCut(t *testing.T) {
	tests := []struct {
		s     string
		limit int
		want  string
	}{
		{"", 10, ""},
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "el" + Marker},
		// "ä" is two bytes: the cut never splits it.
		{"ääääääää", 11, "ä" + Marker},
		{"ääääääää", 12, "ää" + Marker},
		// Too short a limit for the marker: the prefix alone.
		{"abcdef", 3, "abc"},
		{"äbc", 1, ""},
		{"abc", 0, ""},
		{"abc", -1, ""},
	}
	for _, tt := range tests {
		if got := Cut(tt.s, tt.limit); got != tt.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tt.s, tt.limit, got, tt.want)
		}
	}
}

func cut40(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// FuzzParseRequest: the request annotations are written by whoever may
// patch the Node. Whatever the value, a reason comes back whole-character,
// trimmed and at most MaxReason bytes, or a refusal with no reason; the
// same value parsed again gives the same answer.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"", "BIOS update", "false", " Off ", "~", "0", "no network", strings.Repeat("ä", 600), "\x1b[2J", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := ParseRequest(key, raw)
		if err != nil {
			var re *RefusedError
			if !errors.As(err, &re) || got != "" {
				t.Fatalf("ParseRequest(%q) = %q, %v: an error other than a refusal, or a reason with it", raw, got, err)
			}
			return
		}
		if len(got) > MaxReason {
			t.Fatalf("reason of %d bytes, over MaxReason", len(got))
		}
		if got != strings.TrimSpace(got) && !strings.HasSuffix(got, Marker) {
			t.Fatalf("reason %q is not trimmed", got)
		}
		if utf8.ValidString(raw) && !utf8.ValidString(got) {
			t.Fatalf("reason %q of valid UTF-8 %q is not", got, raw)
		}
		if (strings.TrimSpace(raw) == "") != (got == "") {
			t.Fatalf("ParseRequest(%q) = %q: blank and empty disagree", raw, got)
		}
		again, err := ParseRequest(key, got)
		if got != "" && (err != nil || again != got) {
			t.Fatalf("reason %q parsed again gives %q, %v", got, again, err)
		}
	})
}

// FuzzCut: a cut text is never longer than the limit, keeps valid UTF-8
// valid, starts with a prefix of the text, and is cut no further when cut
// again.
func FuzzCut(f *testing.F) {
	f.Add("hello, world", 8)
	f.Add("ääää", 5)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit %= 4 * MaxMessage
		got := Cut(s, limit)
		if len(got) > max(limit, 0) {
			t.Fatalf("Cut(%q, %d) = %q: %d bytes", s, limit, got, len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Cut(%q, %d) = %q: not UTF-8", s, limit, got)
		}
		if !strings.HasPrefix(s, strings.TrimSuffix(got, Marker)) {
			t.Fatalf("Cut(%q, %d) = %q: not a prefix", s, limit, got)
		}
		if Cut(got, limit) != got {
			t.Fatalf("Cut(%q, %d) cut again", got, limit)
		}
	})
}
