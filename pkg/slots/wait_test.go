package slots

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAcquireReportsTheQueuedAnswer: a request that waits is told, through
// onWait, the coordinator's answer: which pool is full, which node holds
// its slot and its place.
func TestAcquireReportsTheQueuedAnswer(t *testing.T) {
	b := newBed(t, "n1", "n2")
	t.Cleanup(b.coordinator(1, time.Minute))
	h1, r2 := b.firstHoldsSecondAsks(t)
	reports := make(chan error, 16)
	go func() {
		_, _ = r2.Acquire(b.ctx, PurposeMaintenance, func(err error) { reports <- err })
	}()
	var got error
	select {
	case got = <-reports:
	case <-time.After(10 * time.Second):
		t.Fatal("n2 was never told it waits")
	}
	var w QueueWait
	if !errors.As(got, &w) {
		t.Fatalf("n2 was told %v, want a QueueWait", got)
	}
	msg := w.WaitReason()
	for _, want := range []string{"waiting for a drain slot from the coordinator: pool default: 1 of 1", "slots held by n1 since", "place 1 in the queue"} {
		if !strings.Contains(msg, want) {
			t.Errorf("n2 is told %q, want it to say %q", msg, want)
		}
	}
	h1.Release()
}
