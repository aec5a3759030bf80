package maintenance

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// DrainRequestPrefix starts the reason of a drain the coordinator asks for,
// as selfdrain records it in its status and Events.
const DrainRequestPrefix = "reboot controller: "

// DrainRequest says whether the reboot controller asks for the drain of
// node, with the reason; "" when it does not
// (ControllerOptions.RebootDrain). A record that cannot be read
// asks for nothing: the coordinator itself does nothing on it until an admin
// fixes or deletes it, and says so.
func DrainRequest(node *corev1.Node) string {
	rec, err := reboot.ParseRecord(node)
	if err != nil || rec == nil || !rec.Drain {
		return ""
	}
	return DrainRequestPrefix + rec.Message
}

// Maintenance reads selfdrain's record on node for the reboot controller
// (reboot.ControllerOptions.Maintenance). A maintenance whose trigger is not the
// reboot's (the annotation, a NodeMaintenance object, a shutdown) is Other,
// and so is the maintenance annotation, or an owner annotation, set to a
// value the agent accepts while none has started: the reboot waits until it ends rather than share
// its drain or its slot. A status that cannot be read is an error: the
// coordinator does not act on a guess.
func Maintenance(node *corev1.Node) (reboot.Maintenance, error) {
	st, err := selfdrain.ParseStatus(node)
	if err != nil {
		return reboot.Maintenance{}, err
	}
	// A refused value of the annotation (such as "false") asks for no
	// maintenance; one it asked for before is in the status below.
	asked, _ := selfdrain.ParseMaintenanceRequest(node)
	m := reboot.Maintenance{Other: asked != "" || HasOwnerRequest(node)}
	if !st.Active() {
		return m, nil
	}
	if st.Trigger != selfdrain.TriggerReboot {
		m.Other = true
		return m, nil
	}
	m.Active = true
	m.Drained = st.Phase == selfdrain.PhaseSucceeded
	m.TimedOut = st.Phase == selfdrain.PhaseFailed
	return m, nil
}
