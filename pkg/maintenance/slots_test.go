package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// TestSlotWaitNamesTheCause: the status and a Warning Event name the error
// and the key to fix, and errorOnLeaseCount counts consecutive errors.
func TestSlotWaitNamesTheCause(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	rec := record.NewFakeRecorder(10)
	e := selfdrain.NewEngine(selfdrain.EngineOptions{Client: kubetest.Wrap(client), NodeName: "node-1", Config: config.Default().Drain, Logger: slog.New(slog.DiscardHandler), Clock: clocktesting.NewFakeClock(time.Now()), Recorder: rec})
	w := &slotWait{e: e, trigger: selfdrain.TriggerNodeMaintenance, reason: "NIC replacement"}
	ctx := context.Background()
	cause := errors.New(`writing the drain slot request on Node node-1: nodes "node-1" is forbidden`)
	status := func() *selfdrain.Status {
		n, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := selfdrain.ParseStatus(n)
		if err != nil || st == nil {
			t.Fatalf("status %v, %v", st, err)
		}
		return st
	}

	w.report(ctx, cause)
	w.report(ctx, cause)
	st := status()
	if st.Phase != selfdrain.PhaseWaiting || st.Trigger != selfdrain.TriggerNodeMaintenance || st.ErrorOnLeaseCount != 2 ||
		!strings.Contains(st.LastError, `nodes "node-1" is forbidden`) || !strings.Contains(st.LastError, "cannot get a drain slot") {
		t.Errorf("status after two errors = %s", st.Encode())
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning DrainSlotError") || !strings.Contains(ev, "is forbidden") {
		t.Errorf("event = %q", ev)
	}
	select {
	case ev := <-rec.Events:
		t.Errorf("the same cause twice made a second Event: %q", ev)
	default:
	}

	// The slots are merely held: the count starts again.
	w.report(ctx, nil)
	st = status()
	if st.ErrorOnLeaseCount != 0 || !strings.Contains(st.LastError, "slots.limit") {
		t.Errorf("status after a plain wait = %s", st.Encode())
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Normal MaintenanceWaiting") {
		t.Errorf("event = %q", ev)
	}
}

// TestSlotWaitKeepsABegunDrain: a drain that already cordoned the node (the
// agent restarted mid-drain and cannot get a slot back) keeps its record of
// what the agent changed; only lastError and the count change.
func TestSlotWaitKeepsABegunDrain(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	begun := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerNodeMaintenance, Reason: "NIC", StartTime: &start,
		TotalPods: 5, EvictionPods: 4, PendingPods: []string{"work/a"}, DrainProgress: 75, CordonedByAgent: true, TaintedByAgent: true}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{selfdrain.StatusAnnotation: begun.Encode()}},
		Spec: corev1.NodeSpec{Unschedulable: true}}
	client := fake.NewClientset(node)
	e := selfdrain.NewEngine(selfdrain.EngineOptions{Client: kubetest.Wrap(client), NodeName: "node-1", Config: config.Default().Drain, Logger: slog.New(slog.DiscardHandler), Clock: clocktesting.NewFakeClock(time.Now()), Recorder: record.NewFakeRecorder(10)})
	w := &slotWait{e: e, trigger: selfdrain.TriggerNodeMaintenance, reason: "NIC"}
	w.report(context.Background(), errors.New("leases is forbidden"))
	n, err := client.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := selfdrain.ParseStatus(n)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != selfdrain.PhaseRunning || !st.CordonedByAgent || !st.TaintedByAgent || !st.StartTime.Equal(&start) || st.EvictionPods != 4 ||
		st.ErrorOnLeaseCount != 1 || !strings.Contains(st.LastError, "leases is forbidden") {
		t.Errorf("record after a slot error = %s", st.Encode())
	}
}
