package selfdrain

import (
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
			got := e.OwnView(tt.cached, e.OwnMark())
			if raw := got.Annotations[StatusAnnotation]; raw != tt.want {
				t.Errorf("record decided on: %q, want %q", raw, tt.want)
			}
			if tt.cached.Annotations[StatusAnnotation] != before {
				t.Error("the cache's own copy was changed")
			}
			if kept := e.OwnView(node("running", "11"), e.OwnMark()).Annotations[StatusAnnotation] == "succeeded"; kept != tt.kept {
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
	mark := e.OwnMark()          // reconcile, before it reads its copy
	e.OwnCopy(node("succeeded")) // the handler, meanwhile
	read := node("running")      // the copy reconcile read
	if raw := e.OwnView(read, mark).Annotations[StatusAnnotation]; raw != "succeeded" {
		t.Errorf("the copy read before the handler saw the write: decided on %q, want the write", raw)
	}
	if raw := e.OwnView(node("running"), e.OwnMark()).Annotations[StatusAnnotation]; raw != "running" {
		t.Errorf("a copy read after the handler saw the write: decided on %q, want the cache's", raw)
	}
}
