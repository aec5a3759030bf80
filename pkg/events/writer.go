package events

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/reference"
)

// Sink writes Events into their own namespace; kube.EventInterface is one.
type Sink interface {
	CreateWithEventNamespaceWithContext(ctx context.Context, event *corev1.Event) (*corev1.Event, error)
	PatchWithEventNamespaceWithContext(ctx context.Context, event *corev1.Event, data []byte) (*corev1.Event, error)
}

// Options configure a Writer. Only Sink is required.
type Options struct {
	Sink Sink
	// Scheme names the kind of objects that are not ObjectReferences.
	Scheme *runtime.Scheme
	// Source names the writer in every Event: its component and, for an
	// agent, its node.
	Source corev1.EventSource
	// Burst Events about one object are written at once, and then one per
	// Every: the rest are dropped, with a log line. Defaults: 25 and
	// 5 minutes, client-go's.
	Burst int
	Every time.Duration
	// Queue is how many Events may wait to be written (default 1000);
	// past it, an Event is dropped with a log line rather than block the
	// component recording it.
	Queue int
	// Tries is how many times one write is tried when the apiserver does
	// not answer (default 12), RetryDelay the first wait between tries
	// (default 1 s), doubling to at most 10 s.
	Tries      int
	RetryDelay time.Duration
	// FlushBound is how long Stop waits for the queued Events to be
	// written (default 5 s).
	FlushBound time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
}

// Writer is a Recorder that writes Events to the apiserver from one
// goroutine, between Start and Stop.
type Writer struct {
	o Options

	mu      sync.Mutex
	stopped bool
	queue   chan *corev1.Event
	done    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc

	// Only the writing goroutine uses these.
	series  map[seriesKey]*corev1.Event
	buckets map[objectKey]*bucket
}

// cacheLimit bounds the Events remembered for counting repeats and the
// objects remembered for the rate limit; past it the oldest are forgotten.
const cacheLimit = 4096

// NewWriter returns a Writer; Start it before anything is recorded.
func NewWriter(o Options) *Writer {
	o.Burst = cmp.Or(o.Burst, 25)
	o.Every = cmp.Or(o.Every, 5*time.Minute)
	o.Queue = cmp.Or(o.Queue, 1000)
	o.Tries = cmp.Or(o.Tries, 12)
	o.RetryDelay = cmp.Or(o.RetryDelay, time.Second)
	o.FlushBound = cmp.Or(o.FlushBound, 5*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Writer{
		o: o, queue: make(chan *corev1.Event, o.Queue), done: make(chan struct{}),
		series: map[seriesKey]*corev1.Event{}, buckets: map[objectKey]*bucket{},
	}
}

// Start writes Events until Stop. The writes do not end with ctx: the
// Events a component records as the agent stops (a drain's last) are
// written by Stop.
func (w *Writer) Start(ctx context.Context) {
	w.ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go w.run()
}

// Stop stops taking Events, writes those queued within FlushBound, and
// returns when the writer is done; what is not written by then is
// dropped. An Event recorded after Stop is dropped.
func (w *Writer) Stop() {
	w.mu.Lock()
	if !w.stopped {
		w.stopped = true
		close(w.queue)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
	case <-time.After(w.o.FlushBound):
		w.cancel()
		<-w.done
	}
	w.cancel()
}

// Event implements Recorder.
func (w *Writer) Event(object runtime.Object, eventtype, reason, message string) {
	ref, err := w.reference(object)
	if err != nil {
		w.o.Logger.Error("Event not recorded: no reference to its object", "err", err, "reason", reason, "message", message)
		return
	}
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		w.o.Logger.Error("Event not recorded: its type is neither Normal nor Warning", "type", eventtype, "reason", reason)
		return
	}
	now := metav1.NewTime(w.o.Now())
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(ref.Name, now.Time), Namespace: cmp.Or(ref.Namespace, metav1.NamespaceDefault)},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                eventtype,
		Source:              w.o.Source,
		ReportingController: w.o.Source.Component,
		ReportingInstance:   w.o.Source.Host,
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		w.o.Logger.Warn("Event not recorded: the writer has stopped", "reason", reason, "message", message)
		return
	}
	select {
	case w.queue <- ev:
	default:
		w.o.Logger.Error("Event dropped: too many Events wait to be written", "queue", w.o.Queue, "reason", reason, "message", message)
	}
}

// Eventf implements Recorder.
func (w *Writer) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	w.Event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (w *Writer) reference(object runtime.Object) (*corev1.ObjectReference, error) {
	if ref, ok := object.(*corev1.ObjectReference); ok && ref != nil {
		return ref, nil
	}
	if w.o.Scheme == nil {
		return nil, fmt.Errorf("%T is not an ObjectReference, and the writer has no scheme", object)
	}
	return reference.GetReference(w.o.Scheme, object)
}

func (w *Writer) run() {
	defer close(w.done)
	for ev := range w.queue {
		if w.ctx.Err() != nil {
			continue
		}
		w.write(w.ctx, ev)
	}
}

type objectKey struct{ kind, namespace, name, uid, apiVersion string }

type seriesKey struct {
	object                 objectKey
	eventtype, reason, msg string
}

func keysOf(ev *corev1.Event) (objectKey, seriesKey) {
	o := objectKey{ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, string(ev.InvolvedObject.UID), ev.InvolvedObject.APIVersion}
	return o, seriesKey{o, ev.Type, ev.Reason, ev.Message}
}

type bucket struct {
	tokens float64
	at     time.Time
}

// allow takes a token from the object's bucket: Burst at first, refilled
// at one per Every.
func (w *Writer) allow(k objectKey, now time.Time) bool {
	b := w.buckets[k]
	if b == nil {
		if len(w.buckets) >= cacheLimit {
			clear(w.buckets)
		}
		b = &bucket{tokens: float64(w.o.Burst), at: now}
		w.buckets[k] = b
	}
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tokens = min(float64(w.o.Burst), b.tokens+elapsed.Seconds()/w.o.Every.Seconds())
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// write writes ev, or counts it into the same Event written before, trying
// again while the apiserver does not answer, at most Tries times, until
// ctx ends.
func (w *Writer) write(ctx context.Context, ev *corev1.Event) {
	obj, series := keysOf(ev)
	if !w.allow(obj, ev.LastTimestamp.Time) {
		w.o.Logger.Warn("Event dropped: its object had too many Events of late", "object", obj.name, "reason", ev.Reason, "message", ev.Message)
		return
	}
	delay := w.o.RetryDelay
	for try := 1; ; try++ {
		err := w.writeOnce(ctx, ev, series)
		if err == nil || !retriable(err) {
			if err != nil {
				w.o.Logger.Error("Event not written: the apiserver refused it", "err", err, "reason", ev.Reason, "message", ev.Message)
			}
			return
		}
		if try >= w.o.Tries || ctx.Err() != nil {
			w.o.Logger.Error("Event not written: the apiserver did not answer", "err", err, "tries", try, "reason", ev.Reason, "message", ev.Message)
			return
		}
		w.o.Logger.Warn("Event not written yet; trying again", "err", err, "in", delay, "reason", ev.Reason)
		select {
		case <-ctx.Done():
			w.o.Logger.Error("Event not written: the writer stopped", "reason", ev.Reason, "message", ev.Message)
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

func (w *Writer) writeOnce(ctx context.Context, ev *corev1.Event, series seriesKey) error {
	if prev := w.series[series]; prev != nil {
		patch, err := json.Marshal(map[string]any{"count": prev.Count + 1, "lastTimestamp": ev.LastTimestamp})
		if err != nil {
			return err
		}
		out, err := w.o.Sink.PatchWithEventNamespaceWithContext(ctx, prev, patch)
		if err == nil {
			w.series[series] = out
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		// The Event expired (the apiserver keeps them an hour by
		// default): write it anew.
		delete(w.series, series)
	}
	out, err := w.o.Sink.CreateWithEventNamespaceWithContext(ctx, ev)
	if apierrors.IsAlreadyExists(err) {
		// Two Events on one object in the same nanosecond (a coarse
		// clock): the second takes a random name.
		ev.Name = eventName("", time.Time{})
		out, err = w.o.Sink.CreateWithEventNamespaceWithContext(ctx, ev)
	}
	if err != nil {
		return err
	}
	if len(w.series) >= cacheLimit {
		w.forgetOldest()
	}
	w.series[series] = out
	return nil
}

func (w *Writer) forgetOldest() {
	var oldest seriesKey
	var at time.Time
	for k, ev := range w.series {
		if at.IsZero() || ev.LastTimestamp.Before(&metav1.Time{Time: at}) {
			oldest, at = k, ev.LastTimestamp.Time
		}
	}
	delete(w.series, oldest)
}

// retriable: the apiserver did not answer, or answered that it could not
// serve the request now. Every other answer (invalid, forbidden, already
// exists, namespace terminating) is final, as it was with client-go's
// broadcaster.
func retriable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
			apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// eventName is the object's name and the time, as the kubelet's Events are
// named; a name that is not a valid one (too long) is random instead.
// An empty object asks for a random name.
func eventName(object string, t time.Time) string {
	if object != "" {
		if name := fmt.Sprintf("%s.%x", object, t.UnixNano()); len(validation.IsDNS1123Subdomain(name)) == 0 {
			return name
		}
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
