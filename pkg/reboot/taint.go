package reboot

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/ownnode"
)

// PendingTaintKey is the taint the controller keeps on its Node, with the
// effect PreferNoSchedule, while the node's reboot is needed and not done
// (reboot.preferNoScheduleTaint): the scheduler then places new pods on
// other nodes when it can, rather than on one whose drain would evict them
// again soon; kured's --prefer-no-schedule-taint does the same. The key is
// fixed, never configured, so that the admission policy can let the agent
// add and remove this one taint and no other (deploy/admission-policy.yaml).
// It is the agent's own: the controller removes it wherever it finds it
// unwanted, also one an earlier run left (an agent restarted after the
// reboot, or with the key turned off).
//
// PreferNoSchedule only scores: a pod that fits nowhere else still lands
// here, and neither the drain slot coordinator (pkg/slots counts a node as
// unavailable when it is not Ready or is unschedulable) nor the drain's
// placement check (pkg/placement, NoSchedule and NoExecute only) counts it.
const PendingTaintKey = "node-agent.io/reboot-pending"

// PendingTaintEffect is PendingTaintKey's effect.
const PendingTaintEffect = corev1.TaintEffectPreferNoSchedule

// wantsPendingTaint says whether d wants PendingTaintKey on the Node: yes
// while the reboot is needed and not done (Pending, for any reason, then
// Draining and Rebooting until the node is back and uncordoned); no when
// none is needed, it was called off, it is done, given up (DrainFailed) or
// held by the loop guard (RebootLoop), none of which reboots the node
// soon. known is false while the need is unknown (the sentinel cannot be
// read): the taint then stays as it is, so that a passing error does not
// move the cluster's pods.
func wantsPendingTaint(d Decision) (want, known bool) {
	if d.Status == corev1.ConditionUnknown {
		return false, false
	}
	switch d.State {
	case Pending, Draining, Rebooting:
		return d.Status == corev1.ConditionTrue, true
	}
	return false, true
}

// keepPendingTaint adds or removes PendingTaintKey on the Node as d wants
// it, and reboot.preferNoScheduleTaint allows it. node is the cached copy:
// nothing is written while it shows the taint as wanted. Otherwise the
// write starts from a read of the Node, not from node: the cache may be
// behind the controller's own last change of the taint, or the drain
// engine's of the cordon and its taint, and a read (two per reboot) costs
// less than the conflicts. It writes the taints alone, conditional on the
// resourceVersion read.
func (c *Controller) keepPendingTaint(ctx context.Context, node *corev1.Node, d Decision) error {
	want, known := wantsPendingTaint(d)
	if !known {
		return nil
	}
	want = want && c.o.PreferNoScheduleTaint
	if ownnode.HasTaint(node, PendingTaintKey, PendingTaintEffect) == want {
		return nil
	}
	now := metav1.NewTime(c.o.Clock.Now())
	changed := false
	_, err := ownnode.Update(ctx, c.o.Client.CoreV1().Nodes(), c.o.NodeName, nil, ownnode.Write{FieldManager: FieldManager},
		func(n *corev1.Node) (bool, error) {
			if want {
				changed = ownnode.AddTaint(n, corev1.Taint{Key: PendingTaintKey, Effect: PendingTaintEffect, TimeAdded: &now})
			} else {
				changed = ownnode.RemoveTaint(n, PendingTaintKey, PendingTaintEffect)
			}
			return changed, nil
		})
	if err != nil {
		verb := "removing"
		if want {
			verb = "adding"
		}
		return fmt.Errorf("%s the taint %s:%s: %w", verb, PendingTaintKey, PendingTaintEffect, err)
	}
	if changed {
		c.log.Info("Reboot-pending taint changed", "taint", PendingTaintKey, "effect", PendingTaintEffect, "present", want, "state", d.State)
	}
	return nil
}
