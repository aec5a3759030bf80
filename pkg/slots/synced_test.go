package slots

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestSyncedOnlyOnceTheLeasesAreRead: a coordinator that has every Node but
// cannot list the slot Leases is not synced and answers nothing (it cannot
// know which slots are held); once the list succeeds it is synced and
// decides; when Run returns it is not synced any more.
func TestSyncedOnlyOnceTheLeasesAreRead(t *testing.T) {
	b := newBed(t, "n1")
	var failList atomic.Bool
	var failed atomic.Int32
	failList.Store(true)
	b.fake.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failList.Load() {
			failed.Add(1)
			return true, nil, errors.New("injected: the apiserver refuses to list Leases")
		}
		return false, nil, nil
	})
	b.ask("n1", "r1")
	clk := clocktesting.NewFakeClock(time.Now())
	c := NewCoordinator(CoordinatorOptions{Client: b.client, Namespace: "node-agent", Pools: []Pool{{Name: DefaultPool, Limit: 1}},
		HeartbeatBound: time.Minute, RebootHoldBound: time.Hour, Clock: clk, Logger: b.log, LeaseResync: time.Hour})
	if c.Synced() {
		t.Fatal("synced before Run")
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// The Nodes are read (the list of Leases comes after), and the list
	// failed: nothing but a list that succeeds can make it synced now.
	waitFor(t, "a failed list of the slot Leases", func() bool { return failed.Load() > 0 })
	if c.Synced() {
		t.Error("synced although the slot Leases could not be listed")
	}
	if g, err := ParseGrant(b.node("n1")); err != nil || g != nil {
		t.Errorf("n1 answered %+v (%v) before the slot Leases were read", g, err)
	}

	// It lists again after a pause on its clock; the fake clock is moved
	// until it has.
	failList.Store(false)
	waitFor(t, "the coordinator synced", func() bool {
		clk.Step(time.Second)
		return c.Synced()
	})
	waitFor(t, "n1 granted", func() bool {
		g, _ := ParseGrant(b.node("n1"))
		return g != nil && g.State == Granted
	})

	cancel()
	<-done
	if c.Synced() {
		t.Error("still synced after Run returned")
	}
}
