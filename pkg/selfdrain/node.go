package selfdrain

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/nodecondition"
	"github.com/node-agent/node-agent/pkg/ownnode"
)

// hasTaint reports whether node carries a NoSchedule taint with key.
func hasTaint(node *corev1.Node, key string) bool {
	return ownnode.HasTaint(node, key, corev1.TaintEffectNoSchedule)
}

// cordonAndTaint marks node unschedulable and adds the drain taint. When st
// is a fresh status (not resumed), it first records whether the node was
// already cordoned or tainted, so the end of maintenance leaves those alone.
// It reports whether node changed.
func cordonAndTaint(node *corev1.Node, taintKey string, st *Status, fresh bool, now metav1.Time) {
	if fresh {
		st.CordonedByAgent = !node.Spec.Unschedulable
		st.TaintedByAgent = !hasTaint(node, taintKey)
	}
	node.Spec.Unschedulable = true
	if !hasTaint(node, taintKey) {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{
			Key: taintKey, Value: TaintValue, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now,
		})
	}
	setStatusAnnotation(node, st)
}

// undo reverses what st records the agent did: it uncordons only a node the
// agent cordoned and removes the taint only when the agent added it. After
// the undo at a timeout (st.UndoneAt) nothing is left to reverse: whoever
// cordoned or tainted the node since did so on their own.
func undo(node *corev1.Node, taintKey string, st *Status) {
	if st.UndoneAt != nil {
		setStatusAnnotation(node, st)
		return
	}
	if st.CordonedByAgent {
		node.Spec.Unschedulable = false
	}
	if st.TaintedByAgent {
		ownnode.RemoveTaint(node, taintKey, corev1.TaintEffectNoSchedule)
	}
	setStatusAnnotation(node, st)
}

func setStatusAnnotation(node *corev1.Node, st *Status) {
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[StatusAnnotation] = st.Encode()
}

// updateNode writes what the engine may change of its Node
// (spec.unschedulable, spec.taints and the status annotation) through
// pkg/ownnode: a merge patch conditional on the resourceVersion read,
// retried on conflict. mutate returns false to skip the write; first, when
// not nil, is a recent copy to start from instead of a GET.
func updateNode(ctx context.Context, client kube.Interface, name string, first *corev1.Node, mutate func(*corev1.Node) (bool, error)) (*corev1.Node, error) {
	return ownnode.Update(ctx, client.CoreV1().Nodes(), name, first,
		ownnode.Write{FieldManager: FieldManager, Cordon: true, Annotations: []string{StatusAnnotation}}, mutate)
}

// FieldManager names the agent in managedFields.
const FieldManager = "node-agent"

// patchStatusAnnotation writes only the status annotation, with a merge
// patch that cannot clobber other fields. It returns the Node as written.
func patchStatusAnnotation(ctx context.Context, client kube.Interface, name string, st *Status) (*corev1.Node, error) {
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{StatusAnnotation: st.Encode()}}}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	node, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("writing maintenance status on Node %s: %w", name, err)
	}
	return node, nil
}

// setCondition writes the UnderMaintenance condition (pkg/nodecondition).
func setCondition(ctx context.Context, client kube.Interface, name string, known *corev1.Node, status corev1.ConditionStatus, reason, message string, now metav1.Time) (*corev1.Node, error) {
	return nodecondition.Set(ctx, client.CoreV1().Nodes(), name, known, ConditionType, status, reason, message, now)
}

// CordonedByAgent reports whether node's cordon is node-agent's own: the
// node is unschedulable, and its maintenance record (StatusAnnotation) says
// that a maintenance that has not ended cordoned it and has not undone that
// (drain.onTimeout uncordon). The drain slot coordinator's safety stop
// (slots.pools[].maxUnhealthy) leaves such nodes out, as it does nodes that
// hold a slot. A record that cannot be read says nothing: the cordon is
// then someone else's, which keeps the safety stop on the safe side.
//
// The record is written with the node's own credentials, which may also
// cordon and uncordon that node and report it Ready: a node that lies here
// lies about nothing it could not make true itself.
func CordonedByAgent(node *corev1.Node) bool {
	if !node.Spec.Unschedulable {
		return false
	}
	st, err := ParseStatus(node)
	return err == nil && st.Active() && st.CordonedByAgent && st.UndoneAt == nil
}
