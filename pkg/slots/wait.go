package slots

// QueueWait is what Requester.Acquire passes to onWait while its request
// waits in the coordinator's queue: the coordinator's Queued answer, which
// names the full pool and, at the head of its queue, the nodes holding its
// slots and the request's place (explain.go). Acquire passes it again each
// time the answer changes. It is an error in type only, so that it travels
// where onWait's errors do; pkg/maintenance shows it as a reason to wait
// (its WaitReason interface), and the reboot controller in its message, not
// as a failure.
type QueueWait struct {
	// Reason is the Queued answer's Reason.
	Reason string
}

// WaitReason says what the drain waits for, in the words of the Node's
// maintenance record: the prefix names the wait as the record always
// has, the rest is the coordinator's.
func (w QueueWait) WaitReason() string {
	if w.Reason == "" {
		return "waiting for a drain slot from the coordinator"
	}
	return "waiting for a drain slot from the coordinator: " + w.Reason
}

func (w QueueWait) Error() string { return w.WaitReason() }
