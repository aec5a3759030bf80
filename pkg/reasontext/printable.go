package reasontext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Texts that reach a Node or an Event come, in part, from whoever may write
// a request, a pod's name, a VMI's status or an outside service's answer
// (Prometheus sample values and alert names, Alertmanager's and webhook
// receivers' errors): they can hold anything. kubectl describe node prints
// them to an admin's terminal, where a line feed or a tab draws a row of the
// writer's choosing and an escape sequence moves the cursor, rewrites the
// screen or sets the terminal's title. So one rule makes them printable,
// here, and both the agent (ForNode, before it writes) and the CLI
// (ForTerminal, before it prints) apply it.
//
// Each character that unicode.IsPrint rejects is shown as an escape in Go's
// syntax: \n, \r and \t; \xNN for the other C0 controls, DEL and every byte
// that is not UTF-8; \uNNNN (or \UNNNNNNNN) for the rest, such as the C1
// controls (\u009b is CSI), the bidi overrides and isolates (\u202e),
// zero-width characters and line separators. Letters of every script pass
// as they are.

// Printable returns s with every character unicode.IsPrint rejects escaped.
// Its result holds only printable characters, so Printable of it is itself.
// A backslash stays as it is: a text the agent writes may quote a query or a
// Go-quoted value, and doubling it at every write would grow it.
func Printable(s string) string { return escape(s, false) }

// ForTerminal is Printable that also shows a backslash as \\, so that what
// the CLI prints reads one way only: a backslash sequence it shows is an
// escape of its own, never a writer's text posing as one.
func ForTerminal(s string) string { return escape(s, true) }

// ForNode is what the agent writes of a text onto a Node (an annotation, a
// condition's message) or into an Event: Printable, then Cut to limit.
func ForNode(s string, limit int) string { return Cut(Printable(s), limit) }

func escape(s string, backslash bool) string {
	if printableAlready(s, backslash) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && backslash:
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// printableAlready says that escape would return s as it is.
func printableAlready(s string, backslash bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if (backslash && r == '\\') || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
