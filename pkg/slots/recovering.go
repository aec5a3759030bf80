package slots

// This file is the drain slots' part of slots.pools[].recoveryBound: the
// rule Decide applies to a holder that gave its slot back (recover), and the
// coordinator's checks, records and words about it. What "healthy again"
// means is pkg/recovery's, behind CoordinatorOptions.Health.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// recover decides whether n, which gave back the slot l, keeps it while it
// recovers: when one of its pools has a RecoveryBound and n is not healthy
// yet. Past the longest of its pools' bounds n keeps it still, and stops
// those pools (countPools).
func (d *decision) recover(n *Node, l Lease) bool {
	in := d.in
	var bound time.Duration
	for _, p := range d.in.Pools {
		if p.RecoveryBound > 0 && p.has(n) {
			bound = max(bound, p.RecoveryBound)
		}
	}
	if bound <= 0 || (n.Health != nil && n.Health.Healthy) {
		return false
	}
	reason := n.healthReason()
	since := l.RecoveringSince
	if since.IsZero() {
		since = in.Now
		d.out.Recovering = append(d.out.Recovering, n.Name)
	}
	d.holding[n.Name] = true
	d.recovering[n.Name] = reason
	if in.Now.Sub(since) > bound {
		d.unrecovered[n.Name] = true
		d.out.Unrecovered = append(d.out.Unrecovered, Unrecovered{Node: n.Name, Since: since, Reason: reason})
	} else {
		d.next = earliest(d.next, since.Add(bound+time.Second))
	}
	d.next = earliest(d.next, in.Now.Add(RecoveryRecheck))
	return true
}

// healthReason says what is not healthy in n yet, as its last check said;
// n may be nil (a Node not seen).
func (n *Node) healthReason() string {
	if n != nil && n.Health != nil && n.Health.Reason != "" {
		return n.Health.Reason
	}
	return "its health was not checked yet"
}

// Health is a node's health after its maintenance or reboot.
type Health struct {
	Healthy bool
	// Reason says what is not healthy yet.
	Reason string
}

// Unrecovered is a node that gave its slot back but did not come back
// healthy within its pools' RecoveryBound: it keeps the slot, and its pools
// grant no new one.
type Unrecovered struct {
	Node   string
	Since  time.Time
	Reason string
}

// RecoveryRecheck is how often a recovering node's health is checked again:
// a DaemonSet pod's readiness or a probe's answer changes no Node, so no
// watch event brings the next decision.
const RecoveryRecheck = 5 * time.Second

// checkHealth fills in Node.Health for the nodes whose slot answers no
// request any more in a pool with a RecoveryBound: the only nodes Decide
// asks it of, so that the pods of no other node are read.
func (c *Coordinator) checkHealth(ctx context.Context, in Input) {
	if !anyRecovery(in.Pools) {
		return
	}
	// Forget the checks of nodes that recover no more: their slot is
	// gone, or serves a request again.
	c.mu.Lock()
	for node := range c.checked {
		l, held := in.Leases[node]
		if n := in.Nodes[node]; !held || n == nil || l.serves(n) {
			delete(c.checked, node)
		}
	}
	c.mu.Unlock()
	for node, l := range in.Leases {
		n := in.Nodes[node]
		if n == nil || l.serves(n) {
			continue
		}
		pools := recoveryPools(in.Pools, n)
		if len(pools) == 0 {
			continue
		}
		obj, ok, err := c.nodes.GetStore().GetByKey(node)
		kn, isNode := obj.(*corev1.Node)
		if err != nil || !ok || !isNode {
			continue
		}
		if c.o.Health != nil {
			h := c.health(ctx, in.Now, kn, pools)
			n.Health = &h
		} else if ready(kn) {
			n.Health = &Health{Healthy: true}
		} else {
			n.Health = &Health{Reason: fmt.Sprintf("node %s is not Ready", node)}
		}
	}
}

// HealthTimeout bounds one check of a recovering node's health (its pods
// listed, the pools' gates asked): the decision waits for it, and so do the
// grants of every other node.
const HealthTimeout = 5 * time.Second

// health checks node, or answers what the last check said when it is
// younger than RecoveryRecheck and the node's readiness has not changed
// since: every Node event of the cluster brings a decision, and the pods and
// gates of a recovering node are not asked at that pace.
func (c *Coordinator) health(ctx context.Context, now time.Time, node *corev1.Node, pools []string) Health {
	isReady := ready(node)
	c.mu.Lock()
	last, ok := c.checked[node.Name]
	c.mu.Unlock()
	if ok && last.ready == isReady && now.Sub(last.at) < RecoveryRecheck {
		return last.health
	}
	ctx, cancel := context.WithTimeout(ctx, HealthTimeout)
	defer cancel()
	h := c.o.Health(ctx, node, pools)
	c.mu.Lock()
	if h.Healthy {
		delete(c.checked, node.Name)
	} else {
		c.checked[node.Name] = healthCheck{health: h, ready: isReady, at: now}
	}
	c.mu.Unlock()
	return h
}

// healthCheck is the last check of a recovering node.
type healthCheck struct {
	health Health
	ready  bool
	at     time.Time
}

func anyRecovery(pools []Pool) bool {
	for _, p := range pools {
		if p.RecoveryBound > 0 {
			return true
		}
	}
	return false
}

// recoveryPools names n's pools with a RecoveryBound.
func recoveryPools(pools []Pool, n *Node) []string {
	var names []string
	for _, p := range pools {
		if p.RecoveryBound > 0 && p.has(n) {
			names = append(names, p.Name)
		}
	}
	return names
}

// markRecovering records on node's slot Lease since when it recovers
// (LeaseRecoveringSince), so that a new leader counts the bound from then: a
// merge patch of that one annotation, so that the Lease, and the slot, never
// look free meanwhile.
func (c *Coordinator) markRecovering(ctx context.Context, in Input, node string) error {
	l := in.Leases[node]
	since := in.Now.UTC().Truncate(time.Second)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{LeaseRecoveringSince: since.Format(time.RFC3339)}}})
	if err != nil {
		return err
	}
	if _, err := c.o.Client.CoordinationV1().Leases(c.o.Namespace).Patch(ctx, l.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		if apierrors.IsNotFound(err) {
			// An admin deleted it: the slot is free, as the next list
			// shows.
			c.mu.Lock()
			c.relist = true
			c.mu.Unlock()
		}
		return fmt.Errorf("recording the recovery of node %s on slot Lease %s/%s: %w", node, c.o.Namespace, l.Name, err)
	}
	c.mu.Lock()
	l.RecoveringSince = since
	c.leases[node] = l
	c.mu.Unlock()
	reason := in.Nodes[node].healthReason()
	c.log.Info("Drain slot given back, kept until the node is healthy again", "node", node, "reason", reason)
	c.event(node, corev1.EventTypeNormal, "DrainSlotRecovering", "The drain slot stays with this node until it is healthy again (slots.pools[].recoveryBound): %s", reason)
	return nil
}

// sayUnrecovered says once on each Node, and in the log, that it did not
// come back healthy within its bound and stops its pools; the metric
// drain_slot_recovery_stop shows it while it lasts.
func (c *Coordinator) sayUnrecovered(out Output) {
	now := map[string]bool{}
	for _, u := range out.Unrecovered {
		now[u.Node] = true
		if c.unrecovered[u.Node] {
			continue
		}
		c.log.Warn("Node not healthy within its recovery bound: it keeps its drain slot and its pools grant no new one",
			"node", u.Node, "since", u.Since.UTC().Format(time.RFC3339), "reason", u.Reason, "pools", out.RecoveryStopped)
		c.event(u.Node, corev1.EventTypeWarning, "DrainSlotNotRecovered",
			"The node is not healthy %s after its maintenance or reboot (%s): it keeps its drain slot and no other node of its pools starts, until it recovers or an admin deletes its slot Lease %s/%s",
			c.o.Clock.Since(u.Since).Round(time.Second), u.Reason, c.o.Namespace, LeaseName(u.Node))
	}
	c.unrecovered = now
}
