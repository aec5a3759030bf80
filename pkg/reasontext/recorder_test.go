package reasontext

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

func TestRecorderMakesMessagesPrintable(t *testing.T) {
	fake := record.NewFakeRecorder(3)
	r := Recorder(fake)
	node := &corev1.Node{}
	r.Event(node, corev1.EventTypeWarning, "GateHeld", "gate says \x1b]0;pwned\x07")
	r.Eventf(node, corev1.EventTypeWarning, "GateHeld", "alert %s", "a\u202eb")
	r.Eventf(node, corev1.EventTypeNormal, "X", "%s", strings.Repeat("y", 2*MaxMessage))
	want := []string{`Warning GateHeld gate says \x1b]0;pwned\x07`, `Warning GateHeld alert a\u202eb`}
	for i, w := range want {
		if got := <-fake.Events; got != w {
			t.Errorf("event %d = %q, want %q", i, got, w)
		}
	}
	if got := <-fake.Events; len(got) > MaxMessage+len("Normal X ") || !strings.HasSuffix(got, Marker) {
		t.Errorf("long event not cut: %d bytes", len(got))
	}
}
