package maintenancecli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// result runs f in a goroutine and returns where its error arrives.
func result(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func TestWaitForDrain(t *testing.T) {
	since := t0.Add(-time.Second)
	old := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, StartTime: ptrTime(t0.Add(-time.Hour)),
		EndTime: ptrTime(t0.Add(-30 * time.Minute))}
	running := func(pending []string, progress int, lastError string) *selfdrain.Status {
		return &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerAnnotation, StartTime: ptrTime(t0),
			EvictionPods: 2, PendingPods: pending, DrainProgress: progress, LastError: lastError}
	}
	succeeded := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, StartTime: ptrTime(t0),
		LastUpdate: ptrTime(t0.Add(90 * time.Second)), EvictionPods: 2, DrainProgress: 100}
	failed := &selfdrain.Status{Phase: selfdrain.PhaseFailed, Trigger: selfdrain.TriggerAnnotation, StartTime: ptrTime(t0),
		EvictionPods: 2, PendingPods: []string{"vm/b"}, DrainProgress: 50, LastError: "drain.timeout passed"}

	t.Run("follows the drain to Succeeded", func(t *testing.T) {
		// The Node still carries the status of a past maintenance.
		h := newHarness(t, false, node("node-1", "1", "bios", old))
		w := h.watchNodes()
		done := result(func() error { return h.client.waitForDrain(t.Context(), "node-1", nil, since) })
		for i, st := range []*selfdrain.Status{
			{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerAnnotation, StartTime: ptrTime(t0)},
			running([]string{"vm/a", "vm/b"}, 0, ""),
			running([]string{"vm/b"}, 50, "PodDisruptionBudget vm/pdb"),
			running([]string{"vm/b"}, 50, "PodDisruptionBudget vm/pdb"), // no new line
			succeeded,
		} {
			w.Modify(node("node-1", string(rune('2'+i)), "bios", st))
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := lines(
			"waiting for the agent on node-1 to start",
			"[..............................] cordoned, listing pods",
			"[..............................]   0%  Running  2/2 pods left",
			"[###############...............]  50%  Running  1/2 pods left  blocker: PodDisruptionBudget vm/pdb",
			"[##############################] 100%  Succeeded  0/2 pods left",
			"node-1 drained: 2 pods evicted in 1m30s",
		)
		if got := h.err.String(); got != want {
			t.Errorf("got:\n%s\nwant:\n%s", got, want)
		}
	})

	t.Run("Failed is an error", func(t *testing.T) {
		h := newHarness(t, false, node("node-1", "1", "bios", running([]string{"vm/a", "vm/b"}, 0, "")))
		w := h.watchNodes()
		done := result(func() error { return h.client.waitForDrain(t.Context(), "node-1", nil, since) })
		w.Modify(node("node-1", "2", "bios", failed))
		err := <-done
		if err == nil || err.Error() != "drain of node-1 failed: 1 pods left; last error: drain.timeout passed" {
			t.Errorf("error %v", err)
		}
	})

	t.Run("an ended status already there is done", func(t *testing.T) {
		h := newHarness(t, false, node("node-1", "1", "bios", succeeded))
		if err := h.client.waitForDrain(t.Context(), "node-1", nil, since); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(h.err.String(), "node-1 drained: 2 pods evicted in 1m30s\n") {
			t.Errorf("output %q", h.err.String())
		}
	})

	t.Run("drained, and held by a post-drain hook", func(t *testing.T) {
		n := node("node-1", "1", "bios", succeeded)
		n.Annotations["post-drain.hook.node-agent.io/firmware"] = "fw-operator"
		h := newHarness(t, false, n)
		if err := h.client.waitForDrain(t.Context(), "node-1", nil, since); err != nil {
			t.Fatal(err)
		}
		if want := "node-1: post-drain hooks hold the maintenance until they are removed (or maintenance.hookBound passes): firmware (fw-operator)\n"; !strings.HasSuffix(h.err.String(), want) {
			t.Errorf("output %q, want it to end %q", h.err.String(), want)
		}
	})

	t.Run("timeout leaves the maintenance going", func(t *testing.T) {
		h := newHarness(t, false, node("node-1", "1", "", nil))
		h.watchNodes()
		err := h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "bios", API: APIAnnotation, Wait: true, Timeout: time.Nanosecond})
		if err == nil || !strings.HasPrefix(err.Error(), "stopped waiting (--timeout); the maintenance of node-1 goes on") {
			t.Errorf("error %v", err)
		}
	})
}

// TestStartWaitFollowsFromItsOwnWrite: `maintenance start --wait` with the
// annotation follows the drain from the Node its patch returned; it does
// not read the Node again before it watches.
func TestStartWaitFollowsFromItsOwnWrite(t *testing.T) {
	h := newHarness(t, false, node("node-1", "1", "", nil))
	w := h.watchNodes()
	done := result(func() error {
		return h.client.Start(t.Context(), StartOptions{Node: "node-1", Reason: "bios", API: APIAnnotation, Wait: true})
	})
	succeeded := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, StartTime: ptrTime(t0),
		LastUpdate: ptrTime(t0.Add(time.Second)), EvictionPods: 1, DrainProgress: 100}
	w.Modify(node("node-1", "3", "bios", succeeded))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range h.kube.Actions() {
		if a.GetResource().Resource == "nodes" {
			verbs = append(verbs, a.GetVerb())
		}
	}
	if got := strings.Join(verbs, " "); got != "patch watch" {
		t.Errorf("requests on nodes: %s; want the request's patch and the watch", got)
	}
}

func TestWaitForUndo(t *testing.T) {
	active := &selfdrain.Status{Phase: selfdrain.PhaseSucceeded, Trigger: selfdrain.TriggerAnnotation, StartTime: ptrTime(t0)}
	h := newHarness(t, false, node("node-1", "1", "bios", active))
	w := h.watchNodes()
	done := result(func() error {
		return h.client.Stop(t.Context(), StopOptions{Node: "node-1", API: APIAnnotation, Wait: true})
	})
	// Still active after the request ended: the agent has not undone yet.
	w.Modify(node("node-1", "2", "", active))
	ended := *active
	ended.EndTime = ptrTime(t0.Add(time.Minute))
	w.Modify(node("node-1", "3", "", &ended))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := h.err.String(), "maintenance of node-1 ended\nnode-1: unschedulable=false\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	n, err := h.kube.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Annotations[selfdrain.MaintenanceAnnotation]; ok {
		t.Errorf("annotation %s still set", selfdrain.MaintenanceAnnotation)
	}
}

// TestWaitForObjectsGone: stop --wait lists the deleted NodeMaintenance
// objects once per PollInterval, on the clock, until the agent has let them
// go.
func TestWaitForObjectsGone(t *testing.T) {
	cordoned := node("node-1", "1", "", nil)
	cordoned.Spec.Unschedulable = true
	h := newHarness(t, true, cordoned, nodeMaintenance("nm-node-1", "node-1", nil))
	h.client.PollInterval = 5 * time.Second
	// The agent's finalizer keeps a deleted object.
	h.dyn.PrependReactor("delete", maintenance.NodeMaintenanceResource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, nil
	})
	done := result(func() error {
		return h.client.Stop(t.Context(), StopOptions{Node: "node-1", API: APINodeMaintenance, Wait: true})
	})
	lists := func() int {
		n := 0
		for _, a := range h.dyn.Actions() {
			if a.GetVerb() == "list" {
				n++
			}
		}
		return n
	}
	waitForWaiter(t, h)
	// Stepping short of the interval lists nothing more.
	h.clock.Step(4 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("returned with the object still there: %v", err)
	default:
	}
	h.clock.Step(time.Second)
	waitForWaiter(t, h)
	// EndNodeMaintenance listed once, then the loop twice.
	if got := lists(); got != 3 {
		t.Errorf("%d lists, want 3", got)
	}
	// The agent has restored the node and removed its finalizer.
	if err := h.dyn.Tracker().Delete(maintenance.NodeMaintenanceGVR(medik8s), "", "nm-node-1"); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(5 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := "deleted nodemaintenances.nodemaintenance.medik8s.io/nm-node-1\nnode-1: unschedulable=true\n"
	if got := h.err.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestWaitForObjectsGoneCancelled: a cancelled wait returns at once.
func TestWaitForObjectsGoneCancelled(t *testing.T) {
	h := newHarness(t, true, node("node-1", "1", "", nil), nodeMaintenance("nm-node-1", "node-1", nil))
	ctx, cancel := context.WithCancel(t.Context())
	d, groups, err := h.client.nodeMaintenanceAPI()
	if err != nil {
		t.Fatal(err)
	}
	done := result(func() error { return h.client.waitForObjectsGone(ctx, d, groups, "node-1") })
	waitForWaiter(t, h)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// waitForWaiter returns once the code under test sleeps on the fake clock.
// The deadline only turns a hang into a failure; it bounds no timing.
func waitForWaiter(t *testing.T, h *harness) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !h.clock.HasWaiters() {
		select {
		case <-deadline:
			t.Fatal("nothing waits on the clock")
		case <-time.After(time.Millisecond):
		}
	}
}
