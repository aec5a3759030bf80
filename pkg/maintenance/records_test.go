package maintenance

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

func node(annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: annotations}}
}

func rebootRecord(r reboot.Record) string { return r.Encode() }

func status(s selfdrain.Status) string { return s.Encode() }

// Every state of the coordinator's record, as selfdrain reads it.
func TestDrainRequest(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{name: "no record", want: ""},
		{name: "idle", annotations: map[string]string{reboot.RecordAnnotation: rebootRecord(reboot.Record{State: reboot.NotNeeded, Reason: "NotNeeded"})}, want: ""},
		{name: "waiting for a slot asks for nothing", annotations: map[string]string{reboot.RecordAnnotation: rebootRecord(reboot.Record{State: reboot.Pending, Reason: "WaitingForSlot", Phase: reboot.PhaseWaitingForSlot})}, want: ""},
		{name: "draining asks, with the coordinator's message", annotations: map[string]string{reboot.RecordAnnotation: rebootRecord(reboot.Record{
			State: reboot.Draining, Reason: "Draining", Phase: reboot.PhaseDraining, Drain: true, Message: "sentinel file /run/reboot-required exists; draining the node before the reboot"})},
			want: "reboot controller: sentinel file /run/reboot-required exists; draining the node before the reboot"},
		{name: "rebooting still asks", annotations: map[string]string{reboot.RecordAnnotation: rebootRecord(reboot.Record{
			State: reboot.Rebooting, Reason: "Rebooting", Phase: reboot.PhaseRebootRequested, Drain: true, Message: "waiting for the host to reboot"})},
			want: "reboot controller: waiting for the host to reboot"},
		{name: "back and undone asks no longer", annotations: map[string]string{reboot.RecordAnnotation: rebootRecord(reboot.Record{State: reboot.Rebooting, Reason: "Rebooting", Phase: reboot.PhaseBack})}, want: ""},
		{name: "a malformed record asks for nothing", annotations: map[string]string{reboot.RecordAnnotation: `{"state":"Draining","drain":true,"phase":"Sideways"}`}, want: ""},
		{name: "the maintenance annotation is not the coordinator's", annotations: map[string]string{selfdrain.MaintenanceAnnotation: "kernel"}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DrainRequest(node(tt.annotations)); got != tt.want {
				t.Errorf("DrainRequest = %q, want %q", got, tt.want)
			}
		})
	}
}

// Every state of selfdrain's record, as the coordinator reads it.
func TestMaintenance(t *testing.T) {
	ended := metav1.Now()
	st := func(trigger selfdrain.Trigger, phase selfdrain.Phase) string {
		return status(selfdrain.Status{Trigger: trigger, Phase: phase})
	}
	tests := []struct {
		name        string
		annotations map[string]string
		want        reboot.Maintenance
		wantErr     bool
	}{
		{name: "none"},
		{name: "annotation asked, not started", annotations: map[string]string{selfdrain.MaintenanceAnnotation: "kernel"}, want: reboot.Maintenance{Other: true}},
		{name: "blank annotation asks for nothing", annotations: map[string]string{selfdrain.MaintenanceAnnotation: "  "}},
		// The agent refuses "false" and starts nothing: the reboot need not
		// wait for it.
		{name: "refused annotation asks for nothing", annotations: map[string]string{selfdrain.MaintenanceAnnotation: "false"}},
		{name: "refused annotation over the annotation's maintenance, which goes on", annotations: map[string]string{
			selfdrain.MaintenanceAnnotation: "Off", selfdrain.StatusAnnotation: st(selfdrain.TriggerAnnotation, selfdrain.PhaseSucceeded)}, want: reboot.Maintenance{Other: true}},
		{name: "annotation maintenance running", annotations: map[string]string{selfdrain.StatusAnnotation: st(selfdrain.TriggerAnnotation, selfdrain.PhaseRunning)}, want: reboot.Maintenance{Other: true}},
		{name: "NodeMaintenance waiting for a slot", annotations: map[string]string{selfdrain.StatusAnnotation: st(selfdrain.TriggerNodeMaintenance, selfdrain.PhaseWaiting)}, want: reboot.Maintenance{Other: true}},
		{name: "after a shutdown drain, not yet undone", annotations: map[string]string{selfdrain.StatusAnnotation: st(selfdrain.TriggerShutdown, selfdrain.PhaseSucceeded)}, want: reboot.Maintenance{Other: true}},
		{name: "the reboot's drain running", annotations: map[string]string{selfdrain.StatusAnnotation: st(selfdrain.TriggerReboot, selfdrain.PhaseRunning)}, want: reboot.Maintenance{Active: true}},
		{name: "the reboot's drain done", annotations: map[string]string{selfdrain.StatusAnnotation: st(selfdrain.TriggerReboot, selfdrain.PhaseSucceeded)}, want: reboot.Maintenance{Active: true, Drained: true}},
		{name: "the reboot's drain past drain.timeout", annotations: map[string]string{selfdrain.StatusAnnotation: st(selfdrain.TriggerReboot, selfdrain.PhaseFailed)}, want: reboot.Maintenance{Active: true, TimedOut: true}},
		{name: "the reboot's drain and the annotation", annotations: map[string]string{selfdrain.StatusAnnotation: st(selfdrain.TriggerReboot, selfdrain.PhaseRunning), selfdrain.MaintenanceAnnotation: "kernel"},
			want: reboot.Maintenance{Other: true, Active: true}},
		{name: "ended: nothing in force", annotations: map[string]string{selfdrain.StatusAnnotation: status(selfdrain.Status{Trigger: selfdrain.TriggerReboot, Phase: selfdrain.PhaseSucceeded, EndTime: &ended})}},
		{name: "malformed: an error, not a guess", annotations: map[string]string{selfdrain.StatusAnnotation: `{"phase":"Sideways"}`}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Maintenance(node(tt.annotations))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Maintenance = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// An owner annotation keeps the reboot waiting, as the maintenance
// annotation does.
func TestMaintenanceOwnerAnnotationIsOther(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{OwnerAnnotationPrefix + "net": "fw"}}}
	m, err := Maintenance(node)
	if err != nil || !m.Other {
		t.Errorf("Maintenance = %+v, %v; want Other", m, err)
	}
}
