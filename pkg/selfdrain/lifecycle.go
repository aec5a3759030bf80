package selfdrain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/nodelifecycle"
	nlspec "github.com/node-agent/node-agent/pkg/nodelifecycle/spec"
)

// lifecycleState reads node-agent's maintenance state from its own
// conditions on node (UnderMaintenance, NodeShuttingDown): the state the
// node lifecycle conditions of KEP-5683 mirror.
func lifecycleState(node *corev1.Node) nodelifecycle.State {
	var s nodelifecycle.State
	for _, c := range node.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case ConditionType:
			s.Reason, s.Message = c.Reason, c.Message
			switch c.Reason {
			case ReasonDraining:
				s.Stage = nodelifecycle.Draining
			case ReasonDrained:
				s.Stage = nodelifecycle.DrainDone
			case ReasonDrainFailed:
				s.Stage = nodelifecycle.DrainFailed
			default:
				// WaitingForDrainSlot and every other wait before the
				// drain begins.
				s.Stage = nodelifecycle.Planned
			}
		case ShuttingDownCondition:
			s.ShuttingDown, s.ShutdownReason, s.ShutdownMessage = true, c.Reason, c.Message
		}
	}
	return s
}

// lifecycleWrites bounds the attempts of one syncLifecycle: a patch whose
// guards fail (the Node's conditions changed since it was read) is built
// again from a fresh read.
const lifecycleWrites = 3

// syncLifecycle brings the node lifecycle conditions on the Node to what its
// own conditions say, given node as last written (nil: read it). It touches
// only conditions node-agent wrote (nodelifecycle.Patch).
func syncLifecycle(ctx context.Context, client kube.Interface, name string, node *corev1.Node, now metav1.Time) error {
	var lastErr error
	for range lifecycleWrites {
		if node == nil {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading Node %s for its node lifecycle conditions: %w", name, err)
			}
			node = n
		}
		patch, err := nodelifecycle.Patch(node, nodelifecycle.Want(lifecycleState(node)), now)
		if err != nil || patch == nil {
			return err
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status"); err != nil {
			lastErr = err
			node = nil
			continue
		}
		return nil
	}
	return fmt.Errorf("writing the node lifecycle conditions on Node %s: %w", name, lastErr)
}

// lifecycleOn says whether the engine writes the node lifecycle conditions:
// drain.nodeLifecycleConditions and, in auto, the apiserver's version decide
// (nodelifecycle.Enabled), once per engine, and the log says why.
func (e *Engine) lifecycleOn() bool {
	e.lifecycleOnce.Do(func() {
		mode, err := nlspec.ParseMode(e.Config.NodeLifecycleConditions)
		if err != nil {
			e.Logger.Warn("Not writing the node lifecycle conditions", "err", err)
			return
		}
		var v *version.Info
		if mode == nlspec.Auto {
			if v, err = e.Client.Discovery().ServerVersion(); err != nil {
				e.Logger.Warn("Could not read the apiserver's version", "err", err)
			}
		}
		on, why := nodelifecycle.Enabled(mode, v)
		e.lifecycle = on
		e.Logger.Info("Node lifecycle conditions (KEP-5683)", "write", on, "why", why)
	})
	return e.lifecycle
}

// afterConditionWrite mirrors the agent's own conditions, as node shows them
// after a write (nil: read the Node), into the node lifecycle conditions. A
// failure is logged: the agent's own condition and record are written.
func (e *Engine) afterConditionWrite(ctx context.Context, node *corev1.Node, now metav1.Time) {
	if !e.lifecycleOn() {
		return
	}
	if err := syncLifecycle(ctx, e.Client, e.NodeName, node, now); err != nil && ctx.Err() == nil {
		e.Logger.Warn("Could not write the node lifecycle conditions", "err", err)
	}
}
