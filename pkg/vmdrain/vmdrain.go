// Package vmdrain owns what the drain knows of KubeVirt's VMs on its node:
// the VirtualMachineInstances it reads (their eviction strategy, whether
// they can live-migrate, their CPU model and required features, their node
// selectors and tolerations), and each VM's way off the node, decided before
// the cordon: migrate to the nodes that can take it, by the label rules
// KubeVirt's migration target selection uses; or no target; or no migration
// at all (strategy None, not live-migratable, External).
//
// The rules, as KubeVirt applies them to a migration's target pod:
//   - a named CPU model needs cpu-model.node.kubevirt.io/<model>;
//   - host-model needs cpu-model-migration.node.kubevirt.io/<the source
//     node's host model> and cpu-feature.node.kubevirt.io/<f> for each of the
//     source node's host-model-required-features.node.kubevirt.io/<f>;
//   - host-passthrough needs no CPU label (KubeVirt checks none: the target's
//     CPU must match, which labels do not tell);
//   - each feature the VM requires (policy require or force, or none)
//     needs cpu-feature.node.kubevirt.io/<f>;
//   - the target is another node, Ready, schedulable, whose NoSchedule and
//     NoExecute taints the VM tolerates, and which matches its nodeSelector
//     and its required node affinity (the scheduler's own matching, from
//     k8s.io/component-helpers).
package vmdrain

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// GVR is KubeVirt's VirtualMachineInstance resource.
var GVR = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

// NodeNameLabel is the label KubeVirt keeps on a VMI with the node it runs
// on.
const NodeNameLabel = "kubevirt.io/nodeName"

// The eviction strategies (spec.evictionStrategy, or the KubeVirt CR's
// spec.configuration.evictionStrategy).
const (
	StrategyNone                  = "None"
	StrategyLiveMigrate           = "LiveMigrate"
	StrategyLiveMigrateIfPossible = "LiveMigrateIfPossible"
	StrategyExternal              = "External"
)

// The CPU models that are not models.
const (
	HostModel       = "host-model"
	HostPassthrough = "host-passthrough"
)

// VM is what the drain reads of one VirtualMachineInstance.
type VM struct {
	Namespace, Name string
	// Node is status.nodeName.
	Node string
	// Strategy is spec.evictionStrategy, "" when unset (Defaults decide).
	Strategy string
	// Migratable is the LiveMigratable condition; NotMigratable says why
	// not (its reason and message) when it is False or missing.
	Migratable    bool
	NotMigratable string
	// CPUModel is spec.domain.cpu.model, "" when unset (Defaults decide).
	CPUModel string
	// Features are the CPU features it requires (policy require or force,
	// or no policy).
	Features     []string
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// HostDevices: it passes host devices or GPUs through.
	HostDevices bool
	// RequiredAffinity is spec.affinity.nodeAffinity's
	// requiredDuringSchedulingIgnoredDuringExecution, nil when it has none.
	RequiredAffinity *corev1.NodeSelector
	// Phase is status.phase.
	Phase string
	// Migration is status.migrationState, nil when it never migrated.
	Migration *MigrationState
	// EvacuationNode is status.evacuationNodeName: KubeVirt is moving it
	// off that node.
	EvacuationNode string
}

// Key is namespace/name.
func (v VM) Key() string { return v.Namespace + "/" + v.Name }

// MigrationState is the part of status.migrationState the drain shows.
type MigrationState struct {
	SourceNode     string `json:"sourceNode,omitempty"`
	TargetNode     string `json:"targetNode,omitempty"`
	StartTimestamp string `json:"startTimestamp,omitempty"`
	EndTimestamp   string `json:"endTimestamp,omitempty"`
	Completed      bool   `json:"completed,omitempty"`
	Failed         bool   `json:"failed,omitempty"`
	FailureReason  string `json:"failureReason,omitempty"`
	MigrationUID   string `json:"migrationUid,omitempty"`
}

// vmi mirrors the fields of a VirtualMachineInstance the drain reads, as
// KubeVirt's API (kubevirt.io/api/core/v1) names them.
type vmi struct {
	Metadata struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		EvictionStrategy *string             `json:"evictionStrategy"`
		NodeSelector     map[string]string   `json:"nodeSelector"`
		Tolerations      []corev1.Toleration `json:"tolerations"`
		Affinity         *struct {
			NodeAffinity *struct {
				Required *corev1.NodeSelector `json:"requiredDuringSchedulingIgnoredDuringExecution"`
			} `json:"nodeAffinity"`
		} `json:"affinity"`
		Domain struct {
			CPU *struct {
				Model    string `json:"model"`
				Features []struct {
					Name   string `json:"name"`
					Policy string `json:"policy"`
				} `json:"features"`
			} `json:"cpu"`
			Devices struct {
				HostDevices []any `json:"hostDevices"`
				GPUs        []any `json:"gpus"`
			} `json:"devices"`
		} `json:"domain"`
	} `json:"spec"`
	Status struct {
		NodeName           string `json:"nodeName"`
		Phase              string `json:"phase"`
		EvacuationNodeName string `json:"evacuationNodeName"`
		Conditions         []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
		MigrationState *MigrationState `json:"migrationState"`
	} `json:"status"`
}

// FromUnstructured reads a VirtualMachineInstance; a field of the wrong
// type is an error that names the VMI.
func FromUnstructured(u *unstructured.Unstructured) (VM, error) {
	var in vmi
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &in); err != nil {
		return VM{}, fmt.Errorf("VirtualMachineInstance %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	v := VM{
		Namespace: in.Metadata.Namespace, Name: in.Metadata.Name, Node: in.Status.NodeName,
		NodeSelector: in.Spec.NodeSelector, Tolerations: in.Spec.Tolerations, Phase: in.Status.Phase,
		Migration: in.Status.MigrationState, EvacuationNode: in.Status.EvacuationNodeName,
		HostDevices: len(in.Spec.Domain.Devices.HostDevices)+len(in.Spec.Domain.Devices.GPUs) > 0,
	}
	if in.Spec.EvictionStrategy != nil {
		v.Strategy = *in.Spec.EvictionStrategy
	}
	if a := in.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		v.RequiredAffinity = a.NodeAffinity.Required
	}
	if cpu := in.Spec.Domain.CPU; cpu != nil {
		v.CPUModel = cpu.Model
		for _, f := range cpu.Features {
			switch f.Policy {
			case "", "require", "force":
				v.Features = append(v.Features, f.Name)
			}
		}
		slices.Sort(v.Features)
	}
	v.NotMigratable = "no LiveMigratable condition"
	for _, c := range in.Status.Conditions {
		if c.Type != "LiveMigratable" {
			continue
		}
		v.Migratable = c.Status == string(corev1.ConditionTrue)
		v.NotMigratable = ""
		if !v.Migratable {
			v.NotMigratable = strings.TrimSpace(strings.TrimSuffix(c.Reason+": "+c.Message, ": "))
		}
	}
	if v.Migratable {
		v.NotMigratable = ""
	}
	return v, nil
}

// Defaults are the KubeVirt CR's cluster-wide defaults for VMs that set
// none: spec.configuration.evictionStrategy and cpuModel.
type Defaults struct {
	Strategy string
	CPUModel string
}

// strategy is v's eviction strategy in force: its own, else the cluster's,
// else None (KubeVirt's default without one).
func (d Defaults) strategy(v VM) string {
	switch {
	case v.Strategy != "":
		return v.Strategy
	case d.Strategy != "":
		return d.Strategy
	}
	return StrategyNone
}

// cpuModel is v's CPU model in force: its own, else the cluster's, else
// host-model (KubeVirt's default).
func (d Defaults) cpuModel(v VM) string {
	switch {
	case v.CPUModel != "":
		return v.CPUModel
	case d.CPUModel != "":
		return d.CPUModel
	}
	return HostModel
}

// Way is how a VM leaves the node.
type Way string

// The ways.
const (
	// Migrate: it live-migrates to one of Targets.
	Migrate Way = "migrate"
	// NoTarget: it could live-migrate, but no other node can take it.
	NoTarget Way = "no-target"
	// CannotMigrate: strategy LiveMigrate, but it cannot live-migrate: its
	// eviction is refused for as long as it runs.
	CannotMigrate Way = "cannot-migrate"
	// Stopped: the drain's eviction stops it (strategy None, or
	// LiveMigrateIfPossible and not live-migratable).
	Stopped Way = "stopped"
	// External: strategy External; an external controller moves it.
	External Way = "external"
)

// Held reports whether a VM going this way holds a maintenance under
// drain.vmWithoutTarget wait: it would stay, or be stopped.
func (w Way) Held() bool { return w == NoTarget || w == CannotMigrate || w == Stopped }

// VMPlan is one VM's way off the node.
type VMPlan struct {
	VM       VM
	Strategy string
	CPUModel string
	Way      Way
	// Targets are the nodes that can take it (Migrate), sorted.
	Targets []string
	// Why says what decided the way, for people.
	Why string
}

// Plan decides each VM's way off source, sorted by namespace/name.
func Plan(vms []VM, source *corev1.Node, nodes []corev1.Node, d Defaults) []VMPlan {
	out := make([]VMPlan, 0, len(vms))
	for _, v := range vms {
		out = append(out, planVM(v, source, nodes, d))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VM.Key() < out[j].VM.Key() })
	return out
}

func planVM(v VM, source *corev1.Node, nodes []corev1.Node, d Defaults) VMPlan {
	p := VMPlan{VM: v, Strategy: d.strategy(v), CPUModel: d.cpuModel(v)}
	migratable, notWhy := v.Migratable, v.NotMigratable
	if v.HostDevices {
		migratable, notWhy = false, "it passes host devices or GPUs through"
	}
	switch p.Strategy {
	case StrategyNone:
		p.Way, p.Why = Stopped, "evictionStrategy None: the drain stops it"
		return p
	case StrategyExternal:
		p.Way, p.Why = External, "evictionStrategy External: an external controller moves it"
		return p
	case StrategyLiveMigrate, StrategyLiveMigrateIfPossible:
	default:
		p.Way, p.Why = CannotMigrate, fmt.Sprintf("evictionStrategy %q is not one KubeVirt knows", p.Strategy)
		return p
	}
	if !migratable {
		if p.Strategy == StrategyLiveMigrateIfPossible {
			p.Way, p.Why = Stopped, "not live-migratable ("+notWhy+"): LiveMigrateIfPossible stops it"
		} else {
			p.Way, p.Why = CannotMigrate, "not live-migratable ("+notWhy+"): LiveMigrate refuses its eviction for as long as it runs"
		}
		return p
	}
	p.Targets, p.Why = Targets(v, p.CPUModel, source, nodes)
	p.Way = Migrate
	if len(p.Targets) == 0 {
		p.Way = NoTarget
	}
	return p
}

// Requirements are the node labels (key: "true") a migration target of v
// needs for its CPU, model being its CPU model in force; or why none can
// be told (the source node's host model is unknown).
func Requirements(v VM, model string, source *corev1.Node) (map[string]string, string) {
	req := map[string]string{}
	switch model {
	case HostPassthrough:
	case HostModel:
		host := ""
		for k, val := range source.Labels {
			if strings.HasPrefix(k, kubevirtlabels.HostModelCPULabelPrefix) && val == "true" {
				host = strings.TrimPrefix(k, kubevirtlabels.HostModelCPULabelPrefix)
			}
		}
		if host == "" {
			return nil, "host-model, and node " + source.Name + " has no " + kubevirtlabels.HostModelCPULabelPrefix + " label to tell its host model"
		}
		req[kubevirtlabels.CPUModelMigrationLabelPrefix+host] = "true"
		for k, val := range source.Labels {
			if strings.HasPrefix(k, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix) && val == "true" {
				req[kubevirtlabels.CPUFeatureLabelPrefix+strings.TrimPrefix(k, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix)] = "true"
			}
		}
	default:
		req[kubevirtlabels.CPUModelLabelPrefix+model] = "true"
	}
	for _, f := range v.Features {
		req[kubevirtlabels.CPUFeatureLabelPrefix+f] = "true"
	}
	return req, ""
}

// Targets are the nodes other than source that can take v, sorted, and a
// sentence that says why there are none, or what they were chosen by.
func Targets(v VM, model string, source *corev1.Node, nodes []corev1.Node) ([]string, string) {
	req, why := Requirements(v, model, source)
	if req == nil {
		return nil, why
	}
	for k, val := range v.NodeSelector {
		req[k] = val
	}
	var open []*corev1.Node
	for i := range nodes {
		n := &nodes[i]
		if n.Name != source.Name && schedulable(n, v.Tolerations) {
			open = append(open, n)
		}
	}
	if len(open) == 0 {
		return nil, "no other node is Ready, schedulable and free of taints it does not tolerate"
	}
	if v.RequiredAffinity != nil {
		var err error
		if open, err = matchAffinity(v.RequiredAffinity, open); len(open) == 0 {
			if err != nil {
				return nil, "its required node affinity matches no node: " + err.Error()
			}
			return nil, "no other schedulable node matches its required node affinity"
		}
	}
	keys := make([]string, 0, len(req))
	for k := range req {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var targets []string
	missing := map[string]int{}
	for _, n := range open {
		ok := true
		for _, k := range keys {
			if n.Labels[k] != req[k] {
				missing[k]++
				ok = false
			}
		}
		if ok {
			targets = append(targets, n.Name)
		}
	}
	sort.Strings(targets)
	if len(targets) > 0 {
		by := "nodes with " + strings.Join(labelTerms(keys, req), ", ")
		if len(keys) == 0 {
			by = "every node that is Ready, schedulable and tolerated (" + model + ")"
		}
		if v.RequiredAffinity != nil {
			by += ", matching its required node affinity"
		}
		return targets, by
	}
	// Name the labels no open node has, or the one most lack.
	var none []string
	for _, k := range keys {
		if missing[k] == len(open) {
			none = append(none, k)
		}
	}
	if len(none) > 0 {
		return nil, fmt.Sprintf("no other schedulable node has %s", strings.Join(labelTerms(none, req), ", "))
	}
	return nil, fmt.Sprintf("no other schedulable node has all of %s", strings.Join(labelTerms(keys, req), ", "))
}

// matchAffinity keeps the nodes that a required node affinity admits, as
// the scheduler matches it (terms ORed, expressions and fields ANDed). A
// term that cannot be parsed admits no node; its error is returned when no
// node matched.
func matchAffinity(sel *corev1.NodeSelector, nodes []*corev1.Node) ([]*corev1.Node, error) {
	m := nodeaffinity.NewLazyErrorNodeSelector(sel)
	var kept []*corev1.Node
	var errs []error
	for _, n := range nodes {
		ok, err := m.Match(n)
		if ok {
			kept = append(kept, n)
		} else if err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	}
	return kept, errors.Join(errs...)
}

func labelTerms(keys []string, req map[string]string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + req[k]
	}
	return out
}

// schedulable says whether a migration target pod could land on n: Ready,
// not cordoned, and every NoSchedule or NoExecute taint tolerated.
func schedulable(n *corev1.Node, tolerations []corev1.Toleration) bool {
	if n.Spec.Unschedulable {
		return false
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return false
	}
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), t, true) }) {
			return false
		}
	}
	return true
}
