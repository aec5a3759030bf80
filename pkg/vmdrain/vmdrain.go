// Package vmdrain owns what the drain knows of KubeVirt's VMs on its node:
// the VirtualMachineInstances it reads (their eviction strategy, whether
// they can live-migrate, their launcher pods), and each VM's way off the
// node, decided before the cordon: migrate to the nodes that can take it;
// or no target; or no migration at all (strategy None, not
// live-migratable, External).
//
// Which nodes can take a VM is not a rule of this package's own. It renders
// the migration target pod KubeVirt would create for the VMI
// (pkg/targetpod, KubeVirt v1.7 to v1.9) and asks of each node what
// kube-scheduler's filters would (pkg/placement): node selector and
// affinity, taints, cordons, free capacity, pod affinity, anti-affinity and
// topology spread. The VMs of one plan are placed one after another, each
// counted on the node it is planned to, so that two VMs are not both planned
// into room for one.
package vmdrain

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/node-agent/node-agent/pkg/placement"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	// UID is metadata.uid: KubeVirt labels the VM's launcher pods with it
	// (kubevirt.io/created-by).
	UID string
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
	// Object is the VMI as read, from which its migration target pod is
	// rendered (pkg/targetpod); nil when the VM was not read whole.
	Object *unstructured.Unstructured
	// Launcher is its running virt-launcher pod on Node, nil when not
	// known (AttachLaunchers).
	Launcher *corev1.Pod
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
		UID       string `json:"uid"`
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
		Namespace: in.Metadata.Namespace, Name: in.Metadata.Name, UID: in.Metadata.UID, Node: in.Status.NodeName,
		Object:       u.DeepCopy(),
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
	// Targets are the nodes that can take it (Migrate), sorted: those
	// where kube-scheduler's filters admit its target pod.
	Targets []string
	// Pod is its migration target pod as KubeVirt would render it, nil
	// when it does not migrate or could not be rendered.
	Pod *corev1.Pod
	// Placement is what the scheduler's filters said of Pod on each node:
	// the rule that rejected each rejected node.
	Placement placement.Result
	// PlannedTo is the node the plan counts it on (the fitting node with
	// the most free memory after it), "" when it has no target.
	PlannedTo string
	// Notes name what the rendering assumed or left out.
	Notes []string
	// Why says what decided the way, for people.
	Why string
}

// Plan decides each VM's way off source, sorted by namespace/name. Each VM
// that migrates is counted, in that order, on the node it is planned to,
// so that a later VM is not planned into room an earlier one takes.
func Plan(vms []VM, source *corev1.Node, view View, d Defaults) []VMPlan {
	vms = slices.Clone(vms)
	sort.Slice(vms, func(i, j int) bool { return vms[i].Key() < vms[j].Key() })
	p := newPlanner(source, view)
	out := make([]VMPlan, 0, len(vms))
	for _, v := range vms {
		out = append(out, p.planVM(v, d))
	}
	return out
}

func (pl *planner) planVM(v VM, d Defaults) VMPlan {
	p := VMPlan{VM: v, Strategy: d.strategy(v), CPUModel: d.cpuModel(v)}
	p.Way, p.Why = d.wayWithoutTarget(v)
	if p.Way == "" {
		pl.place(&p)
	}
	return p
}

// wayWithoutTarget is v's way when its strategy and migratability decide it
// alone, with why; "" when v would live-migrate, and only a place for its
// target pod decides (planner.place).
func (d Defaults) wayWithoutTarget(v VM) (Way, string) {
	strategy := d.strategy(v)
	migratable, notWhy := v.Migratable, v.NotMigratable
	if v.HostDevices {
		migratable, notWhy = false, "it passes host devices or GPUs through"
	}
	switch strategy {
	case StrategyNone:
		return Stopped, "evictionStrategy None: the drain stops it"
	case StrategyExternal:
		return External, "evictionStrategy External: an external controller moves it"
	case StrategyLiveMigrate, StrategyLiveMigrateIfPossible:
	default:
		return CannotMigrate, fmt.Sprintf("evictionStrategy %q is not one KubeVirt knows", strategy)
	}
	if migratable {
		return "", ""
	}
	if strategy == StrategyLiveMigrateIfPossible {
		return Stopped, "not live-migratable (" + notWhy + "): LiveMigrateIfPossible stops it"
	}
	return CannotMigrate, "not live-migratable (" + notWhy + "): LiveMigrate refuses its eviction for as long as it runs"
}
