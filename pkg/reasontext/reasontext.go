// Package reasontext owns the free texts that pass between people and the
// agent through a Node:
//
//   - the values of the request annotations node-agent.io/maintenance and
//     node-agent.io/reboot, whose value is the request's reason: which values
//     ask for something, and which are refused because they read as "no"
//     (ParseRequest);
//   - the length of every reason and message the agent writes back (its
//     status and reboot records, conditions and Events), cut with a visible
//     marker (Cut), so that no text someone else wrote can push the Node
//     past the apiserver's limit of 256 KiB for all its annotations;
//   - that every such text is printable (Printable, ForNode) before it
//     reaches a Node or an Event, and before the CLI prints it
//     (ForTerminal): whoever wrote it first, a tenant or an outside service,
//     cannot drive an admin's terminal. Recorder applies it to every Event
//     the agent and the coordinator record.
//
// pkg/selfdrain and pkg/reboot apply the one rule here, and pkg/maintenancecli
// shows it to the people who write the annotations, so that the CLI and the
// agent never disagree about what a value asks for.
package reasontext

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxReason is the most bytes of a request's reason (an annotation's value,
// a NodeMaintenance object's spec.reason) the agent keeps and repeats: in its
// records on the Node, in conditions and in Events. A longer one is cut to
// this length, Marker included. A KiB is the limit kube-apiserver sets on an
// Event's note (events.k8s.io/v1), and more than anyone writes as a reason.
const MaxReason = 1024

// MaxMessage is the most bytes of a message the agent composes (a
// condition's message, lastError, an Event's message): one may quote a
// reason whole, with what the agent adds around it. Four of them and a
// reason stay far below the Node's 256 KiB for all its annotations.
const MaxMessage = 4096

// Marker ends a text that was cut, so that a reader sees the cut.
const Marker = "…[cut]"

// Cut returns s when it is at most limit bytes long, and else the longest
// prefix of s that ends on a whole UTF-8 character and leaves room for
// Marker, followed by Marker: at most limit bytes in all. Cut of a text it
// returned returns it unchanged. A limit too small for Marker returns the
// prefix alone.
func Cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	marker := Marker
	if limit < len(marker) {
		marker = ""
	}
	keep := max(0, limit-len(marker))
	// Step back to the start of a character: utf8.RuneStart is true for
	// an ASCII byte and for the first byte of a multi-byte one.
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker
}

// refused are the values that a request annotation refuses, compared in
// lower case after trimming: the spellings of false in Go's
// strconv.ParseBool (0, f, false) and in YAML 1.1 (n, no, off, false), which
// tools and people carry over from boolean flags and values files, and the
// spellings of nothing (null and ~ in YAML, nil, none). Someone who writes
// one of them most likely means "do not", and the reason-valued annotations
// would otherwise read it as a request.
var refused = []string{"0", "f", "false", "n", "no", "off", "null", "~", "nil", "none"}

// Accepted says, for a message to people, what a request annotation
// accepts.
const Accepted = "its value is the reason, any text such as \"BIOS update\" (cut to 1024 bytes); " +
	"values that read as no or nothing (0, f, false, n, no, off, null, ~, nil, none, in any case) are refused; " +
	"remove the annotation to withdraw a request"

// RefusedError says that a request annotation holds a value that is
// refused. The value is as it was written, untrimmed.
type RefusedError struct {
	Annotation string
	Value      string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s=%q is refused: %s", e.Annotation, Cut(e.Value, 64), Accepted)
}

// ParseRequest reads the value raw of the request annotation annotation. It
// returns the reason, trimmed and cut to MaxReason, and nil; "" and nil for
// a blank value, which asks for nothing (the apiserver keeps an annotation
// set to ""); or "" and a *RefusedError for a value that reads as no or
// nothing (refused).
func ParseRequest(annotation, raw string) (string, error) {
	v := strings.TrimSpace(raw)
	if v == "" {
		return "", nil
	}
	if slices.Contains(refused, strings.ToLower(v)) {
		return "", &RefusedError{Annotation: annotation, Value: raw}
	}
	return Cut(v, MaxReason), nil
}
