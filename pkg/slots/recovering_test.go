package slots

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// recoveryTestPools: the cluster with a limit of 1, and the pool "racks" (nodes
// labelled rack) that keeps a slot until its node recovers, at most 10m.
func recoveryTestPools(limit int) []Pool {
	return []Pool{{Name: DefaultPool, Limit: limit},
		{Name: "racks", Selector: labels.SelectorFromSet(labels.Set{"rack": "1"}), RecoveryBound: 10 * time.Minute}}
}

func TestDecideRecovery(t *testing.T) {
	healthy := &Health{Healthy: true}
	notReady := &Health{Reason: "node a is not Ready (False: KubeletNotReady)"}
	for _, tc := range []struct {
		name string
		// a held the slot and withdrew its request (a's request is
		// replaced by newRequest when set); recovering is when its
		// Lease says it began to recover (0: not recorded yet).
		now        time.Duration
		labels     []string
		health     *Health
		recovering time.Duration
		newRequest bool
		// limit is the default pool's (0: 1).
		limit int
		// b waits behind it.
		wantRelease, wantRecovering bool
		wantGrantB                  bool
		wantReasonB                 string
		wantUnrecovered             bool
		wantNext                    time.Duration
	}{{
		name: "a node of no recovery pool gives its slot back at once", now: time.Minute,
		health: notReady, wantRelease: true, wantGrantB: true,
	}, {
		name: "not healthy: the slot stays, recorded as recovering, and b waits", now: time.Minute, labels: []string{"rack=1"},
		health: notReady, wantRecovering: true, wantReasonB: "pool default: 1 of 1 nodes drain (limit); slots held by a",
		wantNext: RecoveryRecheck,
	}, {
		name: "not checked reads as not healthy", now: time.Minute, labels: []string{"rack=1"},
		wantRecovering: true, wantReasonB: "pool default: 1 of 1 nodes drain",
		wantNext: RecoveryRecheck,
	}, {
		name: "healthy at once: released, and b goes", now: time.Minute, labels: []string{"rack=1"},
		health: healthy, wantRelease: true, wantGrantB: true,
	}, {
		name: "recovering, still within the bound", now: 9 * time.Minute, labels: []string{"rack=1"},
		health: notReady, recovering: 2 * time.Minute, wantReasonB: "pool default: 1 of 1 nodes drain",
		wantNext: RecoveryRecheck,
	}, {
		name: "recovering holds one slot: another goes while it has room", now: 9 * time.Minute, labels: []string{"rack=1"}, limit: 2,
		health: notReady, recovering: 2 * time.Minute, wantGrantB: true,
	}, {
		name: "recovering, the bound about to pass: looked at then", now: 11*time.Minute + 58*time.Second, labels: []string{"rack=1"},
		health: notReady, recovering: 2 * time.Minute, wantReasonB: "pool default: 1 of 1 nodes drain",
		wantNext: 3 * time.Second,
	}, {
		name: "recovered: released, and b goes", now: 9 * time.Minute, labels: []string{"rack=1"},
		health: healthy, recovering: 2 * time.Minute, wantRelease: true, wantGrantB: true,
	}, {
		name: "past the bound: the slot stays and the pool stops", now: 13 * time.Minute, labels: []string{"rack=1"}, limit: 2,
		health: notReady, recovering: 2 * time.Minute, wantUnrecovered: true,
		wantReasonB: "pool racks: a did not come back healthy within recoveryBound (10m0s) and keeps its slot (node a is not Ready (False: KubeletNotReady)); no new slot until",
		wantNext:    RecoveryRecheck,
	}, {
		name: "past the bound: the stop is named before a full pool", now: 13 * time.Minute, labels: []string{"rack=1"}, limit: 1,
		health: notReady, recovering: 2 * time.Minute, wantUnrecovered: true,
		wantReasonB: "pool racks: a did not come back healthy within recoveryBound (10m0s) and keeps its slot (node a is not Ready (False: KubeletNotReady)); no new slot until",
		wantNext:    RecoveryRecheck,
	}, {
		name: "a new request of a recovering node waits for its recovery", now: time.Minute, labels: []string{"rack=1"},
		health: notReady, newRequest: true, wantRecovering: true, wantReasonB: "pool default: 1 of 1 nodes drain",
		wantNext: RecoveryRecheck,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := asking("a", 0, 0, tc.labels...)
			b := asking("b", time.Second, tc.now, "rack=1")
			in := withLeases(input(tc.now, recoveryTestPools(max(tc.limit, 1)), a, b), a)
			if tc.newRequest {
				a.Request = &Request{Purpose: PurposeMaintenance, ID: "a-2", RequestedAt: t0.Add(tc.now)}
				a.Seen, a.LastBeat = t0.Add(tc.now), t0.Add(tc.now)
			} else {
				a.Request = nil
			}
			a.Health = tc.health
			if tc.recovering > 0 {
				l := in.Leases["a"]
				l.RecoveringSince = t0.Add(tc.recovering)
				in.Leases["a"] = l
			}
			out := Decide(in)
			if got := slices.Contains(out.Release, "a"); got != tc.wantRelease {
				t.Errorf("released a: %v, want %v (%+v)", got, tc.wantRelease, out)
			}
			if got := slices.Contains(out.Recovering, "a"); got != tc.wantRecovering {
				t.Errorf("recorded a as recovering: %v, want %v", got, tc.wantRecovering)
			}
			if got := slices.Contains(out.Grant, "b"); got != tc.wantGrantB {
				t.Errorf("granted b: %v, want %v (queued %+v)", got, tc.wantGrantB, out.Queue)
			}
			if len(out.Revoke) != 0 || slices.Contains(out.Grant, "a") || len(out.Repair) != 0 {
				t.Errorf("revoked %v, granted %v, repaired %v: want none of a", out.Revoke, out.Grant, out.Repair)
			}
			if tc.wantReasonB != "" {
				i := slices.IndexFunc(out.Queue, func(q Queueing) bool { return q.Node == "b" })
				if i < 0 || !strings.Contains(out.Queue[i].Reason, tc.wantReasonB) {
					t.Errorf("b's answer %+v, want Queued with %q", out.Queue, tc.wantReasonB)
				}
			}
			if tc.newRequest {
				i := slices.IndexFunc(out.Queue, func(q Queueing) bool { return q.Node == "a" })
				if i < 0 || !strings.Contains(out.Queue[i].Reason, "keeps the slot of its last maintenance until it is healthy again: "+tc.health.Reason) {
					t.Errorf("a's new request answered %+v, want Queued until it recovers", out.Queue)
				}
			}
			if got := len(out.Unrecovered) > 0; got != tc.wantUnrecovered {
				t.Errorf("unrecovered %+v, want %v", out.Unrecovered, tc.wantUnrecovered)
			}
			if stopped := slices.Equal(out.RecoveryStopped, []string{"racks"}); stopped != tc.wantUnrecovered {
				t.Errorf("pools stopped %v, want racks: %v", out.RecoveryStopped, tc.wantUnrecovered)
			}
			if tc.wantUnrecovered && (out.Unrecovered[0].Node != "a" || out.Unrecovered[0].Reason != tc.health.Reason || !out.Unrecovered[0].Since.Equal(t0.Add(tc.recovering))) {
				t.Errorf("unrecovered %+v, want a since %s, saying why", out.Unrecovered, t0.Add(tc.recovering))
			}
			if tc.wantNext > 0 && out.Next != tc.wantNext {
				t.Errorf("next = %s, want %s", out.Next, tc.wantNext)
			}
			if want := 1 + len(out.Grant); !tc.wantRelease && out.Held[DefaultPool] != want {
				t.Errorf("held %v: the recovering node should count in its pools", out.Held)
			}
		})
	}
}

// A pool stopped by a node that did not recover stops only itself: a node
// of another pool, with room in the default pool, goes on; and the holders
// of the stopped pool keep their slots.
func TestDecideRecoveryStopsOnlyItsPool(t *testing.T) {
	pools := []Pool{{Name: DefaultPool, Limit: 3},
		{Name: "racks", Selector: labels.SelectorFromSet(labels.Set{"rack": "1"}), RecoveryBound: 10 * time.Minute}}
	a, h := asking("a", 0, 0, "rack=1"), asking("h", 0, time.Hour, "rack=1")
	b, c := asking("b", time.Second, 0, "rack=1"), asking("c", 2*time.Second, 0, "rack=2")
	in := withLeases(input(time.Hour, pools, a, h, b, c), a, h)
	a.Request, a.Health = nil, &Health{Reason: "1 DaemonSet pod(s) not Ready: kube-system/cni-x"}
	l := in.Leases["a"]
	l.RecoveringSince = t0.Add(time.Minute)
	in.Leases["a"] = l
	out := Decide(in)
	if !slices.Equal(out.Grant, []string{"c"}) || !slices.Equal(queued(out), []string{"b"}) {
		t.Errorf("granted %v, queued %v; want c granted (another pool), b queued", out.Grant, queued(out))
	}
	if len(out.Release) != 0 || len(out.Revoke) != 0 {
		t.Errorf("released %v, revoked %v: the holders keep their slots", out.Release, revoked(out))
	}
	if !slices.Equal(out.RecoveryStopped, []string{"racks"}) || out.Held["racks"] != 2 {
		t.Errorf("stopped %v, held %v; want racks stopped with its 2 holders", out.RecoveryStopped, out.Held)
	}
}

// A node gone (deleted) gives its slot back, recovering or not: nothing is
// left to recover.
func TestDecideRecoveryNodeGone(t *testing.T) {
	a := asking("a", 0, 0, "rack=1")
	in := withLeases(input(time.Minute, recoveryTestPools(1)), a)
	delete(in.Nodes, "a")
	if out := Decide(in); !slices.Equal(out.Release, []string{"a"}) {
		t.Errorf("released %v, want a", out.Release)
	}
}
