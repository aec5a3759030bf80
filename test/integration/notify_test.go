package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/notify"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestNotificationsNeverHoldUpADrain is issue 33's acceptance for
// notifications: a receiver that hangs does not delay a drain. The agent
// has two webhooks: one whose receiver never answers, and one that records
// what it is sent. The drain runs to Succeeded while the hung receiver
// still holds its first request open, and the other receiver is told the
// maintenance started, drained and ended.
func TestNotificationsNeverHoldUpADrain(t *testing.T) {
	hung := make(chan struct{})
	var mu sync.Mutex
	var hungOpen int
	hangSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hungOpen++
		mu.Unlock()
		select {
		case <-hung:
		case <-r.Context().Done():
		}
		mu.Lock()
		hungOpen--
		mu.Unlock()
	}))
	var got []notify.Notification
	recSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var n notify.Notification
		if err := json.Unmarshal(b, &n); err != nil {
			t.Errorf("a body that is not the json preset: %s", b)
		}
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
	}))
	t.Cleanup(func() { close(hung); hangSrv.Close(); recSrv.Close() })
	events := func() []notify.Event {
		mu.Lock()
		defer mu.Unlock()
		var out []notify.Event
		for _, n := range got {
			out = append(out, n.Event)
		}
		return out
	}

	b := newDrainBed(t)
	c := b.env.Client()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "web", 6, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 6)
	b.addTargets(t)
	// The hung receiver's attempts last an hour each: it holds its first
	// request open for the whole test.
	hooks := fmt.Sprintf(`[{"name":"hung","url":%q},{"name":"recorder","url":%q}]`, hangSrv.URL, recSrv.URL)
	agent := startAgent(t, b.env, "node-1", "--notifications-webhooks="+hooks, "--notifications-timeout=1m", "--notifications-give-up-after=1h")
	agent.WaitReady(t)

	if _, err := maintenance.RequestMaintenance(context.Background(), kubetest.Wrap(c), "node-1", "notification test"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "phase Succeeded", func() (bool, error) {
		st, err := selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
	})
	mu.Lock()
	open := hungOpen
	mu.Unlock()
	if open != 1 {
		t.Errorf("the hung receiver holds %d requests open at Succeeded, want its first one: the case does not show what it should", open)
	}
	testenv.WaitFor(t, time.Minute, "the recorder told of start and drained", func() (bool, error) {
		e := events()
		return slices.Contains(e, notify.MaintenanceStarted) && slices.Contains(e, notify.MaintenanceDrained), nil
	})
	if _, err := maintenance.EndMaintenance(context.Background(), kubetest.Wrap(c), "node-1"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the recorder told of the end", func() (bool, error) {
		return slices.Contains(events(), notify.MaintenanceEnded), nil
	})
	mu.Lock()
	for _, n := range got {
		t.Logf("recorder: %s %s %s: %s", n.Event, n.Node, n.Reason, n.Message)
		if n.Node != "node-1" {
			t.Errorf("notification for node %q, want node-1", n.Node)
		}
	}
	mu.Unlock()
	t.Logf("the hung receiver held its first request open through the whole drain")
}
