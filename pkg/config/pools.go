package config

// This file is slots.pools: the pools of nodes with drain limits of their own
// (slots.limit and the rest of the slots section are in sections.go).

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// PoolConfig is a group of nodes with a drain limit of its own, as the
// budgets of Karpenter and the system-upgrade-controller have.
type PoolConfig struct {
	// Name names the pool in reasons, Events and metrics.
	Name string `json:"name"`
	// Selector is a label selector over Nodes; empty selects every node.
	Selector string `json:"selector"`
	// Limit is how many of the pool's nodes may hold a slot at once; 0
	// sets no such limit.
	Limit int `json:"limit,omitempty"`
	// MaxUnavailable is how many of the pool's nodes may be unavailable at
	// once (draining, not Ready or cordoned), as a count or a percentage
	// ("10%", rounded down, at least 1).
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MaxUnhealthy is the pool's safety stop: no new slot is granted while
	// more than this many of the pool's nodes that hold no slot are not
	// Ready, or are cordoned by someone other than node-agent's own
	// maintenance, as a count or a percentage ("10%", rounded down, so a
	// small pool stops at its first such node). The node asking is left
	// out of the count; holders keep their slots. Unset: no safety stop.
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
	// MaxDomains is how many distinct failure domains (values of the
	// label TopologyKey) may hold the pool's slots at once; 0 sets no such
	// limit. A node without the label counts as a domain of its own.
	MaxDomains int `json:"maxDomains,omitempty"`
	// TopologyKey is the node label whose values are the failure domains
	// MaxDomains counts; empty means DefaultTopologyKey.
	TopologyKey string `json:"topologyKey,omitempty"`
	// RecoveryBound, when set, makes a node of the pool give its drain
	// slot back only once it is healthy again after its maintenance or
	// reboot: Ready, and its DaemonSet pods Ready. A node not healthy
	// within the bound keeps the slot and the pool grants no new one until
	// it recovers or an admin deletes its slot Lease (docs/slots.md). 0
	// (the default) hands the slot on as soon as the node gives it back.
	RecoveryBound metav1.Duration `json:"recoveryBound,omitempty"`
	// Gates are PromQL health checks asked of slots.prometheusURL, with
	// RecoveryBound only: a node that gave its slot back is healthy again
	// only once none of them holds (an answer with a series holds, as a
	// Prometheus alert fires, and so does a query that cannot be asked).
	Gates []GateConfig `json:"gates,omitempty"`
	// DaemonSetNamespaces, with RecoveryBound only, are the namespaces
	// whose DaemonSet pods must be Ready for a node of the pool to be
	// healthy again. Empty: every namespace, so that a tenant who may
	// create a DaemonSet in its own namespace can hold each recovering
	// node's slot until the bound, and then stop the pool
	// (docs/security.md); list the namespaces of the node's own services
	// (kube-system, the CNI's, the storage driver's, KubeVirt's).
	DaemonSetNamespaces []string `json:"daemonSetNamespaces,omitempty"`
}

// DefaultTopologyKey is the failure domain label slots.pools[].maxDomains
// counts by default: the zone, as the kubelet or the cloud provider sets it.
const DefaultTopologyKey = "topology.kubernetes.io/zone"

// validatePools checks slots.pools.
func validatePools(pools []PoolConfig, prometheusURL string) []error {
	var errs []error
	names := map[string]bool{}
	for i, p := range pools {
		at := fmt.Sprintf("slots.pools[%d]", i)
		if msgs := validation.IsDNS1123Label(p.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", at, p.Name, strings.Join(msgs, "; ")))
		} else if p.Name == "default" || names[p.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: taken (\"default\" is slots.limit); give each pool a name of its own", at, p.Name))
		}
		names[p.Name] = true
		if _, err := labels.Parse(p.Selector); err != nil {
			errs = append(errs, fmt.Errorf("%s.selector %q: %w", at, p.Selector, err))
		}
		// The ranges of limit, maxUnavailable, maxUnhealthy and
		// maxDomains are Bounds'.
		if p.Limit == 0 && p.MaxUnavailable == nil && p.MaxUnhealthy == nil && p.MaxDomains == 0 && p.RecoveryBound.Duration == 0 {
			errs = append(errs, fmt.Errorf("%s: set limit, maxUnavailable, maxUnhealthy, maxDomains or recoveryBound, or the pool limits nothing", at))
		}
		if len(p.Gates) > 0 && p.RecoveryBound.Duration == 0 {
			errs = append(errs, fmt.Errorf("%s.gates: set only with recoveryBound, the bound of the wait for a node to be healthy again, which the gates are asked in", at))
		}
		errs = append(errs, checkGates(at, "slots", p.Gates, prometheusURL)...)
		if len(p.DaemonSetNamespaces) > 0 && p.RecoveryBound.Duration == 0 {
			errs = append(errs, fmt.Errorf("%s.daemonSetNamespaces: set only with recoveryBound, the bound of the wait for a node to be healthy again, which they narrow", at))
		}
		for _, ns := range p.DaemonSetNamespaces {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s.daemonSetNamespaces: %q is not a namespace name (%s)", at, ns, strings.Join(msgs, "; ")))
			}
		}
		if p.TopologyKey != "" {
			if msgs := validation.IsQualifiedName(p.TopologyKey); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s.topologyKey %q: not a label key: %s", at, p.TopologyKey, strings.Join(msgs, "; ")))
			}
			if p.MaxDomains == 0 {
				errs = append(errs, fmt.Errorf("%s.topologyKey %q: set without maxDomains, so it limits nothing; set maxDomains (1: one domain at a time) or remove topologyKey", at, p.TopologyKey))
			}
		}
	}
	return errs
}
