package reboot

import (
	"context"
	"time"
)

// Slot is a drain slot the controller holds: one of the cluster's
// slots.limit, the same slots the maintenance drains take. The
// wiring adapts the cluster's drain slots to it; this package names no
// implementation.
type Slot interface {
	// Name names the slot, for the record, Events and the log.
	Name() string
	// Release stops renewing the slot and gives it back. After
	// KeepAcrossReboot it only stops renewing: the slot stays held until
	// the rebooted agent takes it back, or it expires. It may be called
	// more than once.
	Release()
	// KeepAcrossReboot makes the slot outlive this process: from now on it
	// is renewed with duration d for as long as the process lives, so that
	// it expires d after the last renewal when the node never comes back,
	// and Release no longer gives it back. The agent that starts after the
	// reboot takes it back (Slots.Acquire).
	KeepAcrossReboot(ctx context.Context, d time.Duration) error
	// Lost is closed when the slot was taken back without Release (the
	// cluster's coordinator revoked it, or an admin withdrew its
	// request); LostReason then says why.
	Lost() <-chan struct{}
	LostReason() string
}

// Slots hands out the cluster's drain slots.
type Slots interface {
	// Acquire blocks until this node holds a slot, or ctx ends; a slot
	// this node still holds (from before a restart or a reboot) is taken
	// back at once. onWait is called with nil when every slot is held by
	// other nodes, and with the error of every round in which the slots
	// could not even be checked, so that the controller can say why it
	// waits.
	Acquire(ctx context.Context, onWait func(error)) (Slot, error)
}
