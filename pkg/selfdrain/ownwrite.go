package selfdrain

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// This file is the engine's memory of its own last write of the record
// (StatusAnnotation), for the controller's decisions. The controller decides
// from the agent's informer copy of the Node, which shows a write only some
// time after the write returned. A drain that had just succeeded was started
// again so: its run wrote Succeeded, gave up its place and asked for a
// reconcile, and that reconcile still read the Running record and resumed
// it, which took another drain slot and showed the record Running again
// while the reboot controller was already rebooting the drained node (1 run
// in 20 of pkg/maintenance's TestHandshakeRebootThroughDrainAndShutdown). As
// pkg/slots' Coordinator does with the grants it wrote, the controller
// decides from the engine's last write until the cache shows it.
//
// Whether the cache showed the write is learnt from the copies the
// informer delivers to the controller's handler, while reconcile reads its
// copy from the informer's store. The store takes a copy before the handler
// is given it, so a copy reconcile read is at least as new as every copy
// the handler passed before that read, but it may be older than one the
// handler passes after it. Trusted that way, a write shown by a copy
// delivered between reconcile's read and its decision let the read's older
// copy, still Running, start the drain that had just succeeded again (1 run
// in about 150 of that test). So the handler's copies are counted
// (OwnMark), and a write counts as shown for a copy only when it was shown
// by a copy passed before that copy was read.

// ownWriteBound bounds how long the engine's last write stands in for the
// cache's record: an informer that relists may skip that write's version,
// and the cache then shows the record as it is later on.
const ownWriteBound = 30 * time.Second

// ownWrite is the record the engine wrote last: the annotation's value, the
// Node's resourceVersion after that write, and when it returned.
type ownWrite struct {
	raw string
	rv  string
	at  time.Time
	// shown: the cache showed this write or went past it; the controller
	// decides from the cache again, for copies read at or after mark
	// shownBy (OwnMark). The write is still remembered as the record the
	// next write replaces, which the cache shows until it shows that one.
	shown   bool
	shownBy uint64
	// older are the records known to precede this write, with when each
	// was last seen so: those the engine wrote before, and those its
	// writes replaced. A cache that shows one of them is behind; one that
	// shows another record (an admin's) is not.
	older map[string]time.Time
}

// wrote remembers the record on node, as a write of it returned node;
// replaced, when known, is the record the write replaced.
func (e *Engine) wrote(node *corev1.Node, replaced ...string) {
	if node == nil {
		return
	}
	now := e.Clock.Now()
	e.ownMu.Lock()
	defer e.ownMu.Unlock()
	older := map[string]time.Time{}
	if prev := e.own; prev != nil {
		for raw, at := range prev.older {
			if now.Sub(at) <= ownWriteBound {
				older[raw] = at
			}
		}
		older[prev.raw] = now
	}
	for _, raw := range replaced {
		older[raw] = now
	}
	w := &ownWrite{raw: node.Annotations[StatusAnnotation], rv: node.ResourceVersion, at: now, older: older}
	delete(older, w.raw)
	e.own = w
}

// OwnMark is the count of copies of the Node the controller's handler has
// passed (OwnCopy). Reconcile takes it before it reads its copy from the
// cache, and gives it to OwnView with that copy.
func (e *Engine) OwnMark() uint64 {
	e.ownMu.Lock()
	defer e.ownMu.Unlock()
	return e.ownCopies
}

// OwnCopy takes node as the controller's handler passes it: every copy the
// informer delivers, in order. It is how the write is seen shown by a copy
// that reconcile does not read, such as one an admin's change replaced
// at once.
func (e *Engine) OwnCopy(node *corev1.Node) {
	e.ownMu.Lock()
	defer e.ownMu.Unlock()
	e.ownCopies++
	e.ownViewLocked(node, e.ownCopies)
}

// OwnView is node, read from the cache after OwnMark returned mark, as the
// controller decides on it: with the record the engine wrote last while
// node shows a record known to precede that write. The write counts as
// shown once a copy of the Node shows it (its resourceVersion, or its
// record) or a record the engine knows nothing of (written since by someone
// else), or after ownWriteBound. For node it counts only when that copy is
// node itself or one the handler passed by mark: a copy passed later may be
// newer than node.
func (e *Engine) OwnView(node *corev1.Node, mark uint64) *corev1.Node {
	e.ownMu.Lock()
	defer e.ownMu.Unlock()
	return e.ownViewLocked(node, mark)
}

func (e *Engine) ownViewLocked(node *corev1.Node, mark uint64) *corev1.Node {
	w := e.own
	if w == nil || (w.shown && w.shownBy <= mark) {
		return node
	}
	cur := node.Annotations[StatusAnnotation]
	_, behind := w.older[cur]
	if !behind || (w.rv != "" && node.ResourceVersion == w.rv) || e.Clock.Since(w.at) > ownWriteBound {
		w.shown, w.shownBy = true, mark
		return node
	}
	out := *node
	out.Annotations = maps.Clone(node.Annotations)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[StatusAnnotation] = w.raw
	return &out
}

// updateRecord is updateNode for the engine's writes that change the
// record with the node's spec, remembered as the engine's last write.
func (e *Engine) updateRecord(ctx context.Context, first *corev1.Node, mutate func(*corev1.Node) (bool, error)) (*corev1.Node, error) {
	var written bool
	var replaced string
	out, err := updateNode(ctx, e.Client, e.NodeName, first, func(node *corev1.Node) (bool, error) {
		replaced = node.Annotations[StatusAnnotation]
		w, err := mutate(node)
		written = w && err == nil
		return w, err
	})
	if err == nil && written {
		e.wrote(out, replaced)
	}
	return out, err
}
