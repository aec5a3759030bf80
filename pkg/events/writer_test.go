package events

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// sink keeps the Events as the apiserver would, by namespace and name.
type sink struct {
	mu       sync.Mutex
	events   map[string]*corev1.Event
	creates  int
	patches  []map[string]any
	failures []error // returned, in order, before any write succeeds
	block    bool    // every write waits for its context to end
}

func newSink() *sink { return &sink{events: map[string]*corev1.Event{}} }

func (s *sink) fail(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.block {
		s.mu.Unlock()
		<-ctx.Done()
		s.mu.Lock()
		return ctx.Err()
	}
	if len(s.failures) > 0 {
		err := s.failures[0]
		s.failures = s.failures[1:]
		return err
	}
	return nil
}

func (s *sink) CreateWithEventNamespaceWithContext(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	if err := s.fail(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events[ev.Namespace+"/"+ev.Name] != nil {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, ev.Name)
	}
	s.creates++
	out := ev.DeepCopy()
	out.ResourceVersion = "1"
	s.events[ev.Namespace+"/"+ev.Name] = out
	return out.DeepCopy(), nil
}

func (s *sink) PatchWithEventNamespaceWithContext(ctx context.Context, ev *corev1.Event, data []byte) (*corev1.Event, error) {
	if err := s.fail(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	s.patches = append(s.patches, p)
	cur := s.events[ev.Namespace+"/"+ev.Name]
	if cur == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, ev.Name)
	}
	cur.Count = int32(p["count"].(float64))
	ts, err := time.Parse(time.RFC3339, p["lastTimestamp"].(string))
	if err != nil {
		return nil, err
	}
	cur.LastTimestamp = metav1.NewTime(ts)
	return cur.DeepCopy(), nil
}

func (s *sink) all() []*corev1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*corev1.Event
	for _, ev := range s.events {
		out = append(out, ev.DeepCopy())
	}
	return out
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func node(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)}
}

func start(t *testing.T, s *sink, o Options) (*Writer, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	o.Sink = s
	o.Now = c.now
	o.Source = corev1.EventSource{Component: "node-agent", Host: "node-1"}
	o.RetryDelay = time.Millisecond
	w := NewWriter(o)
	w.Start(t.Context())
	return w, c
}

func TestWriterWritesAnEventAsKubectlShowsIt(t *testing.T) {
	s := newSink()
	w, c := start(t, s, Options{})
	w.Eventf(node("node-1"), corev1.EventTypeWarning, "DrainFailed", "%d pods left", 3)
	w.Stop()

	evs := s.all()
	if len(evs) != 1 {
		t.Fatalf("%d Events written, want 1", len(evs))
	}
	ev := evs[0]
	if !strings.HasPrefix(ev.Name, "node-1.") || ev.Namespace != "default" {
		t.Errorf("Event %s/%s: want node-1.<time> in default, the namespace of cluster-scoped objects' Events", ev.Namespace, ev.Name)
	}
	if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "node-1" || ev.InvolvedObject.UID != "node-1" {
		t.Errorf("involved object %+v", ev.InvolvedObject)
	}
	if ev.Type != "Warning" || ev.Reason != "DrainFailed" || ev.Message != "3 pods left" || ev.Count != 1 {
		t.Errorf("type %q reason %q message %q count %d", ev.Type, ev.Reason, ev.Message, ev.Count)
	}
	if ev.Source.Component != "node-agent" || ev.Source.Host != "node-1" || ev.ReportingController != "node-agent" || ev.ReportingInstance != "node-1" {
		t.Errorf("source %+v, reporting %q %q", ev.Source, ev.ReportingController, ev.ReportingInstance)
	}
	if !ev.FirstTimestamp.Time.Equal(c.now()) || !ev.LastTimestamp.Time.Equal(c.now()) {
		t.Errorf("timestamps %v %v, want %v", ev.FirstTimestamp, ev.LastTimestamp, c.now())
	}
}

func TestWriterCountsRepeatsIntoOneEvent(t *testing.T) {
	s := newSink()
	w, c := start(t, s, Options{})
	w.Event(node("node-1"), corev1.EventTypeNormal, "MaintenanceWaiting", "waiting for a drain slot")
	c.add(time.Minute)
	w.Event(node("node-1"), corev1.EventTypeNormal, "MaintenanceWaiting", "waiting for a drain slot")
	c.add(time.Minute)
	w.Event(node("node-1"), corev1.EventTypeNormal, "MaintenanceWaiting", "waiting for a drain slot")
	// Another message, or another node, is another Event.
	w.Event(node("node-1"), corev1.EventTypeNormal, "MaintenanceWaiting", "waiting for gates")
	w.Event(node("node-2"), corev1.EventTypeNormal, "MaintenanceWaiting", "waiting for a drain slot")
	w.Stop()

	if s.creates != 3 || len(s.patches) != 2 {
		t.Fatalf("%d creates and %d patches, want 3 and 2", s.creates, len(s.patches))
	}
	for _, ev := range s.all() {
		if ev.InvolvedObject.Name == "node-1" && ev.Message == "waiting for a drain slot" {
			if ev.Count != 3 || !ev.LastTimestamp.Time.Equal(c.now()) || ev.FirstTimestamp.Time.Equal(c.now()) {
				t.Errorf("repeated Event: count %d, first %v, last %v", ev.Count, ev.FirstTimestamp, ev.LastTimestamp)
			}
		} else if ev.Count != 1 {
			t.Errorf("Event %q on %s counted %d", ev.Message, ev.InvolvedObject.Name, ev.Count)
		}
	}
}

func TestWriterWritesAnExpiredEventAnew(t *testing.T) {
	s := newSink()
	w, _ := start(t, s, Options{})
	w.Event(node("node-1"), corev1.EventTypeNormal, "R", "m")
	w.Event(node("node-1"), corev1.EventTypeNormal, "R", "m")
	for len(s.all()) == 0 || s.all()[0].Count != 2 {
		time.Sleep(time.Millisecond)
	}
	s.mu.Lock()
	clear(s.events) // the apiserver's TTL
	s.mu.Unlock()
	w.Event(node("node-1"), corev1.EventTypeNormal, "R", "m")
	w.Stop()
	if evs := s.all(); len(evs) != 1 || evs[0].Count != 1 || s.creates != 2 {
		t.Fatalf("after the Event expired: %d Events, %d creates; want the repeat written anew", len(evs), s.creates)
	}
}

func TestWriterLimitsEventsPerObject(t *testing.T) {
	s := newSink()
	w, c := start(t, s, Options{Burst: 2, Every: time.Minute})
	for i := range 4 {
		w.Eventf(node("node-1"), corev1.EventTypeNormal, "R", "message %d", i)
	}
	w.Eventf(node("node-2"), corev1.EventTypeNormal, "R", "another node has its own")
	waitFor(t, func() bool { return len(s.all()) == 3 })
	c.add(time.Minute)
	w.Eventf(node("node-1"), corev1.EventTypeNormal, "R", "a minute later")
	w.Eventf(node("node-1"), corev1.EventTypeNormal, "R", "too soon again")
	w.Stop()

	var got []string
	for _, ev := range s.all() {
		got = append(got, ev.InvolvedObject.Name+": "+ev.Message)
	}
	want := map[string]bool{"node-1: message 0": true, "node-1: message 1": true, "node-2: another node has its own": true, "node-1: a minute later": true}
	if len(got) != len(want) {
		t.Fatalf("written %q, want %d of them", got, len(want))
	}
	for _, g := range got {
		if !want[g] {
			t.Errorf("written %q, not expected", g)
		}
	}
}

func TestWriterRetriesOnlyWhatTheApiserverDidNotServe(t *testing.T) {
	gr := schema.GroupResource{Resource: "events"}
	for _, tc := range []struct {
		name     string
		failures []error
		written  bool
	}{
		{"unavailable, then written", []error{apierrors.NewServiceUnavailable("x"), errors.New("connection refused")}, true},
		{"forbidden is final", []error{apierrors.NewForbidden(gr, "e", errors.New("no"))}, false},
		{"invalid is final", []error{apierrors.NewBadRequest("bad")}, false},
		{"more failures than tries", []error{errors.New("a"), errors.New("b"), errors.New("c")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSink()
			s.failures = tc.failures
			w, _ := start(t, s, Options{Tries: 3})
			w.Event(node("node-1"), corev1.EventTypeNormal, "R", "m")
			w.Stop()
			if got := len(s.all()) == 1; got != tc.written {
				t.Errorf("written %v, want %v (failures left %d)", got, tc.written, len(s.failures))
			}
		})
	}
}

func TestWriterStopFlushesWithinItsBound(t *testing.T) {
	s := newSink()
	w, _ := start(t, s, Options{})
	for i := range 50 {
		w.Eventf(node("node-1"), corev1.EventTypeNormal, "R", "m%d", i)
	}
	w.Stop()
	if n := len(s.all()); n != 25 {
		t.Errorf("%d Events written by Stop, want the 25 the rate limit lets through", n)
	}
	w.Event(node("node-1"), corev1.EventTypeNormal, "R", "after stop")
	w.Stop() // a second Stop returns
	if n := len(s.all()); n != 25 {
		t.Errorf("an Event after Stop was written")
	}

	// An apiserver that never answers holds Stop only FlushBound.
	s = newSink()
	s.block = true
	w, _ = start(t, s, Options{FlushBound: 10 * time.Millisecond})
	w.Event(node("node-1"), corev1.EventTypeNormal, "R", "m")
	w.Event(node("node-1"), corev1.EventTypeNormal, "R", "m2")
	w.Stop()
	if n := len(s.all()); n != 0 {
		t.Errorf("%d written to a sink that never answers", n)
	}
}

func TestWriterRefusesWhatIsNoEvent(t *testing.T) {
	s := newSink()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	w, _ := start(t, s, Options{Scheme: scheme, Queue: 2})
	w.Event(node("node-1"), "Error", "R", "not a type of Event")
	w.Event(nil, corev1.EventTypeNormal, "R", "no object")
	w.Event(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}, corev1.EventTypeNormal, "R", "a pod, through the scheme")
	w.Stop()
	evs := s.all()
	if len(evs) != 1 || evs[0].InvolvedObject.Kind != "Pod" || evs[0].Namespace != "ns" {
		t.Fatalf("written %+v, want only the pod's Event, in its namespace", evs)
	}
}

func TestWriterDropsPastItsQueue(t *testing.T) {
	s := newSink()
	s.block = true
	w, _ := start(t, s, Options{Queue: 1, FlushBound: 10 * time.Millisecond})
	for i := range 10 {
		w.Eventf(node(string(rune('a'+i))), corev1.EventTypeNormal, "R", "m")
	}
	// Recording never blocks the caller: getting here is the test.
	w.Stop()
}

func TestLongNamesGetAValidEventName(t *testing.T) {
	long := strings.Repeat("z", 250)
	if name := eventName(long, time.Now()); strings.HasPrefix(name, "z") || len(name) != 32 {
		t.Errorf("name %q for a 250-character object", name)
	}
	if name := eventName("node-1", time.Unix(0, 255)); name != "node-1.ff" {
		t.Errorf("name %q", name)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not met")
		case <-time.After(time.Millisecond):
		}
	}
}

func TestFuncAndDiscard(t *testing.T) {
	var got []string
	var r Recorder = Func(func(_ runtime.Object, typ, reason, msg string) { got = append(got, typ+" "+reason+" "+msg) })
	r.Eventf(node("n"), "Normal", "R", "%d", 1)
	r.Event(node("n"), "Warning", "S", "x")
	if strings.Join(got, ",") != "Normal R 1,Warning S x" {
		t.Errorf("got %q", got)
	}
	Discard{}.Event(nil, "", "", "")
}
