// Package ownnode owns how node-agent writes the spec of its own Node: the
// cordon (spec.unschedulable) and the taints, with the agent's own
// annotations in the same request, as one merge patch conditional on the
// resourceVersion read and retried on conflict, so that a concurrent
// writer's change is never overwritten. It also owns the taint helpers the
// writers share. The drain engine (pkg/selfdrain: the cordon and the drain
// taint) and the reboot controller (pkg/reboot: the reboot-pending taint)
// both write through it, so that neither imports the other.
package ownnode

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/node-agent/node-agent/pkg/kube"
)

// Write says how Update writes.
type Write struct {
	// FieldManager names the writer in managedFields.
	FieldManager string
	// Cordon writes spec.unschedulable with the taints; a writer that
	// owns no cordon (the reboot controller) leaves it out, so that it
	// cannot write back a cordon it read before someone changed it.
	Cordon bool
	// Annotations are the annotations written with the spec, each with
	// its value on the mutated Node ("" when it has none); the others are
	// not sent.
	Annotations []string
}

// Update reads the Node name, applies mutate and writes back what the
// agent may change in its spec (spec.taints, and spec.unschedulable with
// w.Cordon) and the annotations w names, with a merge patch conditional on the
// resourceVersion it read, retrying on conflict: a concurrent writer's
// change is never overwritten, and the agent needs only the patch verb.
// mutate returns false to skip the write; Update then returns the Node as
// read.
//
// first, when not nil, is a recent copy of the Node (the agent's informer
// cache, or a write's response) that the first attempt starts from instead
// of a GET: a stale copy costs one conflict, and the retry reads the Node.
// mutate is given a copy, never first itself.
func Update(ctx context.Context, nodes kube.NodeInterface, name string, first *corev1.Node, w Write, mutate func(*corev1.Node) (bool, error)) (*corev1.Node, error) {
	var out *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node := first
		first = nil
		if node == nil {
			var err error
			if node, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		node = node.DeepCopy()
		write, err := mutate(node)
		if err != nil {
			return err
		}
		if !write {
			out = node
			return nil
		}
		b, err := json.Marshal(patch(node, w))
		if err != nil {
			return err
		}
		out, err = nodes.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: w.FieldManager})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("updating Node %s: %w", name, err)
	}
	return out, nil
}

// patch is the merge patch that writes node's taints, its cordon and the
// annotations w names.
func patch(node *corev1.Node, w Write) map[string]any {
	taints := node.Spec.Taints
	if taints == nil {
		taints = []corev1.Taint{}
	}
	meta := map[string]any{"resourceVersion": node.ResourceVersion}
	if len(w.Annotations) > 0 {
		a := map[string]string{}
		for _, k := range w.Annotations {
			a[k] = node.Annotations[k]
		}
		meta["annotations"] = a
	}
	// A merge patch replaces the whole taint list: the resourceVersion
	// above makes sure it is the list that was read.
	spec := map[string]any{"taints": taints}
	if w.Cordon {
		spec["unschedulable"] = node.Spec.Unschedulable
	}
	return map[string]any{"metadata": meta, "spec": spec}
}

// HasTaint reports whether node carries a taint with key and effect.
func HasTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

// AddTaint appends t to node's taints unless a taint with its key and
// effect is there already, whatever its value; it reports whether it
// added t.
func AddTaint(node *corev1.Node, t corev1.Taint) bool {
	if HasTaint(node, t.Key, t.Effect) {
		return false
	}
	node.Spec.Taints = append(node.Spec.Taints, t)
	return true
}

// RemoveTaint removes every taint with key and effect from node, keeping
// the others in their order; it reports whether it removed any.
func RemoveTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	kept := make([]corev1.Taint, 0, len(node.Spec.Taints))
	for _, t := range node.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			continue
		}
		kept = append(kept, t)
	}
	if len(kept) == len(node.Spec.Taints) {
		return false
	}
	if len(kept) == 0 {
		kept = nil
	}
	node.Spec.Taints = kept
	return true
}
