// Package recovery owns what "healthy again" means for a node after its
// maintenance or reboot, and its check: the Node is Ready, every DaemonSet
// pod on the node is Ready (in the namespaces its pools trust, where they
// name some: slots.pools[].daemonSetNamespaces), and the optional probes
// (health checks an admin adds, such as a PromQL query) pass. node-agent-coordinator (pkg/slots)
// asks it for the nodes that gave their drain slot back in a pool with
// slots.pools[].recoveryBound, and hands the slot on only once the node is
// healthy, so that a node that does not come back stops the rollout instead
// of being followed by the next one (tuppr waits for Ready as well; kured
// moves on as soon as its lock is free).
//
// The check reads; it decides nothing about slots. It fails closed: a pod
// list that fails, or a probe that cannot answer, reads as not healthy, and
// the reason says so.
package recovery

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/node-agent/node-agent/pkg/gates"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/reasontext"
)

// Probe is one optional health check of node: it returns why node is not
// healthy yet, or "" when the check passes. An error reads as not healthy.
type Probe func(ctx context.Context, node string) (string, error)

// PodLister lists the pods bound to node.
type PodLister func(ctx context.Context, node string) ([]corev1.Pod, error)

// Checker checks nodes' health.
type Checker struct {
	// Pods lists a node's pods; nil skips the DaemonSet pods (only the
	// Node and the probes count).
	Pods PodLister
	// Namespaces are, by pool name, the namespaces whose DaemonSet pods
	// count for the pool (slots.pools[].daemonSetNamespaces); a pool with
	// none, or missing here, counts every namespace (CountedNamespaces).
	Namespaces map[string][]string
	// Probes are, by pool name, the pools' own health checks
	// (slots.pools[].gates): a node is asked those of the pools it is
	// checked for, in order, once the Node and its DaemonSet pods are
	// Ready.
	Probes map[string][]Probe
}

// Result is one check's answer.
type Result struct {
	Healthy bool
	// Reason says what is not healthy yet; "" when Healthy.
	Reason string
}

// MaxNamed bounds the pods a reason names.
const MaxNamed = 3

// MaxReason bounds a reason's bytes: it goes into Events and, for a node
// past its bound, into every waiting node's answer, whose annotation holds
// at most 4 KiB.
const MaxReason = 768

// Check says whether node is healthy again for pools: Ready, its DaemonSet
// pods Ready, and every probe of those pools passing, in that order (the
// first that fails is the reason, and the later ones are not asked).
func (c Checker) Check(ctx context.Context, node *corev1.Node, pools ...string) Result {
	r := c.check(ctx, node, pools)
	r.Reason = reasontext.ForNode(r.Reason, MaxReason)
	return r
}

func (c Checker) check(ctx context.Context, node *corev1.Node, pools []string) Result {
	if why := NodeNotReady(node); why != "" {
		return Result{Reason: why}
	}
	if c.Pods != nil {
		pods, err := c.Pods(ctx, node.Name)
		if err != nil {
			return Result{Reason: fmt.Sprintf("cannot list the pods of node %s, so its DaemonSet pods' readiness is unknown: %v", node.Name, err)}
		}
		if why := DaemonSetPodsNotReady(pods, CountedNamespaces(c.Namespaces, pools)); why != "" {
			return Result{Reason: why}
		}
	}
	for _, pool := range pools {
		for i, p := range c.Probes[pool] {
			why, err := p(ctx, node.Name)
			if err != nil {
				return Result{Reason: fmt.Sprintf("pool %s: health check %d cannot answer: %v", pool, i+1, err)}
			}
			if why != "" {
				return Result{Reason: fmt.Sprintf("pool %s: %s", pool, why)}
			}
		}
	}
	return Result{Healthy: true}
}

// NodeNotReady says why node is not Ready, or "" when it is.
func NodeNotReady(node *corev1.Node) string {
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return ""
		}
		why := fmt.Sprintf("node %s is not Ready (%s", node.Name, c.Status)
		if c.Reason != "" {
			why += ": " + c.Reason
		}
		return why + ")"
	}
	return fmt.Sprintf("node %s reports no Ready condition", node.Name)
}

// CountedNamespaces is the namespaces whose DaemonSet pods count for a node
// checked for pools: the union of the pools' lists in byPool, or nil (every
// namespace) when any of the pools lists none. That fails closed: the node
// must be healthy for each of its pools, and a pool that trusts every
// namespace's DaemonSet pods is not overruled by another that trusts fewer.
func CountedNamespaces(byPool map[string][]string, pools []string) []string {
	var union []string
	for _, pool := range pools {
		ns := byPool[pool]
		if len(ns) == 0 {
			return nil
		}
		union = append(union, ns...)
	}
	slices.Sort(union)
	return slices.Compact(union)
}

// DaemonSetPodsNotReady says which of pods, owned by a DaemonSet and in one
// of namespaces (empty: any namespace), are not Ready, or "" when all are.
// Pods that are ending (deleted, Succeeded or Failed) do not count: a
// DaemonSet replaces them. namespaces is what keeps a tenant's DaemonSet
// whose pod never becomes Ready from holding every recovering node's slot
// (docs/security.md).
func DaemonSetPodsNotReady(pods []corev1.Pod, namespaces []string) string {
	var notReady []string
	for i := range pods {
		p := &pods[i]
		if len(namespaces) > 0 && !slices.Contains(namespaces, p.Namespace) {
			continue
		}
		if !ownedByDaemonSet(p) || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if !podReady(p) {
			notReady = append(notReady, p.Namespace+"/"+p.Name)
		}
	}
	if len(notReady) == 0 {
		return ""
	}
	slices.Sort(notReady)
	names := strings.Join(notReady[:min(len(notReady), MaxNamed)], ", ")
	if more := len(notReady) - MaxNamed; more > 0 {
		names += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%d DaemonSet pod(s) not Ready: %s", len(notReady), names)
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "DaemonSet" && strings.HasPrefix(ref.APIVersion, "apps/")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodsOn lists a node's pods through client, with the field selector
// spec.nodeName: one node's pods, never the cluster's.
func PodsOn(client kube.Interface) PodLister {
	return func(ctx context.Context, node string) ([]corev1.Pod, error) {
		list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		})
		if err != nil {
			return nil, err
		}
		return list.Items, nil
	}
}

// PromQL is a Probe that asks Prometheus the gates of p (pkg/gates, as
// maintenance.gates are asked): it holds while a gate's answer has a series,
// or a gate cannot be asked (fail closed), and says which. The queries are
// the admin's as written: they check the cluster, not one node.
func PromQL(p gates.Prometheus) Probe {
	return func(ctx context.Context, _ string) (string, error) {
		blockers := p.Blockers(ctx)
		if len(blockers) == 0 {
			return "", nil
		}
		names := make([]string, 0, MaxNamed)
		for _, b := range blockers[:min(len(blockers), MaxNamed)] {
			names = append(names, b.Name)
		}
		why := "gate " + strings.Join(names, "; gate ")
		if more := len(blockers) - MaxNamed; more > 0 {
			why += fmt.Sprintf("; and %d more", more)
		}
		return why, nil
	}
}
