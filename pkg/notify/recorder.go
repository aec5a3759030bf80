package notify

import (
	"fmt"
	"time"

	"github.com/node-agent/node-agent/pkg/events"
	"k8s.io/apimachinery/pkg/runtime"
)

// Recorder returns inner, which also hands the Events whose reasons name a
// notification event (EventOfReason) to n, for node. Every Event is
// recorded by inner first, as before; the notification only follows it.
func Recorder(inner events.Recorder, n *Notifier, node string) events.Recorder {
	if n == nil || len(n.hooks) == 0 {
		return inner
	}
	return &recorder{inner: inner, n: n, node: node, now: time.Now}
}

type recorder struct {
	inner events.Recorder
	n     *Notifier
	node  string
	now   func() time.Time
}

func (r *recorder) notify(eventtype, reason, message string) {
	if e, ok := EventOfReason(reason); ok {
		r.n.Notify(Notification{Event: e, Node: r.node, Reason: reason, Type: eventtype, Message: message, Time: r.now().UTC()})
	}
}

func (r *recorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.inner.Event(object, eventtype, reason, message)
	r.notify(eventtype, reason, message)
}

func (r *recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.inner.Eventf(object, eventtype, reason, messageFmt, args...)
	r.notify(eventtype, reason, fmt.Sprintf(messageFmt, args...))
}
