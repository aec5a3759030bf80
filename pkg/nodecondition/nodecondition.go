// Package nodecondition owns how node-agent writes its conditions on its
// own Node (UnderMaintenance, NodeShuttingDown, the reboot's): one patch
// of the status subresource per write, the last transition kept while the
// status stays, the message cut to reasontext's bound. The drain engine
// and the reboot controller both write through it.
package nodecondition

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/reasontext"
)

// Set sets the condition typ on the Node name with a strategic merge patch
// of the status subresource (conditions merge on type).
// lastTransitionTime is the time the status last changed, as the API
// conventions define it: a write that keeps the status (Draining, then
// Drained, both True) keeps it too. known, when not nil, is a recent copy
// of the Node (the informer's) to read the condition's last transition
// from instead of a GET; the condition is node-agent's own, so only
// node-agent changes it. The message is cut to reasontext.MaxMessage: it
// may quote a reason someone else wrote. It returns the Node as written.
func Set(ctx context.Context, nodes kube.NodeInterface, name string, known *corev1.Node, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string, now metav1.Time) (*corev1.Node, error) {
	node := known
	if node == nil {
		var err error
		if node, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("setting condition %s on Node %s: %w", typ, name, err)
		}
	}
	transition := now
	for _, c := range node.Status.Conditions {
		if c.Type == typ && c.Status == status && !c.LastTransitionTime.IsZero() {
			transition = c.LastTransitionTime
		}
	}
	cond := map[string]any{
		"type": typ, "status": status, "reason": reason, "message": reasontext.ForNode(message, reasontext.MaxMessage),
		"lastHeartbeatTime": now, "lastTransitionTime": transition,
	}
	b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	if err != nil {
		return nil, err
	}
	written, err := nodes.PatchStatus(ctx, name, b)
	if err != nil {
		return nil, fmt.Errorf("setting condition %s on Node %s: %w", typ, name, err)
	}
	return written, nil
}

// Remove deletes the conditions types from the Node name, in one patch. It
// returns the Node as written.
func Remove(ctx context.Context, nodes kube.NodeInterface, name string, types ...corev1.NodeConditionType) (*corev1.Node, error) {
	var del []any
	for _, t := range types {
		del = append(del, map[string]any{"type": t, "$patch": "delete"})
	}
	b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": del}})
	if err != nil {
		return nil, err
	}
	n, err := nodes.PatchStatus(ctx, name, b)
	if err != nil {
		return nil, fmt.Errorf("removing conditions %v from Node %s: %w", types, name, err)
	}
	return n, nil
}
