package slots

import (
	"strings"
	"testing"
	"time"
)

// TestAwaitFollowsAnotherPartsSlot: the reboot's drain follows the slot the
// reboot controller holds. It waits, asking for nothing, until that slot
// is granted; its Release leaves the slot to its holder; and it is told
// when the coordinator takes the slot back.
func TestAwaitFollowsAnotherPartsSlot(t *testing.T) {
	b := newBed(t, "n1")
	defer b.coordinatorHold(1, time.Minute, map[Purpose]time.Duration{PurposeReboot: 2 * time.Second})()
	r, stop := b.requester("n1")
	defer stop()
	waited := make(chan struct{}, 1)
	got := make(chan Slot, 1)
	go func() {
		f, err := r.Await(b.ctx, PurposeReboot, func(error) { waited <- struct{}{} })
		if err != nil {
			t.Error(err)
		}
		got <- f
	}()
	<-waited
	select {
	case <-got:
		t.Fatal("Await returned while no slot was held")
	case <-time.After(200 * time.Millisecond):
	}
	if _, ok := b.node("n1").Annotations[RequestAnnotation]; ok {
		t.Fatal("Await asked for a slot")
	}

	h, err := r.Acquire(b.ctx, PurposeReboot, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := <-got
	if f == nil || f.Name() != h.Name() {
		t.Fatalf("followed %+v, want the holder's slot %s", f, h.Name())
	}
	f.Release()
	if g, _ := ParseGrant(b.node("n1")); g == nil || g.State != Granted {
		t.Fatalf("grant %+v after the follower's Release; want the slot still held", g)
	}
	select {
	case <-f.Lost():
		t.Fatal("the slot counts as lost after the follower's Release")
	default:
	}

	// The coordinator takes the slot back past the reboot's bound: the
	// follower is told, as the holder is.
	f, err = r.Await(b.ctx, PurposeReboot, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	select {
	case <-f.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the follower was not told that the slot was taken back")
	}
	if !strings.Contains(f.LostReason(), "longer than the reboot bound") {
		t.Errorf("reason %q", f.LostReason())
	}
	<-h.Lost()
	h.Release()
	waitFor(t, "the slot Lease deleted", func() bool { return b.leases() == 0 })
}
