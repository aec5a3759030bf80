package reboot

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// adminTaint is someone else's: every write keeps it, first.
var adminTaint = corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}

func (b *bed) withAdminTaint() {
	b.update(func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, adminTaint) })
}

// pending reports whether the Node carries the reboot-pending taint, and
// fails the test when the admin's taint is no longer the first.
func (b *bed) pending() bool {
	b.t.Helper()
	n := b.node()
	if len(n.Spec.Taints) == 0 || n.Spec.Taints[0] != adminTaint {
		b.t.Fatalf("taints %+v: the admin's taint must stay, first", n.Spec.Taints)
	}
	found := 0
	for _, t := range n.Spec.Taints {
		if t.Key == PendingTaintKey && t.Effect == corev1.TaintEffectPreferNoSchedule {
			found++
		}
	}
	if found > 1 {
		b.t.Fatalf("taints %+v: %s more than once", n.Spec.Taints, PendingTaintKey)
	}
	return found == 1
}

func (b *bed) expectPending(want bool, when string) {
	b.t.Helper()
	if got := b.pending(); got != want {
		b.t.Fatalf("%s: reboot-pending taint %t, want %t", when, got, want)
	}
}

// The taint is on from the first step that finds a reboot needed until
// the node is back from it and uncordoned (Done).
func TestPendingTaintFromNeedToDone(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.withAdminTaint()
	b.expect(b.step(), NotNeeded, "NotNeeded", PhaseIdle)
	b.expectPending(false, "nothing needed")

	b.setSentinel(true)
	b.expect(b.step(), Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
	b.expectPending(true, "waiting for a slot")
	if taint := b.node().Spec.Taints[1]; taint.TimeAdded == nil || !taint.TimeAdded.Time.Equal(b.clock.Now()) {
		t.Fatalf("taint %+v: want the time it was added", taint)
	}
	b.expect(b.step(), Draining, "Draining", PhaseDraining)
	b.m = Maintenance{Active: true, Drained: true}
	b.expect(b.step(), Rebooting, "Rebooting", PhaseRebootRequested)
	b.expectPending(true, "rebooting")

	b.setSentinel(false)
	b.update(func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
	b.restart()
	b.expect(b.step(), Rebooting, "Rebooting", PhaseBack)
	b.expectPending(true, "back, drain not yet undone")
	b.m = Maintenance{}
	b.expect(b.step(), Done, "Done", PhaseIdle)
	b.expectPending(false, "done")
}

// Every reason a reboot waits for before its drain keeps the taint on.
func TestPendingTaintWhileTheRebootWaits(t *testing.T) {
	t.Run("outside the window", func(t *testing.T) {
		b := newBed(t, mustWindow(t, []string{"sat"}, "02:00", "04:00", "Europe/Berlin"))
		b.withAdminTaint()
		b.setSentinel(true)
		b.expect(b.step(), Pending, "OutsideWindow", PhaseIdle)
		b.expectPending(true, "outside the window")
	})
	t.Run("blocked", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		b.opts.Blockers = []BlockerSource{&staticBlockers{[]Blocker{{Kind: BlockerAlert, Name: "EtcdDown"}}}}
		b.restart()
		b.withAdminTaint()
		b.setSentinel(true)
		b.expect(b.step(), Pending, "BlockedByAlerts", PhaseIdle)
		b.expectPending(true, "blocked")
	})
	t.Run("other maintenance", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		b.withAdminTaint()
		b.setSentinel(true)
		b.m = Maintenance{Other: true}
		b.expect(b.step(), Pending, "InMaintenance", PhaseIdle)
		b.expectPending(true, "in another maintenance")
	})
}

// Called off (the sentinel gone while the node drains) or given up (the
// drain timed out): the taint goes with the decision, as the node will
// not reboot soon.
func TestPendingTaintGoesWhenTheRebootIsCalledOffOrGivenUp(t *testing.T) {
	t.Run("called off", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		b.withAdminTaint()
		b.setSentinel(true)
		b.step()
		b.expect(b.step(), Draining, "Draining", PhaseDraining)
		b.expectPending(true, "draining")
		b.m = Maintenance{Active: true}
		b.setSentinel(false)
		b.expect(b.step(), NotNeeded, "NotNeeded", PhaseIdle)
		b.expectPending(false, "called off")
	})
	t.Run("given up", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		b.withAdminTaint()
		b.setSentinel(true)
		b.step()
		b.step()
		b.m = Maintenance{Active: true, TimedOut: true}
		b.expect(b.step(), DrainFailed, "DrainFailed", PhaseIdle)
		b.expectPending(false, "given up")
	})
	t.Run("loop guard", func(t *testing.T) {
		b := newBed(t, alwaysWindow(t))
		b.withAdminTaint()
		b.setSentinel(true)
		b.step()
		b.step()
		b.m = Maintenance{Active: true, Drained: true}
		b.step()
		b.update(func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
		b.restart()
		b.step()
		b.m = Maintenance{}
		b.expect(b.step(), RebootLoop, "RebootLoop", PhaseIdle)
		b.expectPending(false, "held by the loop guard")
	})
}

// An agent that starts where no reboot is needed removes the taint an
// earlier run left: one that stopped before it could, or one of an agent
// restarted after the reboot.
func TestPendingTaintRemovedAtStart(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.withAdminTaint()
	b.update(func(n *corev1.Node) {
		now := metav1.Now()
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: PendingTaintKey, Effect: corev1.TaintEffectPreferNoSchedule, TimeAdded: &now})
	})
	b.expectPending(true, "left by an earlier run")
	b.expect(b.step(), NotNeeded, "NotNeeded", PhaseIdle)
	b.expectPending(false, "after the first step")
}

// reboot.preferNoScheduleTaint off: no taint while a reboot waits, and one
// left from when it was on is removed. The same key with another effect is
// not the controller's and stays.
func TestPendingTaintOff(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.opts.PreferNoScheduleTaint = false
	b.restart()
	b.withAdminTaint()
	other := corev1.Taint{Key: PendingTaintKey, Effect: corev1.TaintEffectNoExecute}
	b.update(func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: PendingTaintKey, Effect: corev1.TaintEffectPreferNoSchedule}, other)
	})
	b.setSentinel(true)
	b.expect(b.step(), Pending, "WaitingForDrainSlot", PhaseWaitingForSlot)
	if taints := b.node().Spec.Taints; len(taints) != 2 || taints[0] != adminTaint || taints[1] != other {
		t.Fatalf("taints %+v: want the admin's and the NoExecute one only", taints)
	}
	b.step()
	b.expectPending(false, "draining, with the key off")
}

// While the need cannot be found out the taint stays as it was, on or
// off: a passing error must not move the cluster's pods.
func TestPendingTaintStaysWhileTheNeedIsUnknown(t *testing.T) {
	for _, on := range []bool{false, true} {
		b := newBed(t, alwaysWindow(t))
		b.withAdminTaint()
		if on {
			b.setSentinel(true)
			b.step()
		}
		b.expectPending(on, "before")
		b.opts.Need = NeedChecker{SentinelCommand: []string{"needs-restarting", "-r"}, Runner: failingRunner{}}
		b.restart()
		b.step()
		if cond := condition(b.node()); cond.Status != corev1.ConditionUnknown {
			t.Fatalf("condition %+v, want Unknown", cond)
		}
		b.expectPending(on, "need unknown")
	}
}

// A write that fails is the step's error, and the next step tries again.
func TestPendingTaintWriteFailure(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.withAdminTaint()
	b.setSentinel(true)
	refuse := true
	b.cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if refuse && strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), PendingTaintKey) {
			return true, nil, errors.New("admission webhook denied")
		}
		return false, nil, nil
	})
	err := b.c.step(context.Background(), b.node())
	if err == nil || !strings.Contains(err.Error(), "adding the taint "+PendingTaintKey+":PreferNoSchedule") || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("step: %v; want the taint's write error", err)
	}
	b.expectPending(false, "refused")
	refuse = false
	b.step()
	b.expectPending(true, "the next step")
}

func TestWantsPendingTaint(t *testing.T) {
	for _, s := range States {
		d := Decision{State: s, Status: corev1.ConditionTrue}
		if s == NotNeeded || s == Done {
			d.Status = corev1.ConditionFalse
		}
		want, known := wantsPendingTaint(d)
		wantOn := s == Pending || s == Draining || s == Rebooting
		if want != wantOn || !known {
			t.Errorf("%s: want %t known %t; want %t, known", s, want, known, wantOn)
		}
		d.Status = corev1.ConditionUnknown
		if _, known := wantsPendingTaint(d); known {
			t.Errorf("%s with the need unknown: the taint must stay as it is", s)
		}
	}
}

// The controller's write sends the taints alone, never the cordon, which is
// the drain engine's; and it starts from a read of the Node, so that a
// cache behind the drain's taint does not write that taint away.
func TestPendingTaintWritesTheTaintsAlone(t *testing.T) {
	b := newBed(t, alwaysWindow(t))
	b.withAdminTaint()
	b.setSentinel(true)
	var sent []string
	b.cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := string(a.(k8stesting.PatchAction).GetPatch()); strings.Contains(p, `"taints"`) {
			sent = append(sent, p)
		}
		return false, nil, nil
	})
	stale := b.node()
	drain := corev1.Taint{Key: "kubevirt.io/drain", Effect: corev1.TaintEffectNoSchedule}
	b.update(func(n *corev1.Node) { n.Spec.Unschedulable, n.Spec.Taints = true, append(n.Spec.Taints, drain) })
	if err := b.c.step(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || strings.Contains(sent[0], "unschedulable") {
		t.Fatalf("taint writes %q; want one, without spec.unschedulable", sent)
	}
	n := b.node()
	if !n.Spec.Unschedulable || len(n.Spec.Taints) != 3 || n.Spec.Taints[1] != drain || !b.pending() {
		t.Fatalf("node after the write from a stale cache: unschedulable %v, taints %+v; want the cordon and the drain taint kept", n.Spec.Unschedulable, n.Spec.Taints)
	}
}
