package selfdrain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type progressWriter struct {
	ch      chan Status
	done    chan struct{}
	stopped bool
}

func (e *Engine) startProgressWriter(ctx context.Context) *progressWriter {
	w := &progressWriter{ch: make(chan Status, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for st := range w.ch {
			e.writeStatus(ctx, &st)
		}
	}()
	return w
}

// post queues a copy of st. Only the drain loop posts, so after the
// non-blocking drain of the buffer the send cannot block.
func (w *progressWriter) post(st *Status) {
	c := *st
	c.PendingPods = slices.Clone(st.PendingPods)
	select {
	case <-w.ch:
	default:
	}
	w.ch <- c
}

// stop writes what is queued and waits; it may be called more than once.
func (w *progressWriter) stop() {
	if w.stopped {
		return
	}
	w.stopped = true
	close(w.ch)
	<-w.done
}

// writeStatus writes st to the Node; a failure is logged and retried by the
// next write, because the drain itself must not stop for it.
func (e *Engine) writeStatus(ctx context.Context, st *Status) {
	now := e.Now()
	st.LastUpdate = &now
	if err := e.patchStatus(ctx, st); err != nil {
		if errors.Is(err, context.Canceled) {
			e.Logger.Debug("Maintenance status not written: the drain was stopped", "phase", st.Phase)
		} else {
			e.Logger.Warn("Could not write maintenance status", "phase", st.Phase, "err", err)
		}
	}
}

// finishStatus writes a phase change: the condition first, then the
// annotation, so a reader that waits for the annotation's phase (such as
// `maintenance start --wait`) finds the condition already in step.
func (e *Engine) finishStatus(ctx context.Context, st *Status, at time.Time) {
	reason, msg := ReasonDrained, fmt.Sprintf("Drained %d pods (%s)", st.EvictionPods, st.Trigger)
	if st.Phase == PhaseFailed {
		reason, msg = ReasonDrainFailed, fmt.Sprintf("%d pods left: %s", len(st.PendingPods), st.LastError)
	}
	e.finishStatusWith(ctx, st, at, reason, msg)
}

// finishStatusWith is finishStatus with the condition's reason and message
// given.
func (e *Engine) finishStatusWith(ctx context.Context, st *Status, at time.Time, reason, msg string) {
	if err := e.SetCondition(ctx, reason, msg, metav1.NewTime(at)); err != nil && ctx.Err() == nil {
		e.Logger.Warn("Could not set the node condition", "err", err)
	}
	e.writeStatus(ctx, st)
}

// RecordWait writes phase Waiting with msg, for a drain of trigger and
// reason that waits since start (pkg/maintenance: for its slot or a gate). A drain that already began (the
// agent restarted and its slot went to another node, or a request
// failed) keeps its record of what the agent changed, with msg as lastError;
// a Node that cannot be read is not written at all, so that record is never
// lost.
func (e *Engine) RecordWait(ctx context.Context, trigger Trigger, reason string, start *metav1.Time, now metav1.Time, msg string, errs int) error {
	prev, err := e.readStatus(ctx)
	if err != nil {
		return err
	}
	st := &Status{Phase: PhaseWaiting, Trigger: trigger, Reason: reason, StartTime: start, LastUpdate: &now,
		LastError: msg, ErrorOnLeaseCount: errs}
	if prev.Active() && prev.Phase != PhaseWaiting {
		kept := *prev
		kept.LastError, kept.ErrorOnLeaseCount, kept.LastUpdate = msg, errs, &now
		st = &kept
	}
	return e.patchStatus(ctx, st)
}
