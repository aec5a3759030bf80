package silence

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/agent/agenttest"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeAM is an Alertmanager v2 API of silences, enough for Reconcile.
type fakeAM struct {
	mu       sync.Mutex
	silences []silence
	calls    []string
}

func (f *fakeAM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/api/v2/"))
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v2/silences":
		_ = json.NewEncoder(w).Encode(f.silences)
	case r.Method == http.MethodPost && r.URL.Path == "/api/v2/silences":
		b, _ := io.ReadAll(r.Body)
		var s silence
		if err := json.Unmarshal(b, &s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if s.ID == "" {
			s.ID = "new"
			f.silences = append(f.silences, s)
		} else {
			for i := range f.silences {
				if f.silences[i].ID == s.ID {
					f.silences[i].EndsAt = s.EndsAt
				}
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"silenceID": s.ID})
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/api/v2/silence/"):
		id := strings.TrimPrefix(r.URL.Path, "/api/v2/silence/")
		for i := range f.silences {
			if f.silences[i].ID == id {
				f.silences[i].Status = &struct {
					State string `json:"state"`
				}{"expired"}
			}
		}
	default:
		http.NotFound(w, r)
	}
}

func TestReconcile(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	mine := func(id string, endsIn time.Duration) silence {
		return silence{ID: id, Matchers: []Matcher{{Name: "node", Value: "node-1", IsEqual: true}}, StartsAt: now.Add(-time.Hour),
			EndsAt: now.Add(endsIn), CreatedBy: "node-agent/node-1"}
	}
	other := silence{ID: "theirs", CreatedBy: "alice", EndsAt: now.Add(time.Hour)}
	for _, tt := range []struct {
		name      string
		disrupted bool
		before    []silence
		want      []string // calls after the GET
	}{
		{"idle, none", false, []silence{other}, nil},
		{"idle, one left behind: expired", false, []silence{other, mine("old", 30*time.Minute)}, []string{"DELETE silence/old"}},
		{"drained, none: made", true, []silence{other}, []string{"POST silences"}},
		{"drained, one fresh: left", true, []silence{mine("s1", 14*time.Minute)}, nil},
		{"drained, one due: extended", true, []silence{mine("s1", 9*time.Minute)}, []string{"POST silences"}},
		{"drained, two: the older expired", true, []silence{mine("s1", 14*time.Minute), mine("s0", 3*time.Minute)}, []string{"DELETE silence/s0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			am := &fakeAM{silences: append([]silence(nil), tt.before...)}
			srv := httptest.NewServer(am)
			defer srv.Close()
			k := &Keeper{URL: srv.URL, Node: "node-1", NodeLabel: "node", Duration: 15 * time.Minute,
				Disrupted: func(*corev1.Node) (bool, string) { return tt.disrupted, "maintenance of node-1" },
				Client:    srv.Client(), Clock: clocktesting.NewFakeClock(now), Logger: slog.New(slog.DiscardHandler)}
			if err := k.Reconcile(t.Context(), &corev1.Node{}); err != nil {
				t.Fatal(err)
			}
			got := am.calls[1:]
			if strings.Join(got, ", ") != strings.Join(tt.want, ", ") {
				t.Errorf("calls after the list: %v, want %v", got, tt.want)
			}
			for _, s := range am.silences {
				if s.ID == "theirs" && s.Status != nil {
					t.Error("someone else's silence was touched")
				}
				if tt.disrupted && s.CreatedBy == "node-agent/node-1" && (s.Status == nil || s.Status.State != "expired") && s.EndsAt.Sub(now) < 10*time.Minute {
					t.Errorf("silence %s ends in %s while the node is drained", s.ID, s.EndsAt.Sub(now))
				}
			}
		})
	}
}

// TestRunAsksOnlyWhenTheDisruptionChanges: changes of the Node that leave
// it as disrupted as it was ask Alertmanager nothing; one that changes it
// does, and so does the extension timer.
func TestRunAsksOnlyWhenTheDisruptionChanges(t *testing.T) {
	am := &fakeAM{}
	srv := httptest.NewServer(am)
	defer srv.Close()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	view := &agenttest.NodeView{Client: kubetest.Wrap(cs), Name: "node-1"}
	k := &Keeper{URL: srv.URL, Node: "node-1", NodeLabel: "node", Duration: 15 * time.Minute,
		Disrupted: func(n *corev1.Node) (bool, string) { return n.Labels["drained"] == "yes", "maintenance of node-1" },
		Client:    srv.Client(), Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	calls := func() []string {
		am.mu.Lock()
		defer am.mu.Unlock()
		return append([]string(nil), am.calls...)
	}
	waitCalls := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(calls()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("calls %v, want %d", calls(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	label := func(v string) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels = map[string]string{"drained": v, "touched": fmt.Sprint(time.Now().UnixNano())}
		if _, err := cs.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := view.Touch(); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- k.Run(t.Context(), view) }()
	waitCalls(1) // the first reconcile lists
	for range 5 {
		label("no") // not disrupted before, not after
	}
	label("yes") // disrupted: list, then make the silence
	waitCalls(3)
	for range 5 {
		label("yes")
	}
	label("no") // over: list, then expire it
	waitCalls(5)
	time.Sleep(50 * time.Millisecond)
	want := []string{"GET silences", "GET silences", "POST silences", "GET silences", "DELETE silence/new"}
	if got := calls(); strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("calls %v, want %v: a change that leaves the disruption as it was must ask nothing", got, want)
	}
	// The timer asks again whatever the Node did.
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(5 * time.Minute)
	waitCalls(6)
}
