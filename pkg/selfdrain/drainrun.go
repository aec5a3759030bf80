package selfdrain

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/evictionrequest"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/selfdrain/podorder"
	"github.com/node-agent/node-agent/pkg/selfdrain/podselect"
)

// podState tracks one pod being evicted.
type podState struct {
	key          string // namespace/name
	pod          corev1.Pod
	attempts     int
	nextAttempt  time.Time
	inFlight     bool
	evicted      bool // the eviction was accepted; waiting for deletion
	firstBlocked time.Time
	lastEvent    time.Time
	// blockedBy is the budget that refused the last eviction; nil when the
	// last attempt was not refused with 429.
	blockedBy *pdbRef
	// lastErr is the last eviction error; nil after a success.
	lastErr error
	// requested: node-agent's EvictionRequest for the pod exists, to be
	// withdrawn if the drain stops with the pod still there.
	requested bool
	// erMemo is what the pod's earlier EvictionRequest attempts learned;
	// only the worker that holds the pod (inFlight) uses it.
	erMemo evictionrequest.Memo
	// treat is its order group, WaitCompleted, its opt-out (podorder).
	treat podorder.Treatment
}

// podEvent is what the pod watch reports.
type podEvent struct {
	key      string
	uid      types.UID
	deleted  bool
	finished bool
}

// goneBy removes from pending the pod that ev shows gone: deleted, finished,
// or replaced by a pod of the same name with a new UID. It reports whether
// pending changed.
func goneBy(pending map[types.UID]*podState, ev podEvent) bool {
	if _, ok := pending[ev.uid]; ok {
		if ev.deleted || ev.finished {
			delete(pending, ev.uid)
			return true
		}
		return false
	}
	if ev.deleted {
		return false
	}
	for uid, ps := range pending {
		if ps.key == ev.key {
			delete(pending, uid)
			return true
		}
	}
	return false
}

type evictResult struct {
	key string
	err error
	// requested: an EvictionRequest for the pod exists.
	requested bool
}

// Drain evicts the pods on the node until none is left, ctx ends, or the
// deadline passes. It keeps st current on the Node and returns the final
// status of this attempt: Succeeded, Failed at the deadline, or as it was
// when ctx ended. Past the deadline no eviction is asked for; those in
// flight are waited for (see startWorkers).
func (e *Engine) Drain(ctx context.Context, st *Status, req Request) (*Status, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := e.newDrainRun(ctx, st, req)

	// Watch the node's pods first, so no deletion between the listing and the
	// watch is missed: a pod counts as gone when the watch says it is.
	store, stopWatch, err := r.watchPods(cancel)
	if err != nil {
		return st, err
	}
	defer stopWatch()
	r.store = store
	if err := r.listPods(store); err != nil {
		return st, err
	}
	e.Logger.Info("Evicting pods", "pods", len(r.pending), "finished", r.finished, "parallelism", e.Config.Parallelism)

	r.stopVMs = r.followVMs()
	defer r.stopVMs(false)
	stopWorkers := r.startWorkers()
	defer stopWorkers()
	if !req.Deadline.IsZero() {
		t := e.Clock.NewTimer(req.Deadline.Sub(e.Clock.Now()))
		defer t.Stop()
		r.deadline = t.C()
	}
	r.retryTimer = e.Clock.NewTimer(0)
	defer r.retryTimer.Stop()
	// Progress goes to the Node from a goroutine of its own, so a slow PATCH
	// never holds up evictions or the final write; the final write waits
	// for it instead, so an older progress write cannot land after it.
	r.pw = e.startProgressWriter(ctx)
	defer func() { r.pw.stop() }()
	return r.loop()
}

// drainRun is one attempt of Engine.Drain: the pods still to go and what
// the loop knows about each of them. Its methods are the loop's steps.
type drainRun struct {
	e     *Engine
	ctx   context.Context
	st    *Status
	req   Request
	start time.Time

	pending  map[types.UID]*podState
	finished int // pods listed that had already finished
	// vms is the latest progress of the node's VMs (vms.go); stopVMs ends
	// following them.
	vms     atomic.Pointer[[]VMStatus]
	stopVMs func(final bool)
	// store is the watch's store of the node's pods: their latest state.
	store cache.Store

	events  chan podEvent
	work    chan *podState
	results chan evictResult

	deadline   <-chan time.Time
	retryTimer clock.Timer
	pw         *progressWriter

	dirty     bool
	lastWrite time.Time
	lastErr   string
	// waiting is the last podorder.Waiting put in the record's lastError.
	waiting string
}

func (e *Engine) newDrainRun(ctx context.Context, st *Status, req Request) *drainRun {
	// lastWrite starts now: Begin has just written the record, so the
	// first progress write waits statusInterval like every later one, and
	// a drain shorter than that writes only its start and its end.
	now := e.Clock.Now()
	return &drainRun{e: e, ctx: ctx, st: st, req: req, start: now, lastWrite: now,
		pending: map[types.UID]*podState{}, events: make(chan podEvent, 256), dirty: true}
}

// watchPods starts an informer on the node's pods that reports to r.events,
// and waits for its cache. stop cancels the run's context (through cancel)
// and waits for the informer.
func (r *drainRun) watchPods(cancel context.CancelFunc) (store cache.Store, stop func(), err error) {
	e, ctx := r.e, r.ctx
	podInformer := kube.PodInformer(e.podClient(), fields.OneTermEqualSelector("spec.nodeName", e.NodeName).String())
	notify := func(obj any, deleted bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		ev := podEvent{key: p.Namespace + "/" + p.Name, uid: p.UID, deleted: deleted,
			finished: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed}
		select {
		case r.events <- ev:
		case <-ctx.Done():
		}
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { notify(obj, false) },
		UpdateFunc: func(_, obj any) { notify(obj, false) },
		DeleteFunc: func(obj any) { notify(obj, true) },
	}); err != nil {
		return nil, nil, err
	}
	// A refusal (403, 401) does not pass with retries: the drain stops and
	// says so instead of waiting for a cache that never fills.
	var refused atomic.Pointer[error]
	if err := podInformer.SetWatchErrorHandlerWithContext(func(ctx context.Context, rf *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			refused.CompareAndSwap(nil, &err)
		}
		cache.DefaultWatchErrorHandler(ctx, rf, err)
	}); err != nil {
		return nil, nil, err
	}
	var informerDone sync.WaitGroup
	informerDone.Go(func() { podInformer.RunWithContext(ctx) })
	stop = func() {
		// The informer stops only when ctx does.
		cancel()
		informerDone.Wait()
	}
	// The first eviction waits on this sync (kube.WaitForSync polls every
	// 5 ms, not client-go's 100 ms).
	if err := kube.WaitForSync(ctx, func() (bool, error) {
		if err := refused.Load(); err != nil {
			return false, *err
		}
		return podInformer.HasSynced(), nil
	}); err != nil {
		stop()
		if p := refused.Load(); p != nil {
			return nil, nil, r.podsRefused(*p)
		}
		return nil, nil, ctx.Err()
	}
	return podInformer.GetStore(), stop, nil
}

// podsRefused records on the Node that the node's pods refused the drain's
// client, and has the next drain ask which client reaches them.
func (r *drainRun) podsRefused(err error) error {
	e := r.e
	if e.PodAccessRefused != nil {
		e.PodAccessRefused()
	}
	err = fmt.Errorf("the drain cannot read this node's pods: %w", err)
	r.st.LastError = err.Error()
	e.writeStatus(context.WithoutCancel(r.ctx), r.st)
	e.Event(corev1.EventTypeWarning, "DrainRefused", "%s; the drain is tried again", err)
	return err
}

// listPods chooses the pods to evict, as kubectl drain would, from the
// watch's synced store: a pod gone before the watch synced is not there, and
// the store already holds every pod on the node, so no second list is asked
// for. On the first attempt (not a resume) it records the counts at the
// start in the status.
func (r *drainRun) listPods(store cache.Store) error {
	e, st := r.e, r.st
	var onNode []corev1.Pod
	for _, obj := range store.List() {
		onNode = append(onNode, *obj.(*corev1.Pod))
	}
	list, _, err := podselect.Choose(r.ctx, e.Client, onNode, e.Config.PodSelector)
	var plan podorder.Plan
	if err == nil {
		plan, err = podorder.Decide(list, e.Config.PodRules, e.Config.DoNotDrainBound.Duration)
	}
	if err != nil {
		err = fmt.Errorf("choosing pods to evict on Node %s: %w", e.NodeName, err)
		st.LastError = err.Error()
		e.writeStatus(r.ctx, st)
		return err
	}
	r.finished = plan.Finished
	for _, p := range list {
		if t, ok := plan.Treatments[p.UID]; ok {
			r.pending[p.UID] = &podState{key: p.Namespace + "/" + p.Name, pod: p, treat: t}
		}
	}
	// One Event each, however many pods: an Event is a request.
	if msg := plan.IgnoredMessage(); msg != "" {
		e.Event(corev1.EventTypeWarning, "PodAnnotationIgnored", "%s", truncate(msg, eventMessageLimit))
	}
	if msg := plan.SkippedMessage(); msg != "" {
		e.Event(corev1.EventTypeNormal, "PodsSkipped", "%s", msg)
	}
	if st.EvictionPods == 0 && st.TotalPods == 0 {
		st.TotalPods = len(onNode)
		st.EvictionPods = len(r.pending) + r.finished
	}
	return nil
}

// startWorkers starts drain.parallelism workers that evict the pods sent to
// r.work; stop ends them and waits for the requests in flight.
//
// An eviction request in flight is never cancelled when this attempt ends
// (maintenance stopped, the agent asked to exit): kube-apiserver records the
// disruption in the PodDisruptionBudget's status before it deletes the pod,
// and a request cut off in between leaves a recorded disruption for a pod
// that stays, which blocks that budget until the disruption controller
// expires it two minutes later. Seen on a real node: deleting the agent's
// pod mid-drain stalled the new pod's drain for 2m21s. Each request has a
// bound of its own instead, and the attempt waits for those in flight when
// it ends.
func (r *drainRun) startWorkers() (stop func()) {
	e := r.e
	r.results = make(chan evictResult, len(r.pending)+1)
	r.work = make(chan *podState)
	var wg sync.WaitGroup
	for range min(e.Config.Parallelism, max(len(r.pending), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ps := range r.work {
				reqCtx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), evictionRequestTimeout)
				deleted, requested, err := e.evictOrDelete(reqCtx, ps)
				cancel()
				// Counted here, not when the loop handles the result: the
				// pod's deletion may reach the loop first, and an accepted
				// eviction must count all the same.
				e.Metrics.countEviction(evictionResult(deleted, err))
				r.results <- evictResult{key: string(ps.pod.UID), err: err, requested: requested}
			}
		}()
	}
	return func() {
		close(r.work)
		wg.Wait()
	}
}

// loop runs the attempt until it ends, one step per event.
func (r *drainRun) loop() (*Status, error) {
	for {
		now := r.e.Clock.Now()
		if r.publish(now) {
			return r.succeed(now), nil
		}
		if !r.req.Deadline.IsZero() && !now.Before(r.req.Deadline) {
			// Checked here too, not only on the timer: a drain resumed
			// past its deadline must not ask for one eviction first.
			return r.expire(), nil
		}
		next, ok := r.dispatch(now)
		if !ok {
			return r.stopped()
		}
		wait := statusInterval
		if !next.IsZero() {
			wait = min(wait, next.Sub(now))
		}
		r.resetRetryTimer(max(wait, time.Millisecond))

		select {
		case <-r.ctx.Done():
			return r.stopped()
		case ev := <-r.events:
			if goneBy(r.pending, ev) {
				r.dirty = true
			}
		case res := <-r.results:
			r.handleResult(res)
		case <-r.deadline:
			return r.expire(), nil
		case <-r.retryTimer.C():
		}
	}
}

// resetRetryTimer arms the retry timer for d, first dropping a tick the loop
// did not take (it woke for something else): a clock.Timer, unlike a
// time.Timer since Go 1.23, may keep a stale tick across Reset, and the
// fake clock of the tests blocks on a second one.
func (r *drainRun) resetRetryTimer(d time.Duration) {
	if !r.retryTimer.Stop() {
		select {
		case <-r.retryTimer.C():
		default:
		}
	}
	r.retryTimer.Reset(d)
}

// publish brings the status and the metrics up to date with the pending
// pods and posts the status to the progress writer, at most once per
// statusInterval. It reports whether no pod is left.
func (r *drainRun) publish(now time.Time) (drained bool) {
	e, st := r.e, r.st
	e.setPending(st, r.pending)
	if r.takeVMs() {
		r.dirty = true
	}
	e.Metrics.drainProgress(r.pending)
	if len(r.pending) == 0 {
		st.Blockers = nil
		return true
	}
	// What the pods' treatment holds is lastError while no error is newer.
	_, pods := ordered(r.pending)
	if w := podorder.Waiting(pods, now); w != r.waiting && (st.LastError == "" || st.LastError == r.waiting) {
		st.LastError, r.waiting = w, w
	}
	if r.lastErr != st.LastError {
		r.lastErr = st.LastError
		r.dirty = true
	}
	if r.dirty && now.Sub(r.lastWrite) >= statusInterval {
		// Sorted over every pending pod: only for a record that is written.
		st.Blockers = r.currentBlockers()
		r.pw.post(st)
		r.lastWrite = now
		r.dirty = false
	}
	return false
}

// dispatch sends every pod whose retry time has come to the workers, and
// returns the earliest retry time still to come (zero when none). It
// reports false when ctx ended while it waited for a worker.
// Only those podorder.Evictable allows are sent: the lowest order group's.
func (r *drainRun) dispatch(now time.Time) (next time.Time, ok bool) {
	states, pods := ordered(r.pending)
	ready, next := podorder.Evictable(pods, now)
	for _, i := range ready {
		ps := states[i]
		ps.inFlight = true
		select {
		case r.work <- ps:
		case <-r.ctx.Done():
			return next, false
		}
	}
	return next, true
}

// handleResult applies one eviction's outcome to the pod's state.
func (r *drainRun) handleResult(res evictResult) {
	ps := r.pending[types.UID(res.key)]
	if ps == nil {
		return // the watch saw it go first
	}
	ps.inFlight = false
	ps.requested = ps.requested || res.requested
	r.dirty = true
	e, err := r.e, res.err
	now := e.Clock.Now()
	switch {
	case err == nil:
		ps.evicted = true
		ps.firstBlocked = time.Time{}
		ps.blockedBy = nil
		ps.lastErr = nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err) && ps.pod.UID != "":
		// Gone; a conflict means the UID precondition failed: a new pod
		// took the name, and ours is gone.
		delete(r.pending, ps.pod.UID)
	default:
		if ps.firstBlocked.IsZero() {
			ps.firstBlocked = now
		}
		ps.attempts++
		ps.blockedBy = nil
		if ref, ok := blockingBudget(ps.pod.Namespace, err); ok {
			ps.blockedBy = &ref
		}
		ps.lastErr = err
		ps.nextAttempt = now.Add(backoff(ps.attempts, retryCap, e.Jitter))
		r.st.LastError = fmt.Sprintf("evicting %s: %s", ps.key, describeEvictionError(err))
		if now.Sub(ps.lastEvent) >= podEventInterval {
			ps.lastEvent = now
			e.Event(corev1.EventTypeWarning, "EvictionBlocked", "Cannot evict pod %s yet: %s", ps.key, describeEvictionError(err))
		}
		e.Logger.Debug("Eviction refused", "pod", ps.key, "attempt", ps.attempts, "retryIn", ps.nextAttempt.Sub(now), "err", err)
	}
}

// succeed ends the attempt with every pod gone.
func (r *drainRun) succeed(now time.Time) *Status {
	e, st := r.e, r.st
	st.Phase = PhaseSucceeded
	st.LastError = ""
	r.stopVMs(true)
	r.takeVMs()
	r.pw.stop()
	e.finishStatus(r.ctx, st, now)
	d := e.Clock.Since(r.start)
	e.Metrics.observeDrain(r.req.Trigger, "succeeded", d)
	e.Event(corev1.EventTypeNormal, "DrainSucceeded", "Drained %d pods in %s", st.EvictionPods, d.Round(10*time.Millisecond))
	e.Logger.Info("Node drained", "event", "DrainSucceeded", "pods", st.EvictionPods, "duration", d)
	return st
}

// expire ends the attempt at its deadline: it asks for no more evictions
// and marks the status Failed. A maintenance drain's deadline is
// drain.timeout (timeOut, timeout.go); a shutdown drain's is the host's.
func (r *drainRun) expire() *Status {
	if !r.req.NotATimeout {
		return r.timeOut()
	}
	e, st := r.e, r.st
	st.Phase = PhaseFailed
	if st.LastError == "" {
		st.LastError = fmt.Sprintf("drain did not finish before its deadline; %d pods left", len(r.pending))
	}
	r.stopVMs(true)
	r.takeVMs()
	r.pw.stop()
	e.finishStatus(r.ctx, st, e.Clock.Now())
	e.Event(corev1.EventTypeWarning, "DrainFailed", "Drain did not finish in time: %d of %d pods still on the node; last error: %s", len(r.pending), st.EvictionPods, st.LastError)
	e.Logger.Warn("Drain deadline passed", "pending", len(r.pending), "lastError", st.LastError)
	e.Metrics.observeDrain(r.req.Trigger, "failed", e.Clock.Since(r.start))
	return st
}

// stopped handles ctx ending mid-drain (maintenance ended, or shutdown).
func (r *drainRun) stopped() (*Status, error) {
	e := r.e
	if r.st.Phase == PhaseRunning {
		e.Metrics.observeDrain(r.req.Trigger, "cancelled", e.Clock.Since(r.start))
	}
	e.Metrics.setBlocked(nil)
	return r.st, r.ctx.Err()
}
