package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestRebootBlockerBound: a tenant's pod, pinned to a node and matching
// reboot.blockingPodSelector, holds the node's needed reboot only until
// reboot.blockerBound (3s here). Then, with reboot.onBlockerBound wait, the
// node keeps waiting and says so; with proceed it goes on to the slot queue
// with the pod still there. Either way a Warning Event on the Node names
// the pod and the decision, and the record carries it. A pod outside
// reboot.blockingPodNamespaces holds nothing. node-9 holds the only slot
// throughout, so that nothing drains or reboots.
func TestRebootBlockerBound(t *testing.T) {
	// In parallel (main_test.go): most of it is waiting out a bound.
	t.Parallel()
	b := newDrainBed(t)
	c := b.env.Client()
	ctx := t.Context()
	if err := b.env.AddNodes(ctx, []string{"node-2", "node-3", "node-9"}); err != nil {
		t.Fatal(err)
	}
	startCoordinator(t, b.env, "--reboot-enabled=true")
	held := holdSlot(t, c, "node-9")
	start := func(t *testing.T, node string, args ...string) {
		sentinel := filepath.Join(t.TempDir(), "reboot-required")
		if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		a := startAgent(t, b.env, node, append([]string{"--reboot-enabled=true", "--reboot-sentinel-file=" + sentinel,
			"--reboot-check-interval=1s", "--shutdown-enabled=false", "--reboot-blocking-pod-selector=app=tenant"}, args...)...)
		a.WaitReady(t)
	}
	// The tenant's pod on each node, in the tenant's own namespace.
	if _, err := b.env.CreateNamespace(ctx, "tenant"); err != nil {
		t.Fatal(err)
	}
	// A bare pod pinned by spec.nodeName, as a tenant may create one in
	// its namespace: nothing the scheduler or a controller moves.
	for _, node := range []string{"node-1", "node-2", "node-3"} {
		tpl := testenv.PodTemplate("tenant", "")
		tpl.Spec.NodeName = node
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + node, Namespace: "tenant", Labels: tpl.Labels}, Spec: tpl.Spec}
		if _, err := c.CoreV1().Pods("tenant").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"node-1", "node-2", "node-3"} {
		testenv.WaitRunningOn(ctx, t, c, "tenant", node, 1)
	}

	t.Run("wait: held past the bound, and said", func(t *testing.T) {
		start(t, "node-1", "--reboot-blocker-bound=3s", "--reboot-on-blocker-bound=wait")
		rec := waitBoundExceeded(t, c, "node-1", reboot.BoundWait)
		cond := rebootCondition(t, c, "node-1")
		if cond.Reason != string(reboot.BlockedByPods) || !strings.Contains(cond.Message, "tenant/tenant-node-1") ||
			!strings.Contains(cond.Message, "reboot.onBlockerBound=wait") {
			t.Errorf("condition %s: %s; want BlockedByPods naming the pod and the decision", cond.Reason, cond.Message)
		}
		ev := boundEvent(t, c, "node-1")
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "tenant/tenant-node-1") || !strings.Contains(ev.Message, "wait") {
			t.Errorf("Event %s %s: %s; want a Warning naming the pod and the decision", ev.Type, ev.Reason, ev.Message)
		}
		holdsNothing(t, c, "node-1", held)
		t.Logf("node-1: %s (blocked since %v)", cond.Message, rec.BlockedSince)
	})

	t.Run("proceed: the pod is passed over", func(t *testing.T) {
		start(t, "node-2", "--reboot-blocker-bound=3s", "--reboot-on-blocker-bound=proceed")
		waitBoundExceeded(t, c, "node-2", reboot.BoundProceed)
		cond := waitRebootReason(t, c, "node-2", string(reboot.WaitingForSlot))
		if !strings.Contains(cond.Message, "tenant/tenant-node-2") || !strings.Contains(cond.Message, "passed over") {
			t.Errorf("condition %s: %s; want the pod named as passed over", cond.Reason, cond.Message)
		}
		ev := boundEvent(t, c, "node-2")
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "tenant/tenant-node-2") || !strings.Contains(ev.Message, "proceed") {
			t.Errorf("Event %s %s: %s; want a Warning naming the pod and the decision", ev.Type, ev.Reason, ev.Message)
		}
		// Still there: the reboot goes on without it.
		if pods, err := testenv.PodsOn(ctx, c, "tenant", "node-2"); err != nil || testenv.RunningPods(pods) != 1 {
			t.Errorf("the tenant's pod on node-2: %d running (%v), want it still running", testenv.RunningPods(pods), err)
		}
		t.Logf("node-2: %s", cond.Message)
	})

	t.Run("a namespace not listed holds nothing", func(t *testing.T) {
		start(t, "node-3", "--reboot-blocking-pod-namespaces=infra")
		cond := waitRebootReason(t, c, "node-3", string(reboot.WaitingForSlot))
		if strings.Contains(cond.Message, "tenant/") {
			t.Errorf("condition %s: %s; the tenant's pod is named", cond.Reason, cond.Message)
		}
		holdsNothing(t, c, "node-3", held)
	})
}

// waitBoundExceeded waits until node's reboot record says the blockers held
// it past reboot.blockerBound, and what was decided.
func waitBoundExceeded(t *testing.T, c kubernetes.Interface, node, decision string) *reboot.Record {
	t.Helper()
	var rec *reboot.Record
	testenv.WaitFor(t, 2*time.Minute, node+": the reboot record says boundExceeded "+decision, func() (bool, error) {
		var err error
		rec, err = reboot.ParseRecord(getNode(t, c, node))
		return err == nil && rec != nil && rec.BoundExceeded == decision && rec.BlockedSince != nil, err
	})
	return rec
}

// boundEvent is the RebootBlockerBoundExceeded Event about node.
func boundEvent(t *testing.T, c kubernetes.Interface, node string) corev1.Event {
	t.Helper()
	var ev corev1.Event
	testenv.WaitFor(t, time.Minute, node+": Event RebootBlockerBoundExceeded", func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=RebootBlockerBoundExceeded"})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		ev = evs.Items[0]
		return true, nil
	})
	return ev
}
