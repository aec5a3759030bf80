package maintenancecli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/node-agent/node-agent/pkg/hooks"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// waitForDrain follows the status of the maintenance of node that started at
// or after since, until it Succeeded or Failed. from is the Node as the
// caller last had it (nil: read it).
func (c *Client) waitForDrain(ctx context.Context, node string, from *corev1.Node, since time.Time) error {
	bar := newProgress(c.Err)
	var final *selfdrain.Status
	var finalNode *corev1.Node
	follow := func(n *corev1.Node) (bool, error) {
		st, err := selfdrain.ParseStatus(n)
		if err != nil {
			return false, err
		}
		// A status from before the request is a past maintenance's.
		if st == nil || !st.Active() || st.StartTime == nil || st.StartTime.Time.Before(since.Truncate(time.Second)) {
			bar.show("waiting for the agent on " + node + " to start")
			return false, nil
		}
		bar.status(st)
		switch st.Phase {
		case selfdrain.PhaseSucceeded, selfdrain.PhaseFailed:
			final, finalNode = st, n
			return true, nil
		}
		return false, nil
	}
	var err error
	if from != nil {
		err = maintenance.WatchNodeFrom(ctx, c.Kube, from, follow)
	} else {
		err = maintenance.WatchNode(ctx, c.Kube, node, follow)
	}
	bar.done()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("stopped waiting (--timeout); the maintenance of %s goes on: see `node-agent maintenance status %s`", node, node)
		}
		return err
	}
	if final.Phase == selfdrain.PhaseFailed {
		return fmt.Errorf("drain of %s failed: %d pods left; last error: %s", node, len(final.PendingPods), printable(final.LastError))
	}
	fmt.Fprintf(c.Err, "%s drained: %d pods evicted in %s\n", node, final.EvictionPods, final.LastUpdate.Sub(final.StartTime.Time).Round(time.Second))
	if s := hooks.Parse(finalNode.Annotations, hooks.PostDrain); !s.Empty() && final.Trigger != selfdrain.TriggerShutdown {
		// Drained, but not done: the hooks' owners let it go.
		fmt.Fprintf(c.Err, "%s: post-drain hooks hold the maintenance until they are removed (or maintenance.hookBound passes): %s\n", node, printable(s.Names()))
	}
	return nil
}

// waitForUndo waits until the status on node is no longer active: the
// agent has undone its changes.
func (c *Client) waitForUndo(ctx context.Context, node string) error {
	return maintenance.WatchNode(ctx, c.Kube, node, func(n *corev1.Node) (bool, error) {
		st, err := selfdrain.ParseStatus(n)
		if err != nil {
			return false, err
		}
		if st.Active() {
			return false, nil
		}
		fmt.Fprintf(c.Err, "%s: unschedulable=%t\n", node, n.Spec.Unschedulable)
		return true, nil
	})
}

// waitForOwnerGone waits until the agent on node no longer lists owner
// among the requesters of its maintenance, and says whether the
// maintenance goes on for others or has ended.
func (c *Client) waitForOwnerGone(ctx context.Context, node, owner string) error {
	return maintenance.WatchNode(ctx, c.Kube, node, func(n *corev1.Node) (bool, error) {
		list, err := maintenance.ParseRequesters(n)
		if err != nil {
			return false, err
		}
		if slices.ContainsFunc(list, func(r maintenance.Requester) bool {
			return r.Kind == maintenance.KindOwner && r.Name == owner
		}) {
			return false, nil
		}
		st, err := selfdrain.ParseStatus(n)
		if err != nil {
			return false, err
		}
		if st.Active() && len(list) > 0 {
			fmt.Fprintf(c.Err, "%s stays in maintenance for %s\n", node, printable(requesterNames(list)))
			return true, nil
		}
		if st.Active() {
			return false, nil // the agent is undoing its changes
		}
		fmt.Fprintf(c.Err, "%s: unschedulable=%t\n", node, n.Spec.Unschedulable)
		return true, nil
	})
}

// waitForObjectsGone polls until no NodeMaintenance object of groups names
// node. The agent removes its finalizer once it has undone the
// maintenance, so the deleted objects are gone then.
func (c *Client) waitForObjectsGone(ctx context.Context, d dynamic.Interface, groups []string, node string) error {
	interval := c.PollInterval
	if interval <= 0 {
		interval = time.Second
	}
	for {
		left, err := maintenance.ListNodeMaintenances(ctx, d, groups, node)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading Node %s: %w", node, err)
			}
			fmt.Fprintf(c.Err, "%s: unschedulable=%t\n", node, n.Spec.Unschedulable)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.clock().After(interval):
		}
	}
}
