package runcoordinator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// replica is one coordinator replica run by Run in this process.
type replica struct {
	id, health string
	stop       func() error
}

// startReplica runs Run as identity against env until stop (or the end of
// the test), serving its probes on a free loopback port. Its log goes to a
// file in the test's directory, shown when the test fails.
func startReplica(t *testing.T, env *testenv.Env, cfg config.Config, identity string) *replica {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), identity+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: identity, health: testenv.FreeAddr(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Config: cfg, REST: env.RESTConfig(), Identity: identity,
			// The election of kube-controller-manager, but trying every
			// half second: a replica takes a Lease given up at once.
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 500 * time.Millisecond,
			MetricsAddress: "0", HealthAddress: r.health,
			Logger: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
	}()
	var stopped bool
	var runErr error
	r.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("%s: Run returned %v", identity, err)
		}
		logFile.Close()
		if t.Failed() {
			t.Logf("--- log of %s ---\n%s", identity, testenv.TailFile(logPath, 60))
		}
	})
	return r
}

// probe returns the status and body of path on r's health address; 0 while
// it does not serve.
func (r *replica) probe(path string) (int, string) {
	resp, err := http.Get("http://" + r.health + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitProbe waits until path answers want.
func (r *replica) waitProbe(t *testing.T, path string, want int) {
	t.Helper()
	var last string
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("%s's %s to answer %d", r.id, path, want), func() (bool, error) {
		code, body := r.probe(path)
		last = fmt.Sprintf("%d %s", code, body)
		return code == want, nil
	})
	t.Logf("%s %s: %s", r.id, path, last)
}

// wantProbe checks that path answers want now, with words in its body.
func (r *replica) wantProbe(t *testing.T, path string, want int, words ...string) {
	t.Helper()
	code, body := r.probe(path)
	if code != want {
		t.Errorf("%s %s = %d, want %d:\n%s", r.id, path, code, want, body)
	}
	for _, w := range words {
		if !strings.Contains(body, w) {
			t.Errorf("%s %s lacks %q:\n%s", r.id, path, w, body)
		}
	}
}

// TestReadyOnlyWhileLeading runs coordinator replicas on a real apiserver:
// a replica is not ready while another holds the election Lease, and is
// healthy and in the election all the while; it is ready once it leads and
// has read the Nodes and slot Leases, and then it answers requests; a
// second replica stays unready while the first leads, and becomes ready
// when the first stops and gives the Lease up.
func TestReadyOnlyWhileLeading(t *testing.T) {
	if testing.Short() && os.Getenv(testenv.IntegrationEnv) != "1" {
		t.Skip("needs a control plane; run without -short, or with " + testenv.IntegrationEnv + "=1")
	}
	env := testenv.StartForTest(t, testenv.Options{})
	ctx := t.Context()
	c := env.Client()
	cfg := config.Default()
	ns := cfg.Slots.Namespace
	if _, err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := env.AddNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	const electionName = "node-agent-coordinator" // Run's default

	// Someone else holds the election Lease, renewed just now for an hour:
	// the replica cannot lead, whatever the machine's pace.
	now := metav1.NewMicroTime(time.Now())
	held := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: electionName, Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now},
	}
	if _, err := c.CoordinationV1().Leases(ns).Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := startReplica(t, env, cfg, "replica-a")
	a.waitProbe(t, "/readyz/election", http.StatusOK)
	a.wantProbe(t, "/readyz", http.StatusServiceUnavailable, "[-]leading failed: standing by: someone-else leads", "[-]synced failed")
	a.wantProbe(t, "/healthz", http.StatusOK)

	// The Lease is gone: a takes it, reads the cluster, and is ready.
	if err := c.CoordinationV1().Leases(ns).Delete(ctx, electionName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitProbe(t, "/readyz", http.StatusOK)
	a.wantProbe(t, "/readyz?verbose", http.StatusOK, "[+]election ok", "[+]leading ok", "[+]synced ok")
	if holder := leaseHolder(t, env, ns, electionName); holder != a.id {
		t.Fatalf("%s is ready but the election Lease is held by %q", a.id, holder)
	}
	// Ready means deciding: a request is answered.
	ask(t, env, "node-1", "r1")
	waitGranted(t, env, "node-1", "r1")

	// A second replica: in the election, healthy, not ready, while a leads.
	b := startReplica(t, env, cfg, "replica-b")
	b.waitProbe(t, "/readyz/election", http.StatusOK)
	b.wantProbe(t, "/readyz", http.StatusServiceUnavailable, "[-]leading failed: standing by: "+a.id+" leads", "[-]synced failed")
	b.wantProbe(t, "/healthz", http.StatusOK)
	// a still led while b answered so (it renews well within its Lease).
	a.wantProbe(t, "/readyz", http.StatusOK)
	if holder := leaseHolder(t, env, ns, electionName); holder != a.id {
		t.Fatalf("the election Lease moved to %q while %s was checked", holder, b.id)
	}

	// a stops and gives the Lease up (SIGTERM in a pod): b takes over, at
	// its next try rather than when the Lease would have expired.
	if err := a.stop(); err != nil {
		t.Errorf("%s: Run returned %v", a.id, err)
	}
	b.waitProbe(t, "/readyz", http.StatusOK)
	if holder := leaseHolder(t, env, ns, electionName); holder != b.id {
		t.Fatalf("%s is ready but the election Lease is held by %q", b.id, holder)
	}
	// The new leader decides: node-1's slot is still its own, and a new
	// request of node-1 replaces it.
	ask(t, env, "node-1", "r2")
	waitGranted(t, env, "node-1", "r2")
}

func leaseHolder(t *testing.T, env *testenv.Env, ns, name string) string {
	t.Helper()
	l, err := env.Client().CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// ask writes a maintenance request with id on node, as its agent would.
func ask(t *testing.T, env *testenv.Env, node, id string) {
	t.Helper()
	req := &slots.Request{Purpose: slots.PurposeMaintenance, ID: id, RequestedAt: time.Now().UTC()}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, slots.RequestAnnotation, req.Encode())
	if _, err := env.Client().CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitGranted(t *testing.T, env *testenv.Env, node, id string) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, node+"'s request "+id+" granted", func() (bool, error) {
		n, err := env.Client().CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		g, err := slots.ParseGrant(n)
		return err == nil && g != nil && g.ID == id && g.State == slots.Granted, nil
	})
}
