package selfdrain

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/selfdrain/podorder"
)

const (
	// MaintenanceAnnotation requests maintenance; its value is the reason
	// (ParseMaintenanceRequest says which values ask for it). Removing it
	// ends maintenance.
	MaintenanceAnnotation = "node-agent.io/maintenance"
	// StatusAnnotation holds the Status as JSON.
	StatusAnnotation = "node-agent.io/maintenance-status"

	// ConditionType is the Node condition that mirrors the status.
	ConditionType corev1.NodeConditionType = "UnderMaintenance"
	// ReasonDraining, ReasonDrained and ReasonDrainFailed are the condition's
	// reasons.
	ReasonDraining    = "Draining"
	ReasonDrained     = "Drained"
	ReasonDrainFailed = "DrainFailed"
	// ReasonWaiting is used while the node waits for a drain slot.
	ReasonWaiting = "WaitingForDrainSlot"

	// TaintValue is the value of the drain taint, as KubeVirt sets it.
	TaintValue = "draining"
)

// Phase is the stage of a maintenance.
type Phase string

// The phases, as the NodeMaintenance operator names them.
const (
	PhaseWaiting   Phase = "Waiting"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
)

// Trigger is what started a maintenance.
type Trigger string

// The triggers.
const (
	TriggerAnnotation      Trigger = "annotation"
	TriggerNodeMaintenance Trigger = "nodemaintenance"
	TriggerShutdown        Trigger = "shutdown"
	// TriggerReboot: the reboot controller (pkg/reboot) drains the node
	// before it reboots the host. The coordinator holds the drain slot,
	// across the reboot, so this drain takes none of its own.
	TriggerReboot Trigger = "reboot"
)

// Status is the maintenance status the agent writes to StatusAnnotation.
// Besides what an admin reads, it records what the agent changed, so that a
// restarted agent resumes the drain and the end of maintenance undoes only
// the agent's own changes.
type Status struct {
	Phase         Phase    `json:"phase"`
	Trigger       Trigger  `json:"trigger"`
	Reason        string   `json:"reason,omitempty"`
	TotalPods     int      `json:"totalPods"`
	EvictionPods  int      `json:"evictionPods"`
	PendingPods   []string `json:"pendingPods,omitempty"`
	DrainProgress int      `json:"drainProgress"`
	LastError     string   `json:"lastError,omitempty"`
	// ErrorOnLeaseCount counts the consecutive failed attempts to take a
	// drain slot that were errors (such as a missing slots.namespace),
	// not slots held by other nodes; the NodeMaintenance field of that name
	// means the same.
	ErrorOnLeaseCount int `json:"errorOnLeaseCount,omitempty"`
	// StartTime is when the maintenance was requested: a wait for a drain
	// slot counts.
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// DrainStartTime is when the drain began, with its drain slot taken:
	// drain.timeout counts from here, so a wait for the slot does not
	// count against it, and a restarted agent that resumes the drain keeps
	// it.
	DrainStartTime *metav1.Time `json:"drainStartTime,omitempty"`
	LastUpdate     *metav1.Time `json:"lastUpdate,omitempty"`
	// EndTime is set when maintenance ended and the agent's changes were
	// undone; the status is then final.
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Blockers, while a drain runs, are the pods whose last eviction was
	// refused or failed, and why, and the WaitCompleted and opted-out
	// pods (at most maxBlockersShown); once a
	// maintenance drain passed drain.timeout (phase Failed), every pod it
	// left on the node and why each stayed.
	Blockers []Blocker `json:"blockers,omitempty"`
	// UndoneAt is when the agent undid its changes (uncordon, drain taint)
	// after its drain timed out, by drain.onTimeout uncordon, while the
	// maintenance stays requested and Failed. The end of the maintenance
	// then has nothing left to undo: the node may have been cordoned since
	// by someone else.
	UndoneAt *metav1.Time `json:"undoneAt,omitempty"`

	// CordonedByAgent is true when the node was schedulable before and the
	// agent cordoned it; only then does the end of maintenance uncordon it.
	CordonedByAgent bool `json:"cordonedByAgent"`
	// TaintedByAgent is true when the agent added the drain taint.
	TaintedByAgent bool `json:"taintedByAgent"`
	// SkippedConcurrencyWait is true when a shutdown drain went ahead
	// without a cluster-wide drain slot.
	SkippedConcurrencyWait bool `json:"skippedConcurrencyWait,omitempty"`
	// DrainedInTime, for a shutdown drain, says whether every pod left
	// before the delay lock had to be released.
	DrainedInTime *bool `json:"drainedInTime,omitempty"`
	// PodAccess is the identity the drain reaches the node's pods with
	// (pkg/podaccess): "node" (the node's own, by constrained
	// impersonation) or "cluster-wide" (the ServiceAccount's own grant).
	PodAccess string `json:"podAccess,omitempty"`
	// VMs is the progress of each KubeVirt VM the drain began with (its
	// migration, its target, what holds it), at most MaxVMsShown; empty
	// where the drain follows no VMs.
	VMs []VMStatus `json:"vms,omitempty"`
}

// VMStatus is one VM's progress during the drain (pkg/vmdrain's Progress).
type VMStatus struct {
	// Name is namespace/name.
	Name  string `json:"name"`
	Phase string `json:"phase"`
	// Target is the node it migrates or migrated to.
	Target string `json:"target,omitempty"`
	// Since is when the current migration started, or the VM was first
	// seen in its phase.
	Since   *metav1.Time `json:"since,omitempty"`
	Message string       `json:"message,omitempty"`
}

// MaxVMsShown bounds the VMs in the status, which is an annotation on the
// Node; the last entry counts those left out.
const MaxVMsShown = 64

// BlockerReason says why a pod stayed on the node past drain.timeout.
type BlockerReason string

// The reasons, from the last answer to the pod's eviction.
const (
	// BlockerPodDisruptionBudget: a PodDisruptionBudget refused the
	// eviction (429); the refusal names it.
	BlockerPodDisruptionBudget BlockerReason = "PodDisruptionBudget"
	// BlockerEvictionRefused: the eviction was refused with 429 naming no
	// budget, as KubeVirt's webhook does while a VM migrates.
	BlockerEvictionRefused BlockerReason = "EvictionRefused"
	// BlockerEvictionFailed: the eviction failed with another error.
	BlockerEvictionFailed BlockerReason = "EvictionFailed"
	// BlockerTerminating: the pod is being deleted (the eviction was
	// accepted, or someone else deleted it) and has not yet stopped: its
	// termination grace period is long, or it does not stop.
	BlockerTerminating BlockerReason = "Terminating"
	// BlockerWaitCompleted, BlockerDoNotDrain and BlockerOrderGroup: the
	// drain waits for the pod by its treatment (podorder.Wait).
	BlockerWaitCompleted = BlockerReason(podorder.WaitCompleted)
	BlockerDoNotDrain    = BlockerReason(podorder.WaitOptedOut)
	BlockerOrderGroup    = BlockerReason(podorder.WaitLaterGroup)
	// BlockerNotEvictedYet: no eviction of the pod was answered yet (its
	// request was still in flight, or waited for drain.parallelism).
	BlockerNotEvictedYet BlockerReason = "NotEvictedYet"
)

// BlockerReasons are the reasons, in the order they are reported.
var BlockerReasons = []BlockerReason{BlockerPodDisruptionBudget, BlockerEvictionRefused, BlockerEvictionFailed, BlockerTerminating,
	BlockerWaitCompleted, BlockerDoNotDrain, BlockerOrderGroup, BlockerNotEvictedYet}

// Blocker is a pod that was still on the node when its maintenance drain
// passed drain.timeout, and why it stayed.
type Blocker struct {
	// Pod is namespace/name.
	Pod    string        `json:"pod"`
	Reason BlockerReason `json:"reason"`
	// PodDisruptionBudget, for BlockerPodDisruptionBudget, is the budget
	// that refused the last eviction, as namespace/name.
	PodDisruptionBudget string `json:"podDisruptionBudget,omitempty"`
	// Detail is what the last answer said: the refusal or the error, or
	// the grace period of a pod being deleted.
	Detail string `json:"detail,omitempty"`
}

// TimedOut reports whether s records a maintenance drain that passed
// drain.timeout and has not ended: the request it served is not tried
// again until it changes. A shutdown drain's Failed is its own deadline,
// not drain.timeout.
func (s *Status) TimedOut() bool {
	return s.Active() && s.Phase == PhaseFailed && s.Trigger != TriggerShutdown
}

// Active reports whether the status describes a maintenance that has not
// ended, so the agent's changes may still be in place.
func (s *Status) Active() bool { return s != nil && s.EndTime == nil && s.Phase != "" }

// ParseStatus decodes the status annotation of node. It returns nil, nil
// when there is none, and an error that says what to do when it is not valid.
func ParseStatus(node *corev1.Node) (*Status, error) {
	raw, ok := node.Annotations[StatusAnnotation]
	if !ok || strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	return DecodeStatus(raw)
}

// DecodeStatus decodes a status annotation value.
func DecodeStatus(raw string) (*Status, error) {
	var s Status
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("annotation %s is not valid status JSON (%w); the agent will not act on it: fix it, or delete it to let the agent start afresh", StatusAnnotation, err)
	}
	switch s.Phase {
	case PhaseWaiting, PhaseRunning, PhaseSucceeded, PhaseFailed:
	default:
		return nil, fmt.Errorf("annotation %s has unknown phase %q; the agent will not act on it: fix it, or delete it to let the agent start afresh", StatusAnnotation, s.Phase)
	}
	switch s.Trigger {
	case TriggerAnnotation, TriggerNodeMaintenance, TriggerShutdown, TriggerReboot:
	default:
		return nil, fmt.Errorf("annotation %s has unknown trigger %q; the agent will not act on it: fix it, or delete it to let the agent start afresh", StatusAnnotation, s.Trigger)
	}
	return &s, nil
}

// Encode returns the annotation value for s, its texts cut (bounded).
func (s *Status) Encode() string {
	b, err := json.Marshal(s.bounded())
	if err != nil {
		// A struct of strings, ints and times always marshals.
		return "{}"
	}
	return string(b)
}

// bounded is a copy of s whose texts are made printable and cut to their
// bounds (pkg/reasontext ForNode): the reason comes from whoever wrote the request, and
// the errors and a blocker's detail from the apiserver's answers, and none
// may grow the record without bound. The Node's annotations share 256 KiB;
// a 128 KiB reason copied whole failed every write of the record.
func (s *Status) bounded() *Status {
	b := *s
	b.Reason = reasontext.ForNode(s.Reason, reasontext.MaxReason)
	b.LastError = reasontext.ForNode(s.LastError, reasontext.MaxMessage)
	if len(s.Blockers) > 0 {
		b.Blockers = make([]Blocker, len(s.Blockers))
		for i, bl := range s.Blockers {
			bl.Detail = reasontext.ForNode(bl.Detail, reasontext.MaxReason)
			b.Blockers[i] = bl
		}
	}
	// A VM's message quotes KubeVirt's migration state, and its names are
	// a tenant's.
	if len(s.VMs) > 0 {
		b.VMs = make([]VMStatus, len(s.VMs))
		for i, v := range s.VMs {
			v.Name = reasontext.ForNode(v.Name, reasontext.MaxReason)
			v.Target = reasontext.ForNode(v.Target, reasontext.MaxReason)
			v.Message = reasontext.ForNode(v.Message, reasontext.MaxMessage)
			b.VMs[i] = v
		}
	}
	// PendingPods are namespace/name, which the apiserver validates.
	return &b
}

// ParseMaintenanceRequest reads MaintenanceAnnotation on node: the reason,
// trimmed and cut to reasontext.MaxReason; "" when there is none or it is
// blank; or a *reasontext.RefusedError for a value that reads as no (such
// as "false"), which asks for nothing and changes nothing.
func ParseMaintenanceRequest(node *corev1.Node) (string, error) {
	return reasontext.ParseRequest(MaintenanceAnnotation, node.Annotations[MaintenanceAnnotation])
}

// progress returns the drain progress in percent.
func progress(evictionPods, pending int) int {
	if evictionPods <= 0 {
		return 100
	}
	done := evictionPods - pending
	if done < 0 {
		done = 0
	}
	return done * 100 / evictionPods
}
