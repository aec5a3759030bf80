package reasontext

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestPrintableAndForTerminal(t *testing.T) {
	tests := []struct{ name, in, node, terminal string }{
		{"plain", "evicting vm/a", "evicting vm/a", "evicting vm/a"},
		{"letters of every script", "Lüfter 交換 τέλος 🙂", "Lüfter 交換 τέλος 🙂", "Lüfter 交換 τέλος 🙂"},
		{"line feed and tab", "a\nb\tc\rd", `a\nb\tc\rd`, `a\nb\tc\rd`},
		{"ANSI clear screen", "\x1b[2J\x1b[31mred", `\x1b[2J\x1b[31mred`, `\x1b[2J\x1b[31mred`},
		{"OSC sets the title", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`, `\x1b]0;pwned\x07`},
		{"NUL, DEL", "\x00\x7f", `\x00\x7f`, `\x00\x7f`},
		{"C1 CSI", "\u009b2J", `\u009b2J`, `\u009b2J`},
		{"bidi override", "abc\u202edcba", `abc\u202edcba`, `abc\u202edcba`},
		{"zero width", "a\u200bb", `a\u200bb`, `a\u200bb`},
		{"beyond the BMP", "a\U000e0001", `a\U000e0001`, `a\U000e0001`},
		{"not UTF-8", "a\xff\x9bb", `a\xff\x9bb`, `a\xff\x9bb`},
		{"a backslash", `up{job=~"a\\d"}`, `up{job=~"a\\d"}`, `up{job=~"a\\\\d"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Printable(tt.in); got != tt.node {
				t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.node)
			}
			if got := ForTerminal(tt.in); got != tt.terminal {
				t.Errorf("ForTerminal(%q) = %q, want %q", tt.in, got, tt.terminal)
			}
		})
	}
}

func TestForNodeCutsAfterEscaping(t *testing.T) {
	in := strings.Repeat("\x1b", 100)
	got := ForNode(in, 64)
	if len(got) > 64 || !strings.HasSuffix(got, Marker) || strings.ContainsRune(got, '\x1b') {
		t.Errorf("ForNode = %q (%d bytes)", got, len(got))
	}
}

// checkPrintable is the property both functions keep.
func checkPrintable(t *testing.T, in, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%q -> %q: not UTF-8", in, out)
	}
	for _, r := range out {
		if !unicode.IsPrint(r) {
			t.Fatalf("%q -> %q: holds %U", in, out, r)
		}
	}
}

func FuzzForNode(f *testing.F) {
	for _, s := range []string{"", "ok", "\x1b]0;x\x07", "a\u202eb", "\xff", `a\b`, strings.Repeat("é", 600)} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit < 0 || limit > 1<<16 {
			return
		}
		p := Printable(s)
		checkPrintable(t, s, p)
		if Printable(p) != p {
			t.Fatalf("Printable is not idempotent on %q: %q then %q", s, p, Printable(p))
		}
		if (p == s) != printableAlready(s, false) {
			t.Fatalf("Printable(%q) = %q disagrees with printableAlready", s, p)
		}
		n := ForNode(s, limit)
		checkPrintable(t, s, n)
		if len(n) > limit {
			t.Fatalf("ForNode(%q, %d) is %d bytes", s, limit, len(n))
		}
		if ForNode(n, limit) != n {
			t.Fatalf("ForNode is not idempotent on %q", s)
		}
		checkPrintable(t, s, ForTerminal(s))
	})
}
