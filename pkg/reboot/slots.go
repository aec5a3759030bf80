package reboot

import (
	"context"

	"github.com/node-agent/node-agent/pkg/slots"
)

// Slot is the drain slot the coordinator holds for a reboot: pkg/slots'
// one slot type (slots.Slot, whose doc says what KeepAcrossReboot and
// Release do), which the maintenance lifecycle takes too.
type Slot = slots.Slot

// Slots hands out the cluster's drain slots: *slots.Requester.
type Slots interface {
	// Acquire blocks until this node holds a slot for purpose, or ctx
	// ends; a slot this node still holds (from before a restart or a
	// reboot) is taken back at once. onWait is called with nil when every
	// slot is held by other nodes, and with the error of every round in
	// which the slots could not even be checked, so that the coordinator
	// can say why it waits.
	Acquire(ctx context.Context, purpose slots.Purpose, onWait func(error)) (slots.Slot, error)
}
