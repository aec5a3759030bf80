// Package events owns how node-agent writes Kubernetes Events: the Recorder
// every component records through, and the Writer that sends what they
// record to the apiserver.
//
// The Writer does what client-go's tools/record broadcaster did for
// node-agent, and no more: it queues without blocking the caller, counts a
// repeat of the same Event into the Event already written (count and
// lastTimestamp), limits how many Events one object gets, retries a write
// the apiserver did not answer, and flushes what is queued when it stops.
// It leaves out what node-agent never used (annotations, similar-message
// aggregation), and with it strategic merge patches, which linked the
// OpenAPI models into every agent.
package events

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// Recorder records Events about an object. Every Event node-agent writes
// is about a Node, given as kube.NodeReference. client-go's
// record.FakeRecorder satisfies it, for tests.
type Recorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// Discard records nothing: the default of components built without a
// Recorder.
type Discard struct{}

// Event implements Recorder.
func (Discard) Event(runtime.Object, string, string, string) {}

// Eventf implements Recorder.
func (Discard) Eventf(runtime.Object, string, string, string, ...any) {}

// Func is a Recorder that hands each Event, formatted, to f.
type Func func(object runtime.Object, eventtype, reason, message string)

// Event implements Recorder.
func (f Func) Event(object runtime.Object, eventtype, reason, message string) {
	f(object, eventtype, reason, message)
}

// Eventf implements Recorder.
func (f Func) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	f(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}
