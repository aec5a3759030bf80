package maintenance

import "github.com/node-agent/node-agent/pkg/selfdrain"

// The lifecycle's one decision: given what asks for maintenance now, the
// record on the Node and the drain running, what happens next. Decide is
// pure; Controller.reconcile gathers its Input and carries its Decision out.

// Requests is what asks for maintenance of the node right now, by the
// triggers that a request arrives by (the shutdown guard's comes through
// Controller.DrainForShutdown instead, and owns the engine while it lasts).
// Each is a requester (Requesters); the node is in maintenance while any
// of them asks.
type Requests struct {
	Annotation string // the maintenance annotation's reason, or ""
	// Owners are the owner annotations' requests (requesters.go), in the
	// order of their names; each has Kind KindOwner.
	Owners []Requester
	Object *NodeMaintenance // the primary NodeMaintenance object, or nil
	// Objects are all the NodeMaintenance objects naming the node, those
	// being deleted too; each live one is a requester. Empty, Object alone
	// is.
	Objects []*NodeMaintenance
	Reboot  string // the reboot controller's reason, or ""
}

func (r Requests) wanted() bool {
	return r.Annotation != "" || len(r.Owners) > 0 || r.Object != nil || r.Reboot != ""
}

// answeredBy reports whether the maintenance recorded in st was started for
// r: the same trigger and reason. The reboot controller's reason is its
// latest message, which changes while the request stays, so for it the
// trigger alone counts. With several requesters it is enough that one of
// them held the maintenance recorded (recorded, the list beside the
// record): a requester that comes or goes while another stays does not
// make a new request.
func (r Requests) answeredBy(st *selfdrain.Status, recorded []Requester) bool {
	trigger, reason := r.trigger()
	if st.Trigger == trigger && (trigger == selfdrain.TriggerReboot || st.Reason == reason) {
		return true
	}
	return len(recorded) > 0 && r.answeredByList(recorded)
}

// trigger and reason of a drain started for r: the annotation wins, only
// because it was the agent's first API, then the owner annotations (as the
// annotation trigger), then a NodeMaintenance object, then the reboot
// controller's request; either way one drain serves them all.
func (r Requests) trigger() (selfdrain.Trigger, string) {
	switch {
	case r.Annotation != "":
		return selfdrain.TriggerAnnotation, r.Annotation
	case len(r.Owners) > 0:
		return selfdrain.TriggerAnnotation, r.Owners[0].Reason
	case r.Object != nil:
		return selfdrain.TriggerNodeMaintenance, r.Object.requestReason()
	}
	return selfdrain.TriggerReboot, r.Reboot
}

// reasonFor is the reason r asks for a drain of trigger t, and whether it
// asks for one.
func (r Requests) reasonFor(t selfdrain.Trigger) (string, bool) {
	switch t {
	case selfdrain.TriggerAnnotation:
		if r.Annotation == "" && len(r.Owners) > 0 {
			return r.Owners[0].Reason, true
		}
		return r.Annotation, r.Annotation != ""
	case selfdrain.TriggerNodeMaintenance:
		if r.Object != nil {
			return r.Object.requestReason(), true
		}
	case selfdrain.TriggerReboot:
		return r.Reboot, r.Reboot != ""
	}
	return "", false
}

// endReason says why a maintenance started by trigger ends.
func endReason(t selfdrain.Trigger) string {
	switch t {
	case selfdrain.TriggerNodeMaintenance:
		return "NodeMaintenance object deleted"
	case selfdrain.TriggerShutdown:
		return "node is back after the shutdown drain"
	case selfdrain.TriggerReboot:
		return "the reboot controller is done with the node"
	}
	return "maintenance annotation removed"
}

// Running is the drain the controller runs now.
type Running struct {
	Trigger selfdrain.Trigger
	Reason  string
}

// Input is everything Decide looks at.
type Input struct {
	Requests Requests
	// Record is the drain record on the Node; RecordErr says why it could
	// not be read (then Record is nil).
	Record    *selfdrain.Status
	RecordErr error
	// Recorded are the requesters listed beside the record
	// (RequestersAnnotation): those that held the maintenance recorded.
	Recorded []Requester
	// Running is the drain running now, or nil.
	Running *Running
	// Shutdown is true while the shutdown guard owns the engine.
	Shutdown bool
	// OnTimeout is drain.onTimeout.
	OnTimeout string
}

// Action is what Decide asks of the controller.
type Action int

const (
	// Keep changes nothing.
	Keep Action = iota
	// StartDrain starts a drain for Decision.Trigger and Reason: it waits
	// for its gates and its slot, begins (cordon, taint, record) and
	// drains.
	StartDrain
	// StopDrain stops the running drain, then ends the maintenance of
	// Decision.Trigger: no request asks any longer.
	StopDrain
	// End ends a maintenance that no drain serves (the request
	// went away while the agent was down, or the host came back from a
	// shutdown drain): it undoes what the agent did.
	End
	// UndoAfterTimeout undoes what the agent did after a drain that timed
	// out (drain.onTimeout uncordon); the maintenance stays requested.
	UndoAfterTimeout
	// HandOver gives the reboot controller's maintenance, which it no
	// longer asks for, to the request that keeps the node in maintenance
	// (Decision.Trigger and Reason); StopRunning says the reboot's run is
	// stopped first.
	HandOver
)

var actionNames = [...]string{"Keep", "StartDrain", "StopDrain", "End", "UndoAfterTimeout", "HandOver"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(?)"
}

// Decision is Decide's answer.
type Decision struct {
	Action Action
	// Trigger and Reason: of the drain to start or to hand over to; for
	// StopDrain and EndMaintenance, the trigger whose maintenance ends.
	Trigger selfdrain.Trigger
	Reason  string
	// StopRunning, with HandOver, stops the running drain first.
	StopRunning bool
}

// Decide compares what is requested with the record on the Node and the
// drain running now.
func Decide(in Input) Decision {
	req, st, perr := in.Requests, in.Record, in.RecordErr
	switch {
	case in.Shutdown:
		// The shutdown guard owns the engine until the host goes down or
		// the shutdown is cancelled.
	case req.wanted() && req.Reboot == "" && perr == nil && st.Active() && st.Trigger == selfdrain.TriggerReboot:
		// The reboot controller no longer asks for its drain (the host
		// is back, the reboot was called off or given up), but another
		// request keeps the node: it takes the reboot's maintenance over,
		// whatever its phase. Left to the reboot, the record keeps the
		// coordinator waiting for its own maintenance to end with its
		// drain slot held, for as long as the other request stays
		// (test/property, P8), and that request's drain, which needs a
		// slot of its own, waits behind the reboot's slot for ever. The
		// reboot's run stops: the drain goes on in the request's own
		// slot. Another request's run, waiting for its slot, goes on.
		trigger, reason := req.trigger()
		return Decision{Action: HandOver, Trigger: trigger, Reason: reason,
			StopRunning: in.Running != nil && in.Running.Trigger == selfdrain.TriggerReboot}
	case req.wanted() && in.Running == nil:
		return decideStart(in)
	case !req.wanted() && in.Running != nil:
		return Decision{Action: StopDrain, Trigger: in.Running.Trigger}
	case !req.wanted() && perr == nil && st.Active():
		// Maintenance ended while no drain ran: the request went away
		// while the agent was down, or the host came back from a shutdown
		// drain. Undo what the agent did.
		return Decision{Action: End, Trigger: st.Trigger}
	}
	return Decision{Action: Keep}
}

// decideStart decides for a request while no drain runs.
func decideStart(in Input) Decision {
	req, st := in.Requests, in.Record
	switch {
	case in.RecordErr != nil:
		// Starting would overwrite a record we cannot read; the admin
		// must fix or delete it first.
		return Decision{Action: Keep}
	case st.Active() && st.Trigger != selfdrain.TriggerShutdown && st.Phase == selfdrain.PhaseSucceeded:
		return Decision{Action: Keep} // drained; maintenance goes on while it is requested
	case st.TimedOut() && req.answeredBy(st, in.Recorded):
		// Its drain passed drain.timeout. Starting it again would take a
		// slot for another drain.timeout, and again after that: the
		// request is answered, Failed, until it is ended or made anew
		// (another reason, or ended and made again).
		if st.UndoneAt == nil && undoesOnTimeout(in.OnTimeout, st.Trigger) {
			return Decision{Action: UndoAfterTimeout}
		}
		return Decision{Action: Keep}
	}
	trigger, reason := req.trigger()
	if st.Active() && st.Phase == selfdrain.PhaseRunning {
		// A drain the record shows under way resumes as what it was while
		// that still asks: a reboot's drain resumed as the annotation's
		// would wait for a maintenance slot behind the reboot's own, while
		// the reboot controller waits for its drain (test/property, P8).
		if asked, ok := req.reasonFor(st.Trigger); ok {
			trigger, reason = st.Trigger, asked
		}
	}
	return Decision{Action: StartDrain, Trigger: trigger, Reason: reason}
}
