package maintenance

import (
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// What follows a timeout, per trigger and drain.onTimeout: the reboot's
// drain is the reboot controller's to end; the others give their slot to
// the next node and stay cordoned or are undone.
func TestAfterTimeout(t *testing.T) {
	tests := []struct {
		onTimeout string
		trigger   selfdrain.Trigger
		undo      bool
		says      string
	}{
		{config.OnTimeoutKeepCordoned, selfdrain.TriggerAnnotation, false, "stays cordoned and tainted"},
		{config.OnTimeoutUncordon, selfdrain.TriggerAnnotation, true, "undoes its cordon"},
		{config.OnTimeoutUncordon, selfdrain.TriggerNodeMaintenance, true, "drain slot goes to the next node"},
		{config.OnTimeoutUncordon, selfdrain.TriggerReboot, false, "reboot controller, which holds the drain slot, decides"},
		{config.OnTimeoutKeepCordoned, selfdrain.TriggerReboot, false, "reboot controller, which holds the drain slot, decides"},
	}
	for _, tt := range tests {
		if got := undoesOnTimeout(tt.onTimeout, tt.trigger); got != tt.undo {
			t.Errorf("%s, %s: undoes %v, want %v", tt.onTimeout, tt.trigger, got, tt.undo)
		}
		if got := afterTimeout(tt.onTimeout, tt.trigger); !strings.Contains(got, tt.says) {
			t.Errorf("%s, %s: %q lacks %q", tt.onTimeout, tt.trigger, got, tt.says)
		}
	}
}
