package slots

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	// RequestAnnotation holds an agent's Request for a drain slot, on its
	// own Node. Only that node's agent writes it (the Node admission
	// policy); an admin may remove it to withdraw the request.
	RequestAnnotation = "node-agent.io/drain-slot-request"
	// GrantAnnotation holds the coordinator's answer to the request, a
	// Grant. Only the coordinator's ServiceAccount may write it.
	GrantAnnotation = "node-agent.io/drain-slot"
	// SlotPrefix names the slot Leases the coordinator holds:
	// SlotPrefix + the node's name.
	SlotPrefix = "node-agent-drain-slot-"
	// LeaseRequestID is the Lease annotation naming the request a slot
	// answers, so a new request of the same node is a new slot.
	LeaseRequestID = "node-agent.io/drain-slot-request-id"
	// LeasePurpose is the Lease annotation naming the purpose.
	LeasePurpose = "node-agent.io/drain-slot-purpose"
	// LeaseRecoveringSince is the Lease annotation saying since when (RFC
	// 3339) its holder, which gave the slot back, recovers
	// (slots.pools[].recoveryBound): the slot stays held until the node is
	// healthy, and a new leader counts the bound from this time.
	LeaseRecoveringSince = "node-agent.io/drain-slot-recovering-since"
	// SlotLabel marks the slot Leases, so the coordinator watches only
	// them.
	SlotLabel = "node-agent.io/drain-slot"
)

// maxAnnotationBytes bounds what is parsed: a request or grant is a few
// hundred bytes; anything longer is malformed, not worth decoding.
const maxAnnotationBytes = 4096

// Purpose names what a slot is for. A node asks for one purpose at a time.
type Purpose string

const (
	// PurposeMaintenance is a maintenance drain (the node-agent.io/maintenance
	// annotation or a NodeMaintenance object).
	PurposeMaintenance Purpose = "maintenance"
	// PurposeReboot is a coordinated reboot (pkg/reboot): the slot is held
	// through the drain, the reboot and the uncordon.
	PurposeReboot Purpose = "reboot"
)

func (p Purpose) valid() bool { return p == PurposeMaintenance || p == PurposeReboot }

// Request is an agent's request for a slot, kept on its own Node.
type Request struct {
	// Purpose is what the slot is for.
	Purpose Purpose `json:"purpose"`
	// ID tells this request from an earlier one of the same node: a new
	// request gets a new ID and goes to the back of the queue.
	ID string `json:"id"`
	// RequestedAt is when the agent asked, as its clock says: for people
	// and logs only. The coordinator never orders by it (an agent's token
	// can write any time here); it orders by a Queued Grant's Time.
	RequestedAt time.Time `json:"requestedAt"`
	// Heartbeat changes while the agent holds the slot. Its value means
	// nothing; the coordinator notes when it saw it change.
	Heartbeat int64 `json:"heartbeat,omitempty"`
	// HoldSeconds, when set, says the host is about to reboot and its agent
	// will send no heartbeat for up to this long (reboot.slotHoldBound); the
	// coordinator keeps the slot that long, never longer than its own
	// reboot.slotHoldBound.
	HoldSeconds int64 `json:"holdSeconds,omitempty"`
}

// GrantState is where a request stands with the coordinator.
type GrantState string

const (
	// Queued: the coordinator has the request and it waits for room.
	Queued GrantState = "Queued"
	// Granted: the node holds the slot named in Grant.Slot.
	Granted GrantState = "Granted"
	// Revoked: the coordinator took the slot back (Grant.Reason says why);
	// the request is not served again. A new request (a new ID) is.
	Revoked GrantState = "Revoked"
)

// Grant is the coordinator's answer to a node's request.
type Grant struct {
	// ID is the ID of the request answered.
	ID      string     `json:"id"`
	Purpose Purpose    `json:"purpose"`
	State   GrantState `json:"state"`
	// Slot is the Lease held, while Granted.
	Slot string `json:"slot,omitempty"`
	// Reason says why it waits or why it was revoked. Queued, it names
	// the pool that is full and, at the head of that pool's queue, the
	// nodes holding its slots with when each took it, and the request's
	// place (explain.go); the agent shows it on its Node as it is.
	Reason string `json:"reason,omitempty"`
	// Time is when the state was entered, on the coordinator's clock. For
	// Queued, that is when a coordinator first saw this request (ID): the
	// request's place in the queue, which a new leader keeps. Only the
	// coordinator may write this annotation (its admission policy refuses
	// it to the agents), so no requester sets its own place.
	Time time.Time `json:"time"`
	// Refused, on a Revoked answer, says the request was never served: its
	// purpose is off in the coordinator's configuration (Reason says
	// which). The agent asks again only after a pause (RefusedRetry), so a
	// refusal is not a write loop.
	Refused bool `json:"refused,omitempty"`
}

// Answers reports whether g answers req.
func (g *Grant) Answers(req *Request) bool {
	return g != nil && req != nil && g.ID == req.ID && g.Purpose == req.Purpose
}

// ParseRequest reads the request on node: nil when there is none.
func ParseRequest(node *corev1.Node) (*Request, error) {
	raw, ok := node.Annotations[RequestAnnotation]
	if !ok {
		return nil, nil
	}
	return DecodeRequest(raw)
}

// DecodeRequest parses a request annotation's value.
func DecodeRequest(raw string) (*Request, error) {
	var r Request
	if err := decode(raw, &r); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", RequestAnnotation, err)
	}
	switch {
	case !r.Purpose.valid():
		return nil, fmt.Errorf("annotation %s: purpose %q is neither %q nor %q", RequestAnnotation, r.Purpose, PurposeMaintenance, PurposeReboot)
	case r.ID == "" || len(r.ID) > 64:
		return nil, fmt.Errorf("annotation %s: id must be 1 to 64 characters", RequestAnnotation)
	case r.HoldSeconds < 0:
		return nil, fmt.Errorf("annotation %s: holdSeconds %d is negative", RequestAnnotation, r.HoldSeconds)
	}
	return &r, nil
}

// Encode renders r as the annotation's value; a nil request renders as "".
func (r *Request) Encode() string {
	if r == nil {
		return ""
	}
	return encode(r)
}

// ParseGrant reads the grant on node: nil when there is none.
func ParseGrant(node *corev1.Node) (*Grant, error) {
	raw, ok := node.Annotations[GrantAnnotation]
	if !ok {
		return nil, nil
	}
	return DecodeGrant(raw)
}

// DecodeGrant parses a grant annotation's value.
func DecodeGrant(raw string) (*Grant, error) {
	var g Grant
	if err := decode(raw, &g); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", GrantAnnotation, err)
	}
	switch g.State {
	case Queued, Revoked:
	case Granted:
		if g.Slot == "" {
			return nil, fmt.Errorf("annotation %s: state Granted names no slot", GrantAnnotation)
		}
	default:
		return nil, fmt.Errorf("annotation %s: unknown state %q", GrantAnnotation, g.State)
	}
	return &g, nil
}

// Encode renders g as the annotation's value.
func (g *Grant) Encode() string { return encode(g) }

func decode(raw string, v any) error {
	if len(raw) > maxAnnotationBytes {
		return fmt.Errorf("value of %d bytes is longer than %d", len(raw), maxAnnotationBytes)
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func encode(v any) string {
	// Plain strings, numbers and times: Marshal cannot fail.
	b, _ := json.Marshal(v)
	return string(b)
}

// LeaseName is the slot Lease of node.
func LeaseName(node string) string { return SlotPrefix + node }
