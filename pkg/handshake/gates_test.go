package handshake

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

type fakeGates struct{ holds chan []reboot.Blocker }

func (f fakeGates) Blockers(context.Context) []reboot.Blocker { return <-f.holds }

type fakeSlots struct{ asked chan struct{} }

func (f fakeSlots) Acquire(context.Context, func(error)) (selfdrain.Slot, error) {
	close(f.asked)
	return nil, nil
}

// TestGatedSlots: no slot is asked for while a gate holds; the drain is told
// why it waits (a WaitReason, not an error), and the gates are asked again
// every interval.
func TestGatedSlots(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	gates := fakeGates{holds: make(chan []reboot.Blocker)}
	slots := fakeSlots{asked: make(chan struct{})}
	waits := make(chan error, 4)
	done := make(chan error)
	go func() {
		_, err := GatedSlots(slots, 30*time.Second, clk, Check{What: "maintenance gates", Checker: gates}).Acquire(t.Context(), func(err error) { waits <- err })
		done <- err
	}()
	gates.holds <- []reboot.Blocker{{Kind: reboot.BlockerGate, Name: "healthy (up == 0) has 1 series: {} 0"}}
	err := <-waits
	var wr selfdrain.WaitReason
	if !errors.As(err, &wr) || wr.WaitReason() != "waiting for maintenance gates: healthy (up == 0) has 1 series: {} 0" {
		t.Fatalf("onWait(%v), want a WaitReason naming the gate", err)
	}
	select {
	case <-slots.asked:
		t.Fatal("a slot was asked for while a gate held")
	default:
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(30 * time.Second)
	gates.holds <- nil
	<-slots.asked
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
