package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestRebootControllerWaitsAndSaysWhy: agents with the reboot controller
// on, running as the shipped ServiceAccount, on kwok nodes whose sentinel
// file exists: a node outside its window, one with a matching pod, and one
// with a matching alert firing on a real Prometheus never drain or take a
// slot, and their RebootRequired condition names the reason;
// `node-agent reboot status` shows them. Once a blocker goes, the node moves
// on to waiting for the slot: the coordinator queues its request behind
// node-9, which holds the only slot here, so that nothing reboots.
func TestRebootControllerWaitsAndSaysWhy(t *testing.T) {
	promBin := toolBinary(t, testenv.DefaultOptions(), testenv.BinPrometheus)
	b := newDrainBed(t)
	c := b.env.Client()
	ctx := t.Context()
	if err := b.env.AddNodes(ctx, []string{"node-2", "node-3", "node-4", "node-9"}); err != nil {
		t.Fatal(err)
	}
	// One coordinator for every subtest's agent (their drain settings are
	// the defaults: one slot), started here so that it outlives them.
	startCoordinator(t, b.env, "--reboot-enabled=true")
	// The only slot is node-9's for as long as the test runs: whatever the
	// test unblocks waits there.
	held := holdSlot(t, c, "node-9")
	start := func(t *testing.T, node string, args ...string) {
		sentinel := filepath.Join(t.TempDir(), "reboot-required")
		if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		a := startAgent(t, b.env, node, append([]string{"--reboot-enabled=true", "--reboot-sentinel-file=" + sentinel,
			"--reboot-check-interval=1s", "--shutdown-enabled=false"}, args...)...)
		a.WaitReady(t)
	}

	t.Run("outside the window", func(t *testing.T) {
		tomorrow := strings.ToLower(time.Now().UTC().Add(24 * time.Hour).Weekday().String()[:3])
		start(t, "node-1", "--reboot-window-days="+tomorrow, "--reboot-window-start=02:00", "--reboot-window-end=04:00")
		cond := waitRebootReason(t, c, "node-1", string(reboot.OutsideWindow))
		// The next opening is tomorrow at 02:00 UTC.
		next := time.Now().UTC().Add(24*time.Hour).Format(time.DateOnly) + "T02:00:00Z"
		if cond.Status != corev1.ConditionTrue || !strings.Contains(cond.Message, tomorrow+" 02:00-04:00 UTC") || !strings.Contains(cond.Message, "it opens next at "+next) {
			t.Errorf("condition %s: %s", cond.Status, cond.Message)
		}
		holdsNothing(t, c, "node-1", held)
		t.Logf("node-1: %s", cond.Message)
	})

	t.Run("blocked by a pod", func(t *testing.T) {
		testenv.CreateDeployment(ctx, t, c, b.ns, "db", 1, "node-2")
		testenv.WaitRunningOn(ctx, t, c, b.ns, "node-2", 1)
		start(t, "node-2", "--reboot-blocking-pod-selector=app=db")
		cond := waitRebootReason(t, c, "node-2", string(reboot.BlockedByPods))
		if !strings.Contains(cond.Message, "blocked by pods "+b.ns+"/db-") {
			t.Errorf("message %q does not name the pod", cond.Message)
		}
		holdsNothing(t, c, "node-2", held)
		t.Logf("node-2: %s", cond.Message)
		if err := c.AppsV1().Deployments(b.ns).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		cond = waitRebootReason(t, c, "node-2", string(reboot.WaitingForSlot))
		// Waiting in the coordinator's queue, not merely in the agent.
		var g *slots.Grant
		testenv.WaitFor(t, 30*time.Second, "node-2's request queued by the coordinator", func() (bool, error) {
			n := getNode(t, c, "node-2")
			req, err := slots.ParseRequest(n)
			if err != nil || req == nil {
				return false, err
			}
			g, err = slots.ParseGrant(n)
			return err == nil && g.Answers(req) && req.Purpose == slots.PurposeReboot && g.State == slots.Queued, err
		})
		holdsNothing(t, c, "node-2", held)
		t.Logf("node-2 after the pod went: %s; the coordinator: %s (%s)", cond.Message, g.State, g.Reason)
	})

	t.Run("blocked by a firing alert", func(t *testing.T) {
		startCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		prom, err := testenv.StartPrometheus(startCtx, filepath.Dir(promBin), t.TempDir(), map[string][]byte{
			"prometheus.yml": []byte("global:\n  evaluation_interval: 1s\nrule_files:\n  - rules.yaml\n"),
			"rules.yaml": []byte("groups:\n  - name: freeze\n    rules:\n      - alert: MaintenanceFreeze\n        expr: vector(1)\n" +
				"      - alert: SomethingElse\n        expr: vector(1)\n"),
		})
		if err != nil {
			t.Fatal(err)
		}
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				_ = prom.Stop()
			}
		})
		start(t, "node-3", "--reboot-prometheus-url="+prom.URL, "--reboot-blocking-alert-regexp=MaintenanceFreeze")
		cond := waitRebootReason(t, c, "node-3", string(reboot.BlockedByAlerts))
		if !strings.Contains(cond.Message, "alerts MaintenanceFreeze") || strings.Contains(cond.Message, "SomethingElse") {
			t.Errorf("message %q: want MaintenanceFreeze named, and only it", cond.Message)
		}
		holdsNothing(t, c, "node-3", held)
		t.Logf("node-3: %s", cond.Message)
		// Prometheus gone: still blocked (fail closed), and it says so.
		if err := prom.Stop(); err != nil {
			t.Logf("stopping prometheus: %v", err)
		}
		stopped = true
		testenv.WaitFor(t, time.Minute, "node-3 blocked because Prometheus cannot be asked", func() (bool, error) {
			cond := rebootCondition(t, c, "node-3")
			return cond != nil && cond.Reason == string(reboot.BlockedByAlerts) && !strings.Contains(cond.Message, "MaintenanceFreeze"), nil
		})
		cond = rebootCondition(t, c, "node-3")
		holdsNothing(t, c, "node-3", held)
		t.Logf("node-3 with Prometheus stopped: %s", cond.Message)
	})

	// A PromQL gate on a real Prometheus holds node-4's reboot until its
	// query's answer is empty: this query has one series until the time in
	// it, none after.
	t.Run("held by a PromQL gate until its query is empty", func(t *testing.T) {
		startCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		prom, err := testenv.StartPrometheus(startCtx, filepath.Dir(promBin), t.TempDir(), map[string][]byte{
			"prometheus.yml": []byte("global:\n  evaluation_interval: 1s\n"),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = prom.Stop() })
		until := time.Now().Add(20 * time.Second).Unix()
		query := fmt.Sprintf("vector(time()) < %d", until)
		gates := fmt.Sprintf(`[{"name":"freeze","query":%q}]`, query)
		start(t, "node-4", "--reboot-prometheus-url="+prom.URL, "--reboot-gates="+gates)
		cond := waitRebootReason(t, c, "node-4", string(reboot.BlockedByGates))
		if !strings.Contains(cond.Message, "blocked by gates freeze ("+query+") has 1 series: {} ") {
			t.Errorf("message %q: want the gate, its query and its answer", cond.Message)
		}
		holdsNothing(t, c, "node-4", held)
		t.Logf("node-4 while the gate holds: %s", cond.Message)
		cond = waitRebootReason(t, c, "node-4", string(reboot.WaitingForSlot))
		if now := time.Now().Unix(); now < until {
			t.Errorf("node-4 went past its gate at %d, while the query still had a series (until %d)", now, until)
		}
		t.Logf("node-4 once the query is empty: %s", cond.Message)
	})

	out, err := exec.Command(agentBinary, "reboot", "status", "--kubeconfig", b.env.KubeconfigPath()).CombinedOutput()
	if err != nil {
		t.Fatalf("node-agent reboot status: %v\n%s", err, out)
	}
	for _, want := range []string{"node-1", "OutsideWindow", "node-2", "WaitingForDrainSlot", "node-3", "BlockedByAlerts"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("node-agent reboot status lacks %q:\n%s", want, out)
		}
	}
	t.Logf("node-agent reboot status:\n%s", out)
}

func rebootCondition(t *testing.T, c kubernetes.Interface, node string) *corev1.NodeCondition {
	n, err := c.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == reboot.ConditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func waitRebootReason(t *testing.T, c kubernetes.Interface, node, reason string) *corev1.NodeCondition {
	t.Helper()
	var cond *corev1.NodeCondition
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%s: condition %s reason %s", node, reboot.ConditionType, reason), func() (bool, error) {
		cond = rebootCondition(t, c, node)
		return cond != nil && cond.Reason == reason, nil
	})
	return cond
}

// holdsNothing: the node is neither cordoned nor draining, and holds no
// slot; the slot held stays node-9's.
func holdsNothing(t *testing.T, c kubernetes.Interface, node string, held *slots.Grant) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reboot.ParseRecord(n)
	if err != nil || rec == nil {
		t.Fatalf("record: %v %v", rec, err)
	}
	if n.Spec.Unschedulable || rec.Drain || rec.Slot != "" || n.Annotations[selfdrain.StatusAnnotation] != "" {
		t.Errorf("%s: unschedulable %v, drain %v, slot %q, maintenance %q", node, n.Spec.Unschedulable, rec.Drain, rec.Slot, n.Annotations[selfdrain.StatusAnnotation])
	}
	if g, err := slots.ParseGrant(n); err != nil || (g != nil && g.State == slots.Granted) {
		t.Errorf("%s: grant %+v (%v), want none granted", node, g, err)
	}
	if _, err := c.CoordinationV1().Leases("node-agent").Get(t.Context(), slots.LeaseName(node), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s's slot Lease: %v, want none", node, err)
	}
	l, err := c.CoordinationV1().Leases("node-agent").Get(t.Context(), held.Slot, metav1.GetOptions{})
	if err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "node-9" {
		t.Errorf("slot %s: %v %v, want still node-9's", held.Slot, l, err)
	}
}
