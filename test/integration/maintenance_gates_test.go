package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/nodelifecycle"
	nlspec "github.com/node-agent/node-agent/pkg/nodelifecycle/spec"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestMaintenanceGate: a maintenance gate on a real Prometheus holds a
// maintenance before the cordon, saying which gate holds with its query and
// answer, until the query is empty; then the node drains.
func TestMaintenanceGate(t *testing.T) {
	promBin := toolBinary(t, testenv.DefaultOptions(), testenv.BinPrometheus)
	startCtx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prom, err := testenv.StartPrometheus(startCtx, filepath.Dir(promBin), t.TempDir(), map[string][]byte{
		"prometheus.yml": []byte("global:\n  evaluation_interval: 1s\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Stop() })

	b := newDrainBed(t)
	c := b.env.Client()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "web", 4, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 4)
	b.addTargets(t)
	// One series until the time in the query, none after: the gate holds
	// for a while, then opens.
	until := time.Now().Add(25 * time.Second).Unix()
	query := fmt.Sprintf("vector(time()) < %d", until)
	agent := startAgent(t, b.env, "node-1", "--maintenance-prometheus-url="+prom.URL,
		fmt.Sprintf(`--maintenance-gates=[{"name":"change-freeze","query":%q}]`, query))
	agent.WaitReady(t)
	if _, err := maintenance.RequestMaintenance(context.Background(), kubetest.Wrap(c), "node-1", "gate test"); err != nil {
		t.Fatal(err)
	}
	var st *selfdrain.Status
	testenv.WaitFor(t, time.Minute, "the maintenance waiting for its gate", func() (bool, error) {
		var err error
		st, err = selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseWaiting && strings.Contains(st.LastError, "change-freeze"), err
	})
	if want := "waiting for maintenance gates: change-freeze (" + query + ") has 1 series: {} "; !strings.HasPrefix(st.LastError, want) {
		t.Errorf("lastError %q, want it to start %q", st.LastError, want)
	}
	if n := getNode(t, c, "node-1"); n.Spec.Unschedulable || testenv.HasTaint(n, testenv.DrainTaint) {
		t.Errorf("node-1 changed while its maintenance waited for a gate: unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	t.Logf("while the gate holds: phase %s, %s", st.Phase, st.LastError)
	testenv.WaitFor(t, 2*time.Minute, "phase Succeeded once the gate's query is empty", func() (bool, error) {
		var err error
		st, err = selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
	})
	if now := time.Now().Unix(); now < until {
		t.Errorf("node-1 drained at %d, while the gate's query still had a series (until %d)", now, until)
	}
	// Before Kubernetes 1.37 (the default test bed), the default
	// drain.nodeLifecycleConditions auto writes none of KEP-5683's
	// conditions: nothing changes there.
	v, err := c.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if on, why := nodelifecycle.Enabled(nlspec.Auto, v); !on {
		if got := lifecycleTypes(getNode(t, c, "node-1")); len(got) != 0 {
			t.Errorf("node lifecycle conditions %v on %s, want none (%s)", got, v.GitVersion, why)
		}
	}
}

// TestGateAnswerReachesTheNodeOnlyPrintable is issue 40's acceptance for
// outside text: a Prometheus that answers with escape sequences (a sample
// value that sets the terminal's title and clears the screen, an alert name
// with a bidi override, as a hostile or compromised Prometheus may send; a
// real one quotes label values but sends values and names as they are)
// holds a maintenance in its gate; the Node's status, conditions and Events
// then quote that answer only as printable text, as kubectl describe node
// would print it. The Prometheus is a loopback server of the test's: the
// hostile outside service.
func TestGateAnswerReachesTheNodeOnlyPrintable(t *testing.T) {
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[`+
			`{"metric":{"alertname":"Evil\u202e\u001b[2J"},"value":[1700000000,"\u001b]0;pwned\u0007\u001b[2J"]}]}}`)
	}))
	t.Cleanup(hostile.Close)

	b := newDrainBed(t)
	c := b.env.Client()
	query := `up == 0`
	agent := startAgent(t, b.env, "node-1", "--maintenance-prometheus-url="+hostile.URL,
		fmt.Sprintf(`--maintenance-gates=[{"name":"hostile","query":%q}]`, query))
	agent.WaitReady(t)
	if _, err := maintenance.RequestMaintenance(context.Background(), kubetest.Wrap(c), "node-1", "printable test"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the maintenance held by the hostile gate", func() (bool, error) {
		st, err := selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseWaiting && strings.Contains(st.LastError, "pwned"), err
	})
	node := getNode(t, c, "node-1")
	st, _ := selfdrain.ParseStatus(node)
	if !strings.Contains(st.LastError, `\x1b]0;pwned\x07\x1b[2J`) {
		t.Errorf("lastError %q does not quote the answer's value, escaped", st.LastError)
	}
	n := requireNodeTextsPrintable(t, c, node)
	t.Logf("lastError: %s (%d annotations, conditions and Events checked)", st.LastError, n)
}
