package reboot

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/reasontext"
)

const (
	// RecordAnnotation holds the controller's Record as JSON on its Node.
	// It is how a reboot survives the reboot: the agent that starts after
	// it reads where the last one stopped.
	RecordAnnotation = "node-agent.io/reboot-status"
	// RequestAnnotation asks for this node's reboot without a sentinel
	// (node-agent reboot request NODE); its value is the reason, and
	// ParseRequest says which values ask (a value such as "false" does
	// not: it is refused). The
	// controller removes it once the node is back from the reboot it
	// asked for, or when the attempt's drain failed (DrainFailed): asking
	// again is then a new request, which starts at once.
	RequestAnnotation = "node-agent.io/reboot"

	// ConditionType is the Node condition the controller keeps. Its status
	// is True while a reboot is needed or under way, False when none is
	// needed (NotNeeded, Done), and Unknown when the need cannot be found
	// out (the sentinel command failed, the sentinel file cannot be read).
	ConditionType corev1.NodeConditionType = "RebootRequired"
	// ReasonUnknown is the condition's reason while the need is unknown.
	ReasonUnknown = "NeedUnknown"
)

// Record is what the controller keeps on its Node (RecordAnnotation): the
// state it reports, how far a reboot has gone, and the last reboot, for the
// loop guard.
type Record struct {
	// State and Reason are those of the condition; Reason is the State, or
	// for Pending the Detail (OutsideWindow, BlockedByPods, ...).
	State  State  `json:"state"`
	Reason string `json:"reason"`
	// Message is the condition's message.
	Message string `json:"message,omitempty"`
	// Since is when the node first needed this reboot (the need seen, or
	// the request made); nil while none is needed.
	Since *metav1.Time `json:"since,omitempty"`
	// Phase is how far the reboot under way has gone.
	Phase Phase `json:"phase,omitempty"`
	// Slot names the drain slot the reboot holds (Slot.Name), when it
	// holds one.
	Slot string `json:"slot,omitempty"`
	// Drain says the controller asks for the node's drain: pkg/selfdrain
	// reads it as a maintenance request (trigger "reboot", through
	// maintenance.DrainRequest), from the start of the drain until the host
	// is back and Ready, or the reboot is called off or given up.
	Drain bool `json:"drain,omitempty"`
	// BootID is the Node's status.nodeInfo.bootID when logind was asked
	// to reboot; another boot ID means the host rebooted.
	BootID string `json:"bootID,omitempty"`
	// RequestedAt is when logind was asked to reboot.
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
	// DrainedAt is when the reboot's drain finished, kept while the node
	// waits drained (PhaseDrained) for gates asked again before the reboot.
	DrainedAt *metav1.Time `json:"drainedAt,omitempty"`
	// LastReboot is when the host last came back from a reboot the
	// controller asked for, and SentinelSurvived whether the need was
	// still there afterwards (the loop guard).
	LastReboot       *metav1.Time `json:"lastReboot,omitempty"`
	SentinelSurvived bool         `json:"sentinelSurvived,omitempty"`
	// FailedAt is when the last attempt failed (the drain did not finish
	// within drain.timeout), DrainFailures how many failed so in a row,
	// and RetryAt when the next may start (DrainFailedBackoff), unless an
	// admin asks again first. A reboot that is made clears them.
	FailedAt      *metav1.Time `json:"failedAt,omitempty"`
	DrainFailures int          `json:"drainFailures,omitempty"`
	RetryAt       *metav1.Time `json:"retryAt,omitempty"`
	// FailedRequest is the value of the RequestAnnotation that the failed
	// attempt answered (and removed); the same value seen again is that
	// request, not a new one.
	FailedRequest string `json:"failedRequest,omitempty"`
	// BlockedSince is when blockers first held this reboot
	// (Decision.BlockedSince), the start of reboot.blockerBound;
	// BoundExceeded is what was decided once that bound ran out (wait or
	// proceed), while it holds. An agent of a release before these
	// fields refuses a record that carries them (it decodes strictly):
	// rolled back while blockers hold a reboot, it stops on the record
	// until the annotation is removed, as its message says.
	BlockedSince  *metav1.Time `json:"blockedSince,omitempty"`
	BoundExceeded string       `json:"boundExceeded,omitempty"`
}

// Needed says whether the record reports a reboot needed or under way.
func (r *Record) Needed() bool {
	if r == nil {
		return false
	}
	switch r.State {
	case NotNeeded, Done, "":
		return false
	}
	return true
}

// ParseRecord reads the record on node; nil without one.
func ParseRecord(node *corev1.Node) (*Record, error) {
	raw, ok := node.Annotations[RecordAnnotation]
	if !ok || strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	return DecodeRecord(raw)
}

// DecodeRecord decodes a RecordAnnotation value.
func DecodeRecord(raw string) (*Record, error) {
	var r Record
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("annotation %s is not valid reboot record JSON (%w); the reboot controller will not act on it: fix it, or delete it to let the reboot controller start afresh", RecordAnnotation, err)
	}
	if r.State == legacyFailed {
		// Written before the state was named DrainFailed; the same
		// failure.
		r.State = DrainFailed
		if r.Reason == string(legacyFailed) {
			r.Reason = string(DrainFailed)
		}
	}
	known := false
	for _, s := range States {
		known = known || r.State == s
	}
	if !known {
		return nil, fmt.Errorf("annotation %s has unknown state %q; the reboot controller will not act on it: fix it, or delete it to let the reboot controller start afresh", RecordAnnotation, r.State)
	}
	switch r.Phase {
	case PhaseIdle, PhaseWaitingForSlot, PhaseDraining, PhaseDrained, PhaseDrainTimedOut, PhaseRebootRequested, PhaseBack:
	default:
		return nil, fmt.Errorf("annotation %s has unknown phase %q; the reboot controller will not act on it: fix it, or delete it to let the reboot controller start afresh", RecordAnnotation, r.Phase)
	}
	return &r, nil
}

// legacyFailed is what DrainFailed was called before: a record an older
// agent wrote still decodes, so an upgrade never leaves a node's
// controller stopped on a "malformed" record.
const legacyFailed State = "Failed"

// Encode renders r as the annotation's value, its texts cut to their
// bounds (pkg/reasontext): the message may quote the request's reason, and
// FailedRequest is that reason, written by whoever may annotate the Node.
func (r *Record) Encode() string {
	b := *r
	b.Message = reasontext.ForNode(r.Message, reasontext.MaxMessage)
	b.FailedRequest = reasontext.ForNode(r.FailedRequest, reasontext.MaxReason)
	out, _ := json.Marshal(&b) // a struct of strings, times and bools
	return string(out)
}

// ParseRequest reads RequestAnnotation on node: the reason, trimmed and cut
// to reasontext.MaxReason; "" when there is none or it is blank; or a
// *reasontext.RefusedError for a value that reads as no (such as "false"),
// which asks for no reboot.
func ParseRequest(node *corev1.Node) (string, error) {
	return reasontext.ParseRequest(RequestAnnotation, node.Annotations[RequestAnnotation])
}

// Reason is the condition reason for d: ReasonUnknown while the need is
// unknown, the Detail for Pending, else the State.
func (d Decision) Reason() string {
	if d.Status == corev1.ConditionUnknown {
		return ReasonUnknown
	}
	if d.State == Pending && d.Detail != "" {
		return string(d.Detail)
	}
	return string(d.State)
}

// Reasons lists every condition reason, for metric labels and docs.
var Reasons = []string{
	string(NotNeeded), string(OutsideWindow), string(BlockedByPods), string(BlockedByAlerts), string(BlockedByGates), string(BlockedByVMs),
	string(WaitingForSlot), string(InMaintenance), string(Draining), string(Rebooting), string(Done),
	string(DrainFailed), string(RebootLoop), ReasonUnknown,
}
