package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// receiver records what it is sent and answers as answer says.
type receiver struct {
	mu     sync.Mutex
	bodies []string
	answer func(n int) int // status for the nth request (1-based); 0 hangs
	hang   chan struct{}
}

func newReceiver(t *testing.T, answer func(n int) int) (*receiver, *httptest.Server) {
	r := &receiver{answer: answer, hang: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies = append(r.bodies, string(b))
		n := len(r.bodies)
		r.mu.Unlock()
		status := r.answer(n)
		if status == 0 {
			select {
			case <-r.hang:
			case <-req.Context().Done():
			}
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(func() { close(r.hang); srv.Close() })
	return r, srv
}

func (r *receiver) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...)
}

func start(t *testing.T, o Options) (*Notifier, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	o.Metrics = m
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.GiveUpAfter == 0 {
		o.GiveUpAfter = 5 * time.Second
	}
	if o.Backoff == 0 {
		o.Backoff = 10 * time.Millisecond
	}
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return n, m
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("waiting for %s: gave up", what)
}

var drained = Notification{Event: MaintenanceDrained, Node: "node-1", Reason: "DrainSucceeded", Type: "Normal", Message: "Drained 4 pods", Time: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}

func TestBodies(t *testing.T) {
	for _, tt := range []struct {
		name string
		hook Webhook
		want string
	}{
		{"json preset", Webhook{Preset: PresetJSON}, `{"event":"maintenance-drained","node":"node-1","reason":"DrainSucceeded","type":"Normal","message":"Drained 4 pods","time":"2026-11-26T12:00:00Z"}`},
		{"slack preset", Webhook{Preset: PresetSlack}, `{"text":"node-agent: maintenance drained on node-1 (DrainSucceeded)\nDrained 4 pods"}`},
		{"template", Webhook{Template: `{"summary":"{{.Node}}: {{ .Event }}","msg":{{json .Message}},"at":{{json .Time}}}`}, `{"summary":"node-1: maintenance-drained","msg":"Drained 4 pods","at":"2026-11-26T12:00:00Z"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, srv := newReceiver(t, func(int) int { return 200 })
			tt.hook.Name, tt.hook.URL = "h", srv.URL
			n, m := start(t, Options{Webhooks: []Webhook{tt.hook}})
			n.Notify(drained)
			waitFor(t, "the notification", func() bool { return len(r.got()) == 1 })
			if got := r.got()[0]; strings.TrimSpace(got) != tt.want {
				t.Errorf("body %s, want %s", got, tt.want)
			}
			if !json.Valid([]byte(r.got()[0])) {
				t.Errorf("body is not JSON: %s", r.got()[0])
			}
			waitFor(t, "the sent count", func() bool { return testutil.ToFloat64(m.results.WithLabelValues("h", "sent")) == 1 })
		})
	}
}

// A receiver that fails twice gets the notification on the third try.
func TestRetries(t *testing.T) {
	r, srv := newReceiver(t, func(n int) int {
		if n < 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	n, m := start(t, Options{Webhooks: []Webhook{{Name: "flaky", URL: srv.URL}}})
	n.Notify(drained)
	waitFor(t, "sent on the third try", func() bool { return testutil.ToFloat64(m.results.WithLabelValues("flaky", "sent")) == 1 })
	if len(r.got()) != 3 {
		t.Errorf("%d attempts, want 3", len(r.got()))
	}
}

// TestDeadReceiversHoldNothingUp: a receiver that hangs, one that always
// fails, and a healthy one. Notify returns at once however many
// notifications there are; the healthy receiver gets each; the failing one
// is given up after GiveUpAfter; what does not fit the hanging one's queue
// is dropped and counted.
func TestDeadReceiversHoldNothingUp(t *testing.T) {
	hung, hangSrv := newReceiver(t, func(int) int { return 0 })
	failing, failSrv := newReceiver(t, func(int) int { return http.StatusInternalServerError })
	healthy, okSrv := newReceiver(t, func(int) int { return http.StatusOK })
	n, m := start(t, Options{
		Webhooks: []Webhook{
			{Name: "hung", URL: hangSrv.URL},
			{Name: "failing", URL: failSrv.URL},
			{Name: "healthy", URL: okSrv.URL, Events: []Event{MaintenanceDrained}},
		},
		Timeout: time.Hour, GiveUpAfter: 200 * time.Millisecond, QueueSize: 2,
	})
	// Each notification reaches the healthy receiver before the next is
	// sent, while the hung one has held its first request all along.
	const sent = 6
	for i := 1; i <= sent; i++ {
		n.Notify(drained)
		waitFor(t, "the healthy receiver's notification", func() bool { return len(healthy.got()) == i })
	}
	n.Notify(Notification{Event: MaintenanceStarted, Node: "node-1"}) // not for "healthy"
	waitFor(t, "the hung receiver's first request", func() bool { return len(hung.got()) == 1 })
	// The hung receiver holds one in flight and two queued: the rest of
	// its seven were dropped.
	waitFor(t, "drops counted", func() bool { return testutil.ToFloat64(m.results.WithLabelValues("hung", "dropped")) == 4 })
	waitFor(t, "the failing receiver given up", func() bool {
		return testutil.ToFloat64(m.results.WithLabelValues("failing", "failed")) >= 1
	})
	if len(failing.got()) < 2 {
		t.Errorf("the failing receiver was tried %d times, want retries", len(failing.got()))
	}
	if got := testutil.ToFloat64(m.results.WithLabelValues("healthy", "sent")); got != sent {
		t.Errorf("healthy: sent %v, want %d", got, sent)
	}
}

func TestRecorder(t *testing.T) {
	r, srv := newReceiver(t, func(int) int { return 200 })
	n, _ := start(t, Options{Webhooks: []Webhook{{Name: "h", URL: srv.URL}}})
	inner := record.NewFakeRecorder(10)
	rec := Recorder(inner, n, "node-1")
	node := &corev1.Node{}
	rec.Eventf(node, corev1.EventTypeNormal, "DrainSucceeded", "Drained %d pods", 4)
	rec.Event(node, corev1.EventTypeNormal, "CPULabelsChanged", "not a notification")
	rec.Event(node, corev1.EventTypeWarning, "RebootDrainFailed", "the drain did not finish")
	if len(inner.Events) != 3 {
		t.Errorf("the inner recorder got %d Events, want all 3", len(inner.Events))
	}
	waitFor(t, "two notifications", func() bool { return len(r.got()) == 2 })
	var got []Notification
	for _, b := range r.got() {
		var nt Notification
		if err := json.Unmarshal([]byte(b), &nt); err != nil {
			t.Fatal(err)
		}
		got = append(got, nt)
	}
	if got[0].Event != MaintenanceDrained || got[0].Message != "Drained 4 pods" || got[1].Event != RebootFailed || got[1].Node != "node-1" {
		t.Errorf("notifications %+v", got)
	}
	if Recorder(inner, nil, "node-1") != record.EventRecorder(inner) {
		t.Error("without webhooks the recorder is not the inner one")
	}
}
