package selfdrain

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCordonedByAgent(t *testing.T) {
	now := metav1.Now()
	record := func(st Status) string {
		st.Trigger = TriggerAnnotation
		return st.Encode()
	}
	for _, tc := range []struct {
		name          string
		unschedulable bool
		status        string
		want          bool
	}{
		{"the agent's running maintenance cordoned it", true, record(Status{Phase: PhaseRunning, CordonedByAgent: true}), true},
		{"drained and kept cordoned", true, record(Status{Phase: PhaseSucceeded, CordonedByAgent: true}), true},
		{"timed out, kept cordoned", true, record(Status{Phase: PhaseFailed, CordonedByAgent: true}), true},
		{"an admin cordoned it before the maintenance", true, record(Status{Phase: PhaseRunning, CordonedByAgent: false}), false},
		{"cordoned while the maintenance waits for its slot", true, record(Status{Phase: PhaseWaiting}), false},
		{"the maintenance ended; cordoned since by someone else", true, record(Status{Phase: PhaseSucceeded, CordonedByAgent: true, EndTime: &now}), false},
		{"undone at the timeout; cordoned since by someone else", true, record(Status{Phase: PhaseFailed, CordonedByAgent: true, UndoneAt: &now}), false},
		{"no record", true, "", false},
		{"a record that cannot be read", true, `{"phase":"Running","cordonedByAgent":true,"made-up":1}`, false},
		{"not cordoned", false, record(Status{Phase: PhaseRunning, CordonedByAgent: true}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Unschedulable: tc.unschedulable}}
			if tc.status != "" {
				n.Annotations = map[string]string{StatusAnnotation: tc.status}
			}
			if got := CordonedByAgent(n); got != tc.want {
				t.Errorf("CordonedByAgent = %v, want %v", got, tc.want)
			}
		})
	}
}
