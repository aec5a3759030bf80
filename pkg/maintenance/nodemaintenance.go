package maintenance

import (
	"fmt"
	"sort"

	"github.com/node-agent/node-agent/pkg/selfdrain"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/node-agent/node-agent/pkg/reasontext"
)

// NodeMaintenance objects are the maintenance API that the KubeVirt and
// OpenShift Virtualization documents describe, served until now by
// medik8s/node-maintenance-operator. The fields and their meanings follow
// that operator's api/v1beta1 (nodemaintenance_types.go); the agent serves
// only the objects whose spec.nodeName is its own node.
const (
	// NodeMaintenanceVersion is the only version either group has.
	NodeMaintenanceVersion = "v1beta1"
	// NodeMaintenanceResource is the plural resource name.
	NodeMaintenanceResource = "nodemaintenances"
	// NodeMaintenanceKind is the kind.
	NodeMaintenanceKind = "NodeMaintenance"
	// NodeMaintenanceFinalizer keeps an object the agent serves until the
	// agent has undone the maintenance on the node. It is the agent's own
	// name, not the operator's, so each finalizer has one owner.
	NodeMaintenanceFinalizer = "node-agent.io/nodemaintenance"
)

// NodeMaintenanceGroups are the API groups the agent looks for, today's
// operator's first: nodemaintenance.medik8s.io, then the group the KubeVirt
// documents and older operators use, nodemaintenance.kubevirt.io.
var NodeMaintenanceGroups = []string{"nodemaintenance.medik8s.io", "nodemaintenance.kubevirt.io"}

// NodeMaintenanceGVR returns the resource of group.
func NodeMaintenanceGVR(group string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: NodeMaintenanceVersion, Resource: NodeMaintenanceResource}
}

// NodeMaintenance requests maintenance of spec.nodeName for as long as it
// exists.
type NodeMaintenance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeMaintenanceSpec   `json:"spec,omitempty"`
	Status NodeMaintenanceStatus `json:"status,omitempty"`
}

// NodeMaintenanceSpec is what the admin asks for.
type NodeMaintenanceSpec struct {
	// NodeName is the node to put into maintenance.
	NodeName string `json:"nodeName"`
	// Reason is free text, shown in the node's status and Events.
	Reason string `json:"reason,omitempty"`
	// EvictionTimeout is how long the operator's drain waits for pods in
	// one attempt before it starts another. The agent's drain never gives
	// up on a pod (it retries with backoff), so it has no use for it; the
	// time after which the agent reports Failed is drain.timeout.
	EvictionTimeout *metav1.Duration `json:"evictionTimeout,omitempty"`
}

// NodeMaintenanceStatus is what the agent reports, with the operator's field
// names and meanings.
type NodeMaintenanceStatus struct {
	// Phase is Running, Succeeded or Failed. The agent's Waiting (for a
	// drain slot) shows as Running, with the reason in LastError: the
	// operator has no such phase.
	Phase selfdrain.Phase `json:"phase,omitempty"`
	// DrainProgress is the percentage of EvictionPods gone.
	DrainProgress int `json:"drainProgress,omitempty"`
	// LastUpdate is when the status last changed.
	LastUpdate *metav1.Time `json:"lastUpdate,omitempty"`
	// LastError is the latest blocker, such as a PodDisruptionBudget.
	LastError string `json:"lastError,omitempty"`
	// PendingPods are the pods still to be evicted, as namespace/name.
	PendingPods []string `json:"pendingPods,omitempty"`
	// TotalPods is how many pods were on the node at the start.
	TotalPods int `json:"totalpods,omitempty"`
	// EvictionPods is how many of them were to be evicted.
	EvictionPods int `json:"evictionPods,omitempty"`
	// ErrorOnLeaseCount counts consecutive errors taking a drain slot.
	ErrorOnLeaseCount int `json:"errorOnLeaseCount,omitempty"`
}

// Group returns the API group of the object, from its apiVersion.
func (nm *NodeMaintenance) Group() string {
	return schema.FromAPIVersionAndKind(nm.APIVersion, nm.Kind).Group
}

// ID names the object in messages: group/name, since the same name may
// exist in both groups.
func (nm *NodeMaintenance) ID() string {
	return NodeMaintenanceResource + "." + nm.Group() + "/" + nm.Name
}

func (nm *NodeMaintenance) deleting() bool { return nm.DeletionTimestamp != nil }

func (nm *NodeMaintenance) hasFinalizer() bool {
	for _, f := range nm.Finalizers {
		if f == NodeMaintenanceFinalizer {
			return true
		}
	}
	return false
}

// requestReason is the reason recorded on the node for a maintenance this
// object asks for, cut as the annotation's reason is.
func (nm *NodeMaintenance) requestReason() string {
	if nm.Spec.Reason != "" {
		return reasontext.ForNode(nm.Spec.Reason, reasontext.MaxReason)
	}
	return "NodeMaintenance " + nm.Name
}

// NodeMaintenanceFromUnstructured converts an object read with the dynamic
// client.
func NodeMaintenanceFromUnstructured(u *unstructured.Unstructured) (*NodeMaintenance, error) {
	var nm NodeMaintenance
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nm); err != nil {
		return nil, fmt.Errorf("decoding %s %s: %w", u.GetAPIVersion(), u.GetName(), err)
	}
	return &nm, nil
}

// primaryObject returns the object that names the drain an object starts:
// the oldest one not being deleted (creation time, then group, then name, so
// every reader picks the same one). Every live object naming the node is a
// requester of the same maintenance (requesters.go); none starts a drain of
// its own.
func primaryObject(objs []*NodeMaintenance) *NodeMaintenance {
	var live []*NodeMaintenance
	for _, o := range objs {
		if !o.deleting() {
			live = append(live, o)
		}
	}
	if len(live) == 0 {
		return nil
	}
	sortObjects(live)
	return live[0]
}

func sortObjects(objs []*NodeMaintenance) {
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Group() != b.Group() {
			return a.Group() < b.Group()
		}
		return a.Name < b.Name
	})
}

// objectAction is what the agent must write to one object.
type objectAction struct {
	obj *NodeMaintenance
	// addFinalizer and removeFinalizer change NodeMaintenanceFinalizer.
	addFinalizer, removeFinalizer bool
	// status, when not nil, is the status the object should have.
	status *NodeMaintenanceStatus
}

// planObjects decides, from the node's maintenance record (st, or perr when
// it cannot be read) and whether an annotation (the maintenance annotation or
// an owner's) asks for maintenance too, what each object naming this node
// should show and whether it keeps the finalizer. It returns only actions
// that change something.
//
//   - Every live object is a requester of the node's one maintenance: it
//     gets the finalizer and mirrors the record.
//   - An object being deleted loses the finalizer once the agent has undone
//     the maintenance, or once another request (an annotation, or another
//     object) keeps the node in maintenance anyway. An unreadable record
//     keeps the finalizer: the agent cannot tell whether the node is
//     restored, and fails closed.
func planObjects(objs []*NodeMaintenance, st *selfdrain.Status, perr error, annotation bool) []objectAction {
	held := annotation || primaryObject(objs) != nil
	var out []objectAction
	for _, o := range objs {
		a := objectAction{obj: o}
		if o.deleting() {
			a.removeFinalizer = o.hasFinalizer() && perr == nil && (!st.Active() || held)
		} else {
			a.addFinalizer = !o.hasFinalizer()
			a.status = mirrorStatus(o.Status, st, perr)
		}
		if a.status != nil && statusEqual(*a.status, o.Status) {
			a.status = nil
		}
		if a.addFinalizer || a.removeFinalizer || a.status != nil {
			out = append(out, a)
		}
	}
	return out
}

// mirrorStatus is the status the primary object should show for the node's
// record st. It returns nil to leave the object as it is: before the drain
// has written its first record, nothing new is known.
func mirrorStatus(cur NodeMaintenanceStatus, st *selfdrain.Status, perr error) *NodeMaintenanceStatus {
	if perr != nil {
		s := cur
		s.LastError = reasontext.ForNode(perr.Error(), reasontext.MaxMessage)
		return &s
	}
	if !st.Active() {
		return nil
	}
	s := NodeMaintenanceStatus{
		Phase:             st.Phase,
		DrainProgress:     st.DrainProgress,
		LastUpdate:        st.LastUpdate,
		LastError:         reasontext.ForNode(st.LastError, reasontext.MaxMessage),
		PendingPods:       st.PendingPods,
		TotalPods:         st.TotalPods,
		EvictionPods:      st.EvictionPods,
		ErrorOnLeaseCount: st.ErrorOnLeaseCount,
	}
	if s.Phase == selfdrain.PhaseWaiting {
		s.Phase = selfdrain.PhaseRunning
	}
	return &s
}

func statusEqual(a, b NodeMaintenanceStatus) bool {
	if a.Phase != b.Phase || a.DrainProgress != b.DrainProgress || a.LastError != b.LastError ||
		a.TotalPods != b.TotalPods || a.EvictionPods != b.EvictionPods || a.ErrorOnLeaseCount != b.ErrorOnLeaseCount {
		return false
	}
	if (a.LastUpdate == nil) != (b.LastUpdate == nil) || (a.LastUpdate != nil && !a.LastUpdate.Equal(b.LastUpdate)) {
		return false
	}
	if len(a.PendingPods) != len(b.PendingPods) {
		return false
	}
	for i := range a.PendingPods {
		if a.PendingPods[i] != b.PendingPods[i] {
			return false
		}
	}
	return true
}

// statusPatch is a JSON merge patch that sets the whole status: a field that
// is empty in s is sent as null, so a value left from before is removed.
func statusPatch(s NodeMaintenanceStatus) map[string]any {
	orNil := func(v any, empty bool) any {
		if empty {
			return nil
		}
		return v
	}
	return map[string]any{"status": map[string]any{
		"phase":             orNil(s.Phase, s.Phase == ""),
		"drainProgress":     orNil(s.DrainProgress, s.DrainProgress == 0),
		"lastUpdate":        orNil(s.LastUpdate, s.LastUpdate == nil),
		"lastError":         orNil(s.LastError, s.LastError == ""),
		"pendingPods":       orNil(s.PendingPods, len(s.PendingPods) == 0),
		"totalpods":         orNil(s.TotalPods, s.TotalPods == 0),
		"evictionPods":      orNil(s.EvictionPods, s.EvictionPods == 0),
		"errorOnLeaseCount": orNil(s.ErrorOnLeaseCount, s.ErrorOnLeaseCount == 0),
	}}
}
