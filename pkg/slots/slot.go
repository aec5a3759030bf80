package slots

import (
	"context"
	"errors"
	"time"
)

// Slot is a drain slot as every caller sees it: the maintenance lifecycle
// (pkg/maintenance) and the reboot controller (pkg/reboot) take this one
// type, and the Requester hands it out. A slot is held (Acquire: this
// node asked for it) or followed (Await: another caller of this node
// holds it, and this one only watches it).
type Slot interface {
	// Name is the slot Lease's name, for the record, Events and the log.
	Name() string
	// Release gives a held slot back, or stops following a followed one;
	// it may be called more than once. After KeepAcrossReboot it only
	// stops renewing: the slot stays held until the rebooted agent takes it
	// back, or the coordinator revokes it once the heartbeat stopped.
	Release()
	// Lost is closed when the slot was taken back without Release (the
	// coordinator revoked it, or an admin withdrew the request);
	// LostReason then says why.
	Lost() <-chan struct{}
	LostReason() string
	// KeepAcrossReboot makes a held slot outlive this process: it tells
	// the coordinator that the host is about to reboot and that this agent
	// may then be silent for up to d. Renewal goes on as before while the
	// process lives and Release is not called; once it stops, the
	// coordinator revokes the slot only when no heartbeat
	// came for d (at most its own reboot.slotHoldBound, never less than
	// slots.heartbeatBound), so a node that never comes back does not
	// hold it for ever. Release no longer gives the slot back. The agent
	// that starts after the reboot takes it back (Requester.Acquire). Only
	// the holder may: a followed slot refuses.
	KeepAcrossReboot(ctx context.Context, d time.Duration) error
}

var (
	_ Slot = (*Held)(nil)
	_ Slot = (*Followed)(nil)
)

// errFollowedKeep is KeepAcrossReboot's answer on a followed slot.
var errFollowedKeep = errors.New("a followed drain slot is kept across a reboot by the caller that holds it, not by one that follows it")

// KeepAcrossReboot refuses: a followed slot is not this caller's to keep.
func (f *Followed) KeepAcrossReboot(context.Context, time.Duration) error { return errFollowedKeep }
