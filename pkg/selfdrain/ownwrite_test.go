package selfdrain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Tests of the engine's memory of its own last write (ownwrite.go).

// What the controller decides on, for each copy of the Node its cache may
// show after the engine wrote "succeeded" over "running", which replaced
// "none".
func TestOwnView(t *testing.T) {
	node := func(raw, rv string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, ResourceVersion: rv}}
		if raw != "" {
			n.Annotations = map[string]string{StatusAnnotation: raw}
		}
		return n
	}
	for _, tt := range []struct {
		name   string
		cached *corev1.Node
		after  time.Duration // since the write
		want   string
		kept   bool // the cache still counts as behind the write
	}{
		{name: "the cache shows the write", cached: node("succeeded", "12"), want: "succeeded"},
		{name: "the cache shows an earlier write", cached: node("running", "11"), want: "succeeded", kept: true},
		{name: "the cache shows what the first write replaced", cached: node("", "10"), want: "succeeded", kept: true},
		{name: "the cache shows the write's version", cached: node("running", "12"), want: "running"},
		{name: "the cache shows another writer's record", cached: node("admin's", "13"), want: "admin's"},
		{name: "the cache is behind for longer than the bound", cached: node("running", "11"), after: ownWriteBound + time.Second, want: "running"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			e := h.engine
			e.wrote(node("running", "11"), "")
			e.wrote(node("succeeded", "12"))
			h.clock.Step(tt.after)
			before := tt.cached.Annotations[StatusAnnotation]
			got := e.ownView(tt.cached, e.ownMark())
			if raw := got.Annotations[StatusAnnotation]; raw != tt.want {
				t.Errorf("record decided on: %q, want %q", raw, tt.want)
			}
			if tt.cached.Annotations[StatusAnnotation] != before {
				t.Error("the cache's own copy was changed")
			}
			if kept := e.ownView(node("running", "11"), e.ownMark()).Annotations[StatusAnnotation] == "succeeded"; kept != tt.kept {
				t.Errorf("the cache still counts as behind: %t, want %t", kept, tt.kept)
			}
		})
	}
}

// A copy that reconcile read before the handler was passed a newer copy,
// which showed the write, may be older than that copy: the write does not
// count as shown for it. Copies read after that delivery do decide from the
// cache again.
func TestOwnViewOfACopyReadBeforeTheHandlerSawTheWrite(t *testing.T) {
	node := func(raw string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{StatusAnnotation: raw}}}
	}
	e := newHarness(t).engine
	e.wrote(node("running"), "")
	e.wrote(node("succeeded"))
	mark := e.ownMark()          // reconcile, before it reads its copy
	e.ownCopy(node("succeeded")) // the handler, meanwhile
	read := node("running")      // the copy reconcile read
	if raw := e.ownView(read, mark).Annotations[StatusAnnotation]; raw != "succeeded" {
		t.Errorf("the copy read before the handler saw the write: decided on %q, want the write", raw)
	}
	if raw := e.ownView(node("running"), e.ownMark()).Annotations[StatusAnnotation]; raw != "running" {
		t.Errorf("a copy read after the handler saw the write: decided on %q, want the cache's", raw)
	}
}

// A drain that succeeded is not started again by the reconcile its run asks
// for, while the cache still shows it Running: it would take another slot
// and write Running over Succeeded (the flake of pkg/handshake's
// TestHandshakeRebootThroughDrainAndShutdown, where the reboot coordinator
// already rebooted the drained node). Two interleavings:
//   - "cache behind": the cache stops at the Node as it was when the
//     eviction was asked for (Running), until the test lets it catch up;
//   - "handler saw it first": the informer takes the Succeeded copy just
//     after reconcile read the Running one, and hands it to the controller's
//     handler before reconcile decides; the handler's copy shows the write,
//     reconcile's is older (about 1 run in 150).
func TestControllerDoesNotResumeADrainThatSucceeded(t *testing.T) {
	for _, handlerFirst := range []bool{false, true} {
		name := "cache behind"
		if handlerFirst {
			name = "handler saw it first"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testPod("a"))
			c, v := h.controller()
			// The cache stops at the Node as it was when the eviction was
			// asked for: the drain recorded Running.
			h.onEvict(func(eviction) error {
				v.hold(h.trackedNode())
				return nil
			})
			h.patchNode(`{"metadata":{"annotations":{"node-agent.io/maintenance":"kernel"}}}`)
			ctx := context.Background()
			if err := c.reconcile(ctx, v); err != nil {
				t.Fatal(err)
			}
			run := c.active
			h.run(func() { <-run.done }, nil)
			if st := h.status(); st.Phase != PhaseSucceeded {
				t.Fatalf("status %s, want Succeeded", st.Encode())
			}
			if handlerFirst {
				v.afterNextGet(func() {
					v.hold(nil)
					c.observe(h.node())
				})
			} else if held, _ := v.Get(); held.Annotations[StatusAnnotation] == h.node().Annotations[StatusAnnotation] {
				t.Fatal("the view is not behind")
			}

			if err := c.reconcile(ctx, v); err != nil {
				t.Fatal(err)
			}
			if c.active != nil {
				c.takeActive().stop()
				t.Fatal("the drain that succeeded was started again from a Running copy")
			}
			if !handlerFirst {
				v.hold(nil)
				if err := c.reconcile(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			if st := h.status(); c.active != nil || st.Phase != PhaseSucceeded || h.slotHolder() != "" {
				t.Errorf("once the cache caught up: active %p, status %s, slot held by %q; want nothing started", c.active, st.Encode(), h.slotHolder())
			}
		})
	}
}
