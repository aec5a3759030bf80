package selfdrain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// lastTransitionTime moves only when the status does.
func TestPatchConditionKeepsTheTransitionTime(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	at := func(s int) metav1.Time {
		return metav1.NewTime(h.clock.Now().Add(time.Duration(s) * time.Second).Truncate(time.Second))
	}
	steps := []struct {
		status         corev1.ConditionStatus
		reason         string
		now            metav1.Time
		wantTransition metav1.Time
	}{
		{corev1.ConditionTrue, ReasonWaiting, at(0), at(0)},
		{corev1.ConditionTrue, ReasonDraining, at(10), at(0)},
		{corev1.ConditionTrue, ReasonDrained, at(20), at(0)},
		{corev1.ConditionFalse, "Ended", at(30), at(30)},
	}
	for _, s := range steps {
		if _, err := setCondition(ctx, kubetest.Wrap(h.client), testNode, nil, s.status, s.reason, "msg", s.now); err != nil {
			t.Fatal(err)
		}
		c := h.condition(ConditionType)
		if c == nil || c.Reason != s.reason || !c.LastHeartbeatTime.Equal(&s.now) || !c.LastTransitionTime.Equal(&s.wantTransition) {
			t.Errorf("after %s: condition %+v, want heartbeat %s and transition %s", s.reason, c, s.now, s.wantTransition)
		}
	}
}
