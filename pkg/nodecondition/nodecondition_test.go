package nodecondition

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/reasontext"
)

func TestSetKeepsTheTransitionWhileTheStatusStays(t *testing.T) {
	ctx := t.Context()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	nodes := kubetest.Wrap(cs).CoreV1().Nodes()
	t0 := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	t2 := metav1.NewTime(t0.Add(2 * time.Minute))

	n, err := Set(ctx, nodes, "n", nil, "UnderMaintenance", corev1.ConditionTrue, "Draining", "draining", t0)
	if err != nil {
		t.Fatal(err)
	}
	// The same status with another reason: the transition stays, the
	// heartbeat moves; the known copy saves the read.
	if n, err = Set(ctx, nodes, "n", n, "UnderMaintenance", corev1.ConditionTrue, "Drained", strings.Repeat("x", 2*reasontext.MaxMessage), t1); err != nil {
		t.Fatal(err)
	}
	c := find(n, "UnderMaintenance")
	if c == nil || c.Reason != "Drained" || !c.LastTransitionTime.Equal(&t0) || !c.LastHeartbeatTime.Equal(&t1) {
		t.Fatalf("after a second True: %+v; want reason Drained, transition %v, heartbeat %v", c, t0, t1)
	}
	if len(c.Message) > reasontext.MaxMessage+len(reasontext.Marker) || !strings.HasSuffix(c.Message, reasontext.Marker) {
		t.Errorf("a long message is not cut: %d bytes", len(c.Message))
	}
	// Another status is a transition.
	if n, err = Set(ctx, nodes, "n", nil, "UnderMaintenance", corev1.ConditionFalse, "Ended", "", t2); err != nil {
		t.Fatal(err)
	}
	if c := find(n, "UnderMaintenance"); c == nil || !c.LastTransitionTime.Equal(&t2) {
		t.Fatalf("after False: %+v; want transition %v", c, t2)
	}

	if _, err := Set(ctx, nodes, "n", nil, "NodeShuttingDown", corev1.ConditionTrue, "PrepareForShutdown", "", t2); err != nil {
		t.Fatal(err)
	}
	if n, err = Remove(ctx, nodes, "n", "UnderMaintenance", "NodeShuttingDown"); err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Conditions) != 0 {
		t.Errorf("conditions left after Remove: %+v", n.Status.Conditions)
	}
	if _, err := Set(ctx, nodes, "missing", nil, "UnderMaintenance", corev1.ConditionTrue, "R", "", t0); err == nil || !strings.Contains(err.Error(), "setting condition UnderMaintenance on Node missing") {
		t.Errorf("Set on a missing Node: %v", err)
	}
}

func find(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
