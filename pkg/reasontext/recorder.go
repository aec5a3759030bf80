package reasontext

import (
	"fmt"

	"github.com/node-agent/node-agent/pkg/events"
	"k8s.io/apimachinery/pkg/runtime"
)

// Recorder returns an EventRecorder that records through inner every Event
// message made printable and cut to MaxMessage (ForNode). The agent and the
// coordinator record all their Events through it, so no text in an Event,
// whoever wrote it first, reaches an admin's terminal raw.
func Recorder(inner events.Recorder) events.Recorder { return printableRecorder{inner} }

type printableRecorder struct{ inner events.Recorder }

func (r printableRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.inner.Event(object, eventtype, reason, ForNode(message, MaxMessage))
}

func (r printableRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.inner.Event(object, eventtype, reason, ForNode(fmt.Sprintf(messageFmt, args...), MaxMessage))
}
