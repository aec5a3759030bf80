package slots

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// recoveringBed runs a coordinator whose pool "all" has a RecoveryBound of
// bound, with health deciding every node's health, until the test ends.
func (b *bed) recoveringCoordinator(bound time.Duration, health func(string) Health) *[]string {
	var mu sync.Mutex
	var asked []string
	ctx, cancel := context.WithCancel(b.ctx)
	c := NewCoordinator(CoordinatorOptions{Client: b.client, Namespace: "node-agent",
		Pools:          []Pool{{Name: DefaultPool, Limit: 1}, {Name: "all", RecoveryBound: bound}},
		HeartbeatBound: time.Minute, RebootHoldBound: time.Hour, Clock: clock.RealClock{}, Logger: b.log, LeaseResync: time.Hour,
		Health: func(_ context.Context, n *corev1.Node, pools []string) Health {
			mu.Lock()
			asked = append(asked, n.Name+":"+strings.Join(pools, ","))
			mu.Unlock()
			return health(n.Name)
		}})
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	b.t.Cleanup(func() { cancel(); <-done })
	return &asked
}

// TestRecoveryOutlivesTheLeader: a new leader finds n1's slot Lease, whose
// holder gave it back an hour ago and has not recovered since (the
// annotation an earlier leader wrote): it counts the bound of 30m from
// then, so the pool is stopped at once, and n2 is told so. Were the bound
// counted from the new leader's start, n2 would be told only that the
// slot is held.
func TestRecoveryOutlivesTheLeader(t *testing.T) {
	b := newBed(t, "n1", "n2")
	since := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName("n1"), Namespace: "node-agent",
		Labels:      map[string]string{SlotLabel: "true"},
		Annotations: map[string]string{LeaseRequestID: "n1-1", LeasePurpose: string(PurposeMaintenance), LeaseRecoveringSince: since.Format(time.RFC3339)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1"), AcquireTime: ptr.To(metav1.NewMicroTime(since.Add(-time.Minute)))}}
	if _, err := b.fake.CoordinationV1().Leases("node-agent").Create(b.ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asked := b.recoveringCoordinator(30*time.Minute, func(string) Health { return Health{Reason: "1 DaemonSet pod(s) not Ready: kube-system/cni-n1"} })
	b.ask("n2", "n2-1")
	waitFor(t, "n2 told that pool all is stopped by n1", func() bool {
		g, _ := ParseGrant(b.node("n2"))
		return g != nil && g.State == Queued && strings.Contains(g.Reason, "pool all: n1 did not come back healthy within recoveryBound (30m0s)")
	})
	if b.leases() != 1 {
		t.Errorf("%d slot Leases, want n1's only", b.leases())
	}
	if got := (*asked)[0]; got != "n1:all" {
		t.Errorf("health asked for %q, want n1 for pool all", got)
	}
}

// TestRecoveringSlotIsRecordedThenHandedOn: n1 gives its slot back while
// not healthy; the coordinator records since when on its Lease, keeps it,
// and hands it to n2 only once n1 is healthy.
func TestRecoveringSlotIsRecordedThenHandedOn(t *testing.T) {
	b := newBed(t, "n1", "n2")
	var mu sync.Mutex
	healthy := false
	b.recoveringCoordinator(time.Hour, func(node string) Health {
		mu.Lock()
		defer mu.Unlock()
		if healthy {
			return Health{Healthy: true}
		}
		return Health{Reason: "node " + node + " is not Ready"}
	})
	h1, r2 := b.firstHoldsSecondAsks(t)
	got := make(chan Slot, 1)
	go func() {
		h, err := r2.Acquire(b.ctx, PurposeMaintenance, nil)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	h1.Release()
	waitFor(t, "n1's Lease recording its recovery", func() bool {
		l, err := b.fake.CoordinationV1().Leases("node-agent").Get(b.ctx, LeaseName("n1"), metav1.GetOptions{})
		if err != nil {
			return false
		}
		_, err = time.Parse(time.RFC3339, l.Annotations[LeaseRecoveringSince])
		return err == nil
	})
	select {
	case <-got:
		t.Fatal("n2 was granted while n1 recovers")
	case <-time.After(300 * time.Millisecond):
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	h2 := <-got
	if h2.Name() != LeaseName("n2") {
		t.Errorf("n2 holds %s", h2.Name())
	}
	h2.Release()
}
