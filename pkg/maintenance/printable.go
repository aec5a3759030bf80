package maintenance

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable returns s as the CLI may print it: every text it prints that
// comes from the cluster (a reason, lastError, a condition's message, an
// alert or pod name, a NodeMaintenance object's fields) goes through it,
// because whoever may write those can write anything. Left as they are, a
// line feed or a tab draws a table row or column of the writer's choosing
// (a forged row for another node), and an escape sequence moves the cursor,
// rewrites the screen or sets the terminal's title.
//
// So each character that unicode.IsPrint rejects is shown as an escape in
// Go's syntax: \n, \r and \t; \xNN for the other C0 controls, DEL and every
// byte that is not UTF-8; \uNNNN (or \UNNNNNNNN) for the rest, such as the
// C1 controls (\u009b is CSI), the bidi overrides and isolates (\u202e),
// zero-width characters and line separators. A backslash is shown as \\,
// so that what is shown reads one way only. Letters of every script pass
// as they are.
func printable(s string) string {
	if isPrintable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
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

// isPrintable says that printable would return s as it is.
func isPrintable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == '\\' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
