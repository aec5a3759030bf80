package maintenance

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

func TestDisrupted(t *testing.T) {
	ended := metav1.Now()
	st := func(s selfdrain.Status) map[string]string {
		return map[string]string{selfdrain.StatusAnnotation: status(s)}
	}
	rec := func(s reboot.State) map[string]string {
		return map[string]string{reboot.RecordAnnotation: rebootRecord(reboot.Record{State: s, Reason: string(s)})}
	}
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		want        string // "" for not disrupted
	}{
		{"nothing", nil, ""},
		{"maintenance waiting for a slot", st(selfdrain.Status{Trigger: selfdrain.TriggerAnnotation, Phase: selfdrain.PhaseWaiting, Reason: "bios"}), ""},
		{"maintenance draining", st(selfdrain.Status{Trigger: selfdrain.TriggerAnnotation, Phase: selfdrain.PhaseRunning, Reason: "bios"}), "maintenance of node-1 (bios, Running)"},
		{"maintenance drained", st(selfdrain.Status{Trigger: selfdrain.TriggerNodeMaintenance, Phase: selfdrain.PhaseSucceeded}), "maintenance of node-1 (nodemaintenance, Succeeded)"},
		{"maintenance past its timeout, still cordoned", st(selfdrain.Status{Trigger: selfdrain.TriggerAnnotation, Phase: selfdrain.PhaseFailed, Reason: "bios"}), "maintenance of node-1 (bios, Failed)"},
		{"maintenance past its timeout, undone (drain.onTimeout uncordon)", st(selfdrain.Status{Trigger: selfdrain.TriggerAnnotation, Phase: selfdrain.PhaseFailed, Reason: "bios", UndoneAt: &ended}), ""},
		{"maintenance ended", st(selfdrain.Status{Trigger: selfdrain.TriggerAnnotation, Phase: selfdrain.PhaseSucceeded, EndTime: &ended}), ""},
		{"reboot pending", rec(reboot.Pending), ""},
		{"reboot draining", rec(reboot.Draining), "reboot of node-1 (Draining)"},
		{"reboot rebooting", rec(reboot.Rebooting), "reboot of node-1 (Rebooting)"},
		{"reboot done", rec(reboot.Done), ""},
		{"malformed status: no guess", map[string]string{selfdrain.StatusAnnotation: `{"phase":"Sideways"}`}, ""},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: tt.annotations}}
		got, why := Disrupted(node)
		if got != (tt.want != "") || (tt.want != "" && !strings.HasPrefix(why, tt.want)) {
			t.Errorf("%s: Disrupted = %v %q, want %q", tt.name, got, why, tt.want)
		}
	}
}
