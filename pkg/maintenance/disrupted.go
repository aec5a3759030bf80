package maintenance

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// Disrupted says whether node is drained, being drained or rebooting by the
// agent's doing, the time its alerts are expected and may be silenced
// (silence.Keeper): selfdrain's record of a maintenance in force past its
// wait for a slot (Running, Succeeded, or Failed and not undone: a drain
// that timed out and was undone by drain.onTimeout uncordon leaves the node
// schedulable, and its alerts count again), or the reboot controller's
// record Draining or Rebooting. why says which,
// for the silence's comment. A record that cannot be read counts as not
// disrupted: a silence is never made on a guess.
func Disrupted(node *corev1.Node) (disrupted bool, why string) {
	if st, err := selfdrain.ParseStatus(node); err == nil && st.Active() && st.Phase != selfdrain.PhaseWaiting && st.UndoneAt == nil {
		reason := st.Reason
		if reason == "" {
			reason = string(st.Trigger)
		}
		return true, fmt.Sprintf("maintenance of %s (%s, %s)", node.Name, reason, st.Phase)
	}
	if rec, err := reboot.ParseRecord(node); err == nil && rec != nil && (rec.State == reboot.Draining || rec.State == reboot.Rebooting) {
		return true, fmt.Sprintf("reboot of %s (%s)", node.Name, rec.State)
	}
	return false, ""
}
