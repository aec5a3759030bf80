package selfdrain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/evictionrequest"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/reasontext"
)

// Backoff of one pod's eviction retries after a 429 or an error: it starts
// small, so a PDB that frees a slot a moment later is used at once, doubles,
// and is capped so a blocked pod costs at most one request per cap.
const (
	retryInitial = 250 * time.Millisecond
	retryCap     = 10 * time.Second
	// statusInterval bounds how often progress is written to the Node.
	statusInterval = time.Second
	// podEventInterval bounds the per-pod failure Events.
	podEventInterval = time.Minute
	// evictionRequestTimeout bounds one eviction request, which is not
	// cancelled when a drain attempt ends (see Drain).
	evictionRequestTimeout = 10 * time.Second
)

// Engine drains the agent's own Node. It is shared by every trigger (the
// annotation, NodeMaintenance objects, the reboot coordinator and the
// shutdown); one drain runs at a time.
type Engine struct {
	EngineOptions
	// nodeCache returns the agent's informer copy of the Node (see
	// UseNodeCache); nil until then.
	nodeCache atomic.Pointer[func() (*corev1.Node, error)]
	// pods is the client for the node's pods, chosen by PodAccess when the
	// last drain began.
	podsMu sync.Mutex
	pods   kube.Interface
	// requests says whether the last drain began goes through
	// EvictionRequests (chooseEvictionAPI); under podsMu.
	requests bool
	// Jitter returns a factor in [0.75, 1.25) applied to every backoff; tests
	// may fix it.
	Jitter func() float64

	// own is the record the engine wrote last, until the cache shows it
	// (ownwrite.go); ownCopies counts the copies of the Node the
	// controller's handler passed (ownCopy).
	ownMu     sync.Mutex
	own       *ownWrite
	ownCopies uint64

	// lifecycle says whether the node lifecycle conditions are written
	// (lifecycle.go), decided once.
	lifecycleOnce sync.Once
	lifecycle     bool
}

// EngineOptions configures an Engine. Client and NodeName are required; the
// other fields have defaults.
type EngineOptions struct {
	Client   kube.Interface
	NodeName string
	Config   config.DrainConfig
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Recorder defaults to one that drops the Events.
	Recorder record.EventRecorder
	// Metrics may be nil: no metrics.
	Metrics *Metrics
	// PodAccess, when set, is asked before each drain begins which client
	// reaches the node's pods (pkg/podaccess: the node's own identity, or
	// the ServiceAccount's cluster-wide grant). In ModeNone the drain is
	// refused before the Node changes. Unset, Client is used for pods too.
	PodAccess func(ctx context.Context) (podaccess.Access, error)
	// EvictionRequests, when set, is the EvictionRequest API as the node
	// (pkg/evictionrequest); drain.evictionAPI says whether a drain uses it.
	EvictionRequests evictionrequest.API
	// VMProgress, when set, is asked when a drain begins for a way to
	// follow the node's KubeVirt VMs (pkg/vmdrain through pkg/handshake);
	// a nil poll follows none. Each poll returns every VM's progress.
	VMProgress func(ctx context.Context) (poll func(ctx context.Context) ([]VMStatus, error))
	// CancelVMs, when set, calls off the evacuation of the node's VMs when
	// its maintenance ends (pkg/vmdrain through pkg/handshake), and says
	// which were still moving; "" when none was.
	CancelVMs func(ctx context.Context) (string, error)
}

// NewEngine returns an engine for o.
func NewEngine(o EngineOptions) *Engine {
	o.Logger = cmp.Or(o.Logger, slog.Default())
	o.Clock = cmp.Or[clock.WithTicker](o.Clock, clock.RealClock{})
	o.Recorder = cmp.Or[record.EventRecorder](o.Recorder, &record.FakeRecorder{})
	return &Engine{EngineOptions: o, Jitter: func() float64 { return 0.75 + rand.Float64()/2 }}
}

// event records an Event on the Node, its message cut to
// reasontext.MaxMessage: it may quote a reason or an error someone else
// wrote. The kubelet uses the node name as the reference's UID for the same
// reason: Events then show in describe node.
func (e *Engine) event(typ, reason, format string, args ...any) {
	ref := kube.NodeReference(e.NodeName)
	e.Recorder.Event(ref, typ, reason, reasontext.ForNode(fmt.Sprintf(format, args...), reasontext.MaxMessage))
}

// now is the engine's clock as an API time.
func (e *Engine) now() metav1.Time { return metav1.NewTime(e.Clock.Now()) }

// maintenanceDeadline is when a maintenance drain recorded in st times out:
// drain.timeout after the drain began with its slot, or after the request
// for a record written before drainStartTime existed; zero when it has no
// deadline.
func (e *Engine) maintenanceDeadline(st *Status) time.Time {
	t := e.Config.Timeout.Duration
	start := cmp.Or(st.DrainStartTime, st.StartTime)
	if t <= 0 || start == nil {
		return time.Time{}
	}
	return start.Add(t)
}

// readStatus reads the maintenance record on the Node.
func (e *Engine) readStatus(ctx context.Context) (*Status, error) {
	node, err := e.Client.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", e.NodeName, err)
	}
	return ParseStatus(node)
}

// patchStatus writes st as the maintenance record on the Node.
func (e *Engine) patchStatus(ctx context.Context, st *Status) error {
	node, err := patchStatusAnnotation(ctx, e.Client, e.NodeName, st)
	if err == nil {
		e.wrote(node)
	}
	return err
}

// UseNodeCache hands the engine the agent's informer copy of its Node. Its
// writes that start from the Node's state then start from that copy instead
// of a GET; each is conditional on the copy's resourceVersion (or touches
// only the agent's own condition), so a stale copy costs one conflict and a
// GET, never a lost change.
func (e *Engine) UseNodeCache(get func() (*corev1.Node, error)) {
	e.nodeCache.Store(&get)
}

// cached is the informer's copy of the Node, or nil.
func (e *Engine) cached() *corev1.Node {
	get := e.nodeCache.Load()
	if get == nil {
		return nil
	}
	n, err := (*get)()
	if err != nil {
		return nil
	}
	return n
}

// setCondition sets the UnderMaintenance condition True with reason and msg.
func (e *Engine) setCondition(ctx context.Context, reason, msg string, now metav1.Time) error {
	written, err := setCondition(ctx, e.Client, e.NodeName, e.cached(), corev1.ConditionTrue, reason, msg, now)
	if err == nil {
		e.afterConditionWrite(ctx, written, now)
	}
	return err
}

// Request describes one drain.
type Request struct {
	Trigger Trigger
	Reason  string
	// Deadline, when set, ends the attempt: evictions stop, the status
	// turns Failed, and Drain returns.
	Deadline time.Time
	// SkippedConcurrencyWait is recorded in the status.
	SkippedConcurrencyWait bool
}

// Begin records the node's state, cordons it, adds the drain taint and writes
// a Running status, in one write. If the Node already carries an active
// status (the agent restarted mid-drain), it resumes it instead: what the
// agent did before stays recorded, and so does the drain's start, so that a
// restart does not extend drain.timeout.
func (e *Engine) Begin(ctx context.Context, req Request) (*Status, error) {
	access, err := e.choosePodClient(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.chooseEvictionAPI(); err != nil {
		return nil, err
	}
	now := e.now()
	var st *Status
	_, err = e.updateRecord(ctx, e.cached(), func(node *corev1.Node) (bool, error) {
		prev, perr := ParseStatus(node)
		fresh := true
		switch {
		case perr == nil && prev.Active() && prev.Phase != PhaseWaiting && prev.UndoneAt == nil:
			// Resume: keep the record of what the agent changed; a drain
			// by the other trigger is taken over the same way, so nothing
			// the agent did is forgotten.
			st = prev
			fresh = false
			if prev.Phase == PhaseFailed {
				// A new request after a drain that timed out (or a
				// shutdown drain after it): a new attempt, counted
				// afresh, on a node the agent still holds cordoned.
				st.StartTime = &now
				st.TotalPods, st.EvictionPods, st.PendingPods, st.DrainProgress = 0, 0, nil, 0
			}
			if prev.Phase != PhaseRunning || prev.Trigger != req.Trigger {
				// Only a drain that was running resumes its clock.
				st.DrainStartTime = nil
			}
		case perr == nil && prev.Active() && prev.Phase == PhaseWaiting:
			// Waiting for a slot changed nothing on the node yet.
			st = &Status{StartTime: prev.StartTime}
		default:
			// Nothing recorded, a record that ended, or one whose
			// changes were undone at a timeout: the node as it is now
			// is what the end of this maintenance restores.
			st = &Status{StartTime: &now}
		}
		if st.DrainStartTime == nil {
			st.DrainStartTime = &now
		}
		st.Blockers, st.UndoneAt = nil, nil
		st.Phase = PhaseRunning
		st.Trigger = req.Trigger
		st.Reason = req.Reason
		st.LastUpdate = &now
		st.LastError = ""
		st.ErrorOnLeaseCount = 0
		st.EndTime = nil
		st.DrainedInTime = nil
		if req.SkippedConcurrencyWait {
			st.SkippedConcurrencyWait = true
		}
		st.PodAccess = string(access)
		cordonAndTaint(node, e.Config.TaintKey, st, fresh, now)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if err := e.setCondition(ctx, ReasonDraining, fmt.Sprintf("Draining (%s): %s", req.Trigger, req.Reason), now); err != nil {
		e.Logger.Warn("Could not set the node condition; the status annotation is set", "err", err)
	}
	e.event(corev1.EventTypeNormal, "MaintenanceStarted", "Maintenance started (trigger %s): cordoned, tainted %s, evicting pods; reason: %s", req.Trigger, e.Config.TaintKey, req.Reason)
	e.Metrics.setActive(true)
	e.Logger.Info("Maintenance started", "trigger", req.Trigger, "reason", req.Reason, "cordonedByAgent", st.CordonedByAgent, "taintedByAgent", st.TaintedByAgent)
	return st, nil
}

// choosePodClient asks PodAccess which client reaches the node's pods. It
// runs before Begin changes anything, so a drain without the rights to
// finish never starts.
func (e *Engine) choosePodClient(ctx context.Context) (podaccess.Mode, error) {
	client, mode := e.Client, podaccess.Mode("")
	if e.PodAccess != nil {
		acc, err := e.PodAccess(ctx)
		if err != nil {
			return "", fmt.Errorf("maintenance not started, the Node is unchanged: cannot tell how to reach this node's pods: %w", err)
		}
		if acc.Mode == podaccess.ModeNone || acc.Client == nil {
			return "", fmt.Errorf("maintenance not started, the Node is unchanged: %w: %s; %s", podaccess.ErrNoAccess, acc.Why, podaccess.Fix)
		}
		client, mode = acc.Client, acc.Mode
	}
	e.podsMu.Lock()
	e.pods = client
	e.podsMu.Unlock()
	return mode, nil
}

// podClient is the client for the node's pods: the one Begin chose, or
// Client before any Begin.
func (e *Engine) podClient() kube.Interface {
	e.podsMu.Lock()
	defer e.podsMu.Unlock()
	if e.pods != nil {
		return e.pods
	}
	return e.Client
}

// End reverses what the agent did (uncordon, remove the taint, only where it
// did them), marks the status final and removes the condition. It is safe to
// call when nothing is active.
func (e *Engine) End(ctx context.Context, why string) error {
	now := e.now()
	node, err := e.Client.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", e.NodeName, err)
	}
	if prev, perr := ParseStatus(node); perr == nil && prev.Active() {
		// No responder goes on moving a pod of a node given back, and no
		// VM goes on migrating off it.
		e.withdrawNodeRequests(ctx)
		e.cancelVMs(ctx)
		// The condition goes first: once the status is final, everything
		// is undone, and a reader that waits for it sees the whole result.
		written, err := removeCondition(ctx, e.Client, e.NodeName)
		if err != nil {
			e.Logger.Warn("Could not remove the node condition", "err", err)
		} else {
			e.afterConditionWrite(ctx, written, now)
		}
		node = written // nil after an error: the update reads the Node
	}
	var st *Status
	_, err = e.updateRecord(ctx, node, func(node *corev1.Node) (bool, error) {
		prev, perr := ParseStatus(node)
		if perr != nil {
			// Fail closed: without a readable record we cannot know what
			// the agent changed, so we change nothing.
			return false, perr
		}
		if !prev.Active() {
			st = nil
			return false, nil
		}
		st = prev
		st.EndTime = &now
		st.LastUpdate = &now
		undo(node, e.Config.TaintKey, st)
		return true, nil
	})
	if err != nil {
		e.event(corev1.EventTypeWarning, "MaintenanceEndFailed", "Could not end maintenance: %v", err)
		return err
	}
	e.Metrics.ended()
	if st == nil {
		return nil
	}
	undone := "nothing left to undo: undone when its drain timed out (drain.onTimeout uncordon)"
	if st.UndoneAt == nil {
		undone = e.undid(st)
	}
	e.event(corev1.EventTypeNormal, "MaintenanceEnded", "Maintenance ended (%s): %s", why, undone)
	e.Logger.Info("Maintenance ended", "why", why, "undone", undone)
	return nil
}

// HandOver gives the maintenance of the reboot coordinator to the request
// that keeps the node in maintenance once the coordinator no longer asks
// for it (trigger and reason), with what the agent cordoned and tainted:
// the record names that request, so that the coordinator sees its own
// maintenance over and gives its drain slot back, and the end of that
// request undoes the node (handedOver says what becomes of each phase). A
// record that is not the reboot's is left alone.
func (e *Engine) HandOver(ctx context.Context, trigger Trigger, reason string) error {
	now := e.now()
	var prev, st *Status
	_, err := e.updateRecord(ctx, e.cached(), func(node *corev1.Node) (bool, error) {
		var perr error
		prev, perr = ParseStatus(node)
		if perr != nil {
			// Fail closed, as End does.
			return false, perr
		}
		if !prev.Active() || prev.Trigger != TriggerReboot {
			st = nil
			return false, nil
		}
		st = handedOver(prev, trigger, reason, now)
		setStatusAnnotation(node, st)
		return true, nil
	})
	if err != nil {
		return err
	}
	if st == nil {
		return nil
	}
	cond, msg, what := ReasonDrained, fmt.Sprintf("Drained %d pods (%s)", st.EvictionPods, trigger), "the drained node"
	if st.Phase != PhaseSucceeded {
		cond, msg, what = ReasonWaiting, slotWaitMessage, "its drain, which waits for a drain slot of its own,"
	}
	if err := e.setCondition(ctx, cond, msg, now); err != nil {
		e.Logger.Warn("Could not set the node condition; the status annotation is set", "err", err)
	}
	e.event(corev1.EventTypeNormal, "MaintenanceHandedOver", "The reboot coordinator no longer asks for the drain (%s); %s goes on for %s: %s", prev.Phase, what, trigger, reason)
	e.Logger.Info("Maintenance handed over from the reboot coordinator", "phase", prev.Phase, "trigger", trigger, "reason", reason)
	return nil
}

// handedOver is the reboot's record prev once the request of trigger and
// reason takes it over, at now. What the agent cordoned and tainted stays on
// record in every phase, so the end of that request undoes it.
//
//   - Succeeded: the node stays drained, for that request.
//   - Running: the drain goes on for that request, in a drain slot of its
//     own, which it waits for: the record says so (slotWaitMessage), as a
//     drain that lost its slot does, and drain.timeout counts from that
//     slot (Begin sets DrainStartTime).
//   - Failed: the reboot's attempt timed out; that request's own attempt
//     begins, counted afresh, and waits for its slot likewise.
//   - Waiting: nothing changed on the node yet; it waits for that
//     request's slot.
func handedOver(prev *Status, trigger Trigger, reason string, now metav1.Time) *Status {
	st := *prev
	st.Trigger, st.Reason, st.LastUpdate = trigger, reason, &now
	switch prev.Phase {
	case PhaseFailed:
		st.StartTime = &now
		st.TotalPods, st.EvictionPods, st.PendingPods, st.DrainProgress = 0, 0, nil, 0
		st.Blockers = nil
		fallthrough
	case PhaseRunning:
		st.Phase = PhaseRunning
		st.DrainStartTime = nil
		st.LastError, st.ErrorOnLeaseCount = slotWaitMessage, 0
	}
	return &st
}

// undid says what undo did for st.
func (e *Engine) undid(st *Status) string {
	var out []string
	if st.CordonedByAgent {
		out = append(out, "uncordoned")
	} else {
		out = append(out, "left cordoned (it was cordoned before maintenance)")
	}
	if st.TaintedByAgent {
		out = append(out, "removed taint "+e.Config.TaintKey)
	}
	return strings.Join(out, ", ")
}

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
}

func (e *Engine) newDrainRun(ctx context.Context, st *Status, req Request) *drainRun {
	return &drainRun{e: e, ctx: ctx, st: st, req: req, start: e.Clock.Now(),
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
	var informerDone sync.WaitGroup
	informerDone.Go(func() { podInformer.RunWithContext(ctx) })
	stop = func() {
		// The informer stops only when ctx does.
		cancel()
		informerDone.Wait()
	}
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		stop()
		return nil, nil, ctx.Err()
	}
	return podInformer.GetStore(), stop, nil
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
	list, _, err := choosePods(r.ctx, e.Client, onNode, e.Config.PodSelector)
	if err != nil {
		err = fmt.Errorf("choosing pods to evict on Node %s: %w", e.NodeName, err)
		st.LastError = err.Error()
		e.writeStatus(r.ctx, st)
		return err
	}
	for _, p := range list {
		if podHasFinished(&p) {
			r.finished++
			continue
		}
		r.pending[p.UID] = &podState{key: p.Namespace + "/" + p.Name, pod: p}
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
		return true
	}
	if r.lastErr != st.LastError {
		r.lastErr = st.LastError
		r.dirty = true
	}
	if r.dirty && now.Sub(r.lastWrite) >= statusInterval {
		r.pw.post(st)
		r.lastWrite = now
		r.dirty = false
	}
	return false
}

// dispatch sends every pod whose retry time has come to the workers, and
// returns the earliest retry time still to come (zero when none). It
// reports false when ctx ended while it waited for a worker.
func (r *drainRun) dispatch(now time.Time) (next time.Time, ok bool) {
	for _, ps := range sortedStates(r.pending) {
		if ps.inFlight || ps.evicted {
			continue
		}
		if !ps.nextAttempt.After(now) {
			ps.inFlight = true
			select {
			case r.work <- ps:
			case <-r.ctx.Done():
				return next, false
			}
			continue
		}
		if next.IsZero() || ps.nextAttempt.Before(next) {
			next = ps.nextAttempt
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
			e.event(corev1.EventTypeWarning, "EvictionBlocked", "Cannot evict pod %s yet: %s", ps.key, describeEvictionError(err))
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
	e.event(corev1.EventTypeNormal, "DrainSucceeded", "Drained %d pods in %s", st.EvictionPods, d.Round(10*time.Millisecond))
	e.Logger.Info("Node drained", "event", "DrainSucceeded", "pods", st.EvictionPods, "duration", d)
	return st
}

// expire ends the attempt at its deadline: it asks for no more evictions
// and marks the status Failed. A maintenance drain's deadline is
// drain.timeout (timeOut, timeout.go); a shutdown drain's is the host's.
func (r *drainRun) expire() *Status {
	if r.req.Trigger != TriggerShutdown {
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
	e.event(corev1.EventTypeWarning, "DrainFailed", "Drain did not finish in time: %d of %d pods still on the node; last error: %s", len(r.pending), st.EvictionPods, st.LastError)
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

// evictionResult is the result label of node_agent_drain_evictions_total.
func evictionResult(deleted bool, err error) string {
	var awaiting *evictionrequest.AwaitingResponder
	switch {
	case errors.As(err, &awaiting):
		return "awaiting_responder"
	case err == nil && deleted:
		return "deleted"
	case err == nil:
		return "evicted"
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return "not_found"
	case apierrors.IsTooManyRequests(err):
		return "blocked"
	}
	return "error"
}

// describeEvictionError turns an eviction error into a message that names
// the blocker, for example the PodDisruptionBudget.
func describeEvictionError(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		msg := s.Message
		if s.Details != nil {
			for _, c := range s.Details.Causes {
				if c.Type == policyv1.DisruptionBudgetCause && c.Message != "" && !strings.Contains(msg, c.Message) {
					msg += " (" + c.Message + ")"
				}
			}
		}
		if msg != "" {
			return fmt.Sprintf("%s (HTTP %d)", msg, s.Code)
		}
	}
	return err.Error()
}

// evictOrDelete evicts the pod (through an EvictionRequest where the drain
// uses them, evictionrequests.go), or deletes it once it has been blocked
// for drain.deleteAfter. requested says whether the pod's EvictionRequest
// exists.
func (e *Engine) evictOrDelete(ctx context.Context, ps *podState) (deleted, requested bool, err error) {
	p := ps.pod
	uid := p.UID
	if d := e.Config.DeleteAfter.Duration; d > 0 && !ps.firstBlocked.IsZero() && e.Clock.Since(ps.firstBlocked) >= d {
		e.event(corev1.EventTypeWarning, "PodDeleted", "Deleting pod %s: its eviction was refused for %s (drain.deleteAfter)", ps.key, d)
		return true, false, e.podClient().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	if e.usingRequests() {
		requested, err := e.request(ctx, ps)
		return false, requested, err
	}
	return false, false, e.evict(ctx, &p)
}

// evict asks for p's eviction through pods/eviction.
func (e *Engine) evict(ctx context.Context, p *corev1.Pod) error {
	uid := p.UID
	return e.podClient().PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
}

// backoff returns the wait before retry number attempt (1-based): doubling
// from retryInitial, capped at limit, times a jitter factor, never zero.
func backoff(attempt int, limit time.Duration, jitter func() float64) time.Duration {
	d := retryInitial
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	if jitter != nil {
		d = time.Duration(float64(d) * jitter())
	}
	return max(d, time.Millisecond)
}

func sortedStates(m map[types.UID]*podState) []*podState {
	out := make([]*podState, 0, len(m))
	for _, ps := range m {
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// blockedCounts counts the pending pods by the budget that refused them.
func blockedCounts(pending map[types.UID]*podState) map[pdbRef]int {
	n := map[pdbRef]int{}
	for _, ps := range pending {
		if ps.blockedBy != nil {
			n[*ps.blockedBy]++
		}
	}
	return n
}

func (e *Engine) setPending(st *Status, pending map[types.UID]*podState) {
	st.PendingPods = st.PendingPods[:0]
	for _, ps := range pending {
		st.PendingPods = append(st.PendingPods, ps.key)
	}
	sort.Strings(st.PendingPods)
	st.DrainProgress = progress(st.EvictionPods, len(pending))
}

// progressWriter writes the latest progress posted to it; a newer status
// replaces one not yet written.
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
	now := e.now()
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
	if err := e.setCondition(ctx, reason, msg, metav1.NewTime(at)); err != nil && ctx.Err() == nil {
		e.Logger.Warn("Could not set the node condition", "err", err)
	}
	e.writeStatus(ctx, st)
}
