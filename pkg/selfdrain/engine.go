package selfdrain

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/events"
	"github.com/node-agent/node-agent/pkg/evictionrequest"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/nodecondition"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/reasontext"
)

// Backoff of one pod's eviction retries after a 429 or an error: it starts
// small, so a PDB that frees a slot a moment later is used at once, doubles,
// and is capped so a blocked pod costs at most one request per cap.
const (
	RetryInitial = 250 * time.Millisecond
	retryCap     = 10 * time.Second
	// statusInterval bounds how often progress is written to the Node.
	// Every write of a Node reaches every watcher of all Nodes (the
	// scheduler, the controllers, the coordinator), so progress is
	// written at most every two seconds: a person following `maintenance
	// status` or the CLI's --wait still sees it move, and the metric
	// node_agent_drain_pending_pods says at each scrape what is left. A
	// drain shorter than this writes only its start and its end.
	statusInterval = 2 * time.Second
	// podEventInterval bounds the per-pod failure Events.
	podEventInterval = time.Minute
	// evictionRequestTimeout bounds one eviction request, which is not
	// cancelled when a drain attempt ends (see Drain).
	evictionRequestTimeout = 10 * time.Second
)

// Engine drains the agent's own Node. It is shared by every trigger (the
// annotation, NodeMaintenance objects, the reboot controller and the
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
	// controller's handler passed (OwnCopy).
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
	Recorder events.Recorder
	// Metrics may be nil: no metrics.
	Metrics *Metrics
	// PodAccess, when set, is asked before each drain begins which client
	// reaches the node's pods (pkg/podaccess: the node's own identity, or
	// the ServiceAccount's cluster-wide grant). In ModeNone the drain is
	// refused before the Node changes. Unset, Client is used for pods too.
	PodAccess func(ctx context.Context) (podaccess.Access, error)
	// PodAccessRefused, when set, is told that the node's pods refused
	// the client PodAccess chose (403 or 401 to the drain's watch), so
	// that the next drain asks PodAccess afresh instead of reusing an
	// answer it keeps (podaccess.Reporter.Forget).
	PodAccessRefused func()
	// EvictionRequests, when set, is the EvictionRequest API as the node
	// (pkg/evictionrequest); drain.evictionAPI says whether a drain uses it.
	EvictionRequests evictionrequest.API
	// VMProgress, when set, is asked when a drain begins for a way to
	// follow the node's KubeVirt VMs (pkg/vmdrain through pkg/maintenance);
	// a nil poll follows none. Each poll returns every VM's progress.
	VMProgress func(ctx context.Context) (poll func(ctx context.Context) ([]VMStatus, error))
	// CancelVMs, when set, calls off the evacuation of the node's VMs when
	// its maintenance ends (pkg/vmdrain through pkg/maintenance), and says
	// which were still moving; "" when none was.
	CancelVMs func(ctx context.Context) (string, error)
}

// NewEngine returns an engine for o.
func NewEngine(o EngineOptions) *Engine {
	o.Logger = cmp.Or(o.Logger, slog.Default())
	o.Clock = cmp.Or[clock.WithTicker](o.Clock, clock.RealClock{})
	o.Recorder = cmp.Or[events.Recorder](o.Recorder, events.Discard{})
	return &Engine{EngineOptions: o, Jitter: func() float64 { return 0.75 + rand.Float64()/2 }}
}

// event records an Event on the Node, its message cut to
// reasontext.MaxMessage: it may quote a reason or an error someone else
// wrote. The kubelet uses the node name as the reference's UID for the same
// reason: Events then show in describe node.
func (e *Engine) Event(typ, reason, format string, args ...any) {
	ref := kube.NodeReference(e.NodeName)
	e.Recorder.Event(ref, typ, reason, reasontext.ForNode(fmt.Sprintf(format, args...), reasontext.MaxMessage))
}

// now is the engine's clock as an API time.
func (e *Engine) Now() metav1.Time { return metav1.NewTime(e.Clock.Now()) }

// MaintenanceDeadline is when a maintenance drain recorded in st times out:
// drain.timeout after the drain began with its slot, or after the request
// for a record written before drainStartTime existed; zero when it has no
// deadline.
func (e *Engine) MaintenanceDeadline(st *Status) time.Time {
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
func (e *Engine) SetCondition(ctx context.Context, reason, msg string, now metav1.Time) error {
	written, err := setCondition(ctx, e.Client, e.NodeName, e.cached(), corev1.ConditionTrue, reason, msg, now)
	if err == nil {
		e.afterConditionWrite(ctx, written, now)
	}
	return err
}

// Request describes one drain.
type Request struct {
	// Trigger and Reason say who asks and why, for the record, Events and
	// metrics. The engine records them and never acts on which trigger it
	// is: what differs between triggers is pkg/maintenance's to decide.
	Trigger Trigger
	Reason  string
	// Deadline, when set, ends the attempt: evictions stop, the status
	// turns Failed, and Drain returns.
	Deadline time.Time
	// NotATimeout says Deadline is not drain.timeout but a window the
	// caller was given (the host's shutdown): passing it is recorded as an
	// incomplete drain, without the timeout's blockers and Events.
	NotATimeout bool
	// AfterTimeout ends the timeout's Event and condition: what becomes of
	// the node and its drain slot now (pkg/maintenance's policy).
	AfterTimeout string
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
	now := e.Now()
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
	if err := e.SetCondition(ctx, ReasonDraining, fmt.Sprintf("Draining (%s): %s", req.Trigger, req.Reason), now); err != nil {
		e.Logger.Warn("Could not set the node condition; the status annotation is set", "err", err)
	}
	e.Event(corev1.EventTypeNormal, "MaintenanceStarted", "Maintenance started (trigger %s): cordoned, tainted %s, evicting pods; reason: %s", req.Trigger, e.Config.TaintKey, req.Reason)
	e.Metrics.SetActive(true)
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
	now := e.Now()
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
		// The agent's conditions: UnderMaintenance and, after a shutdown
		// drain, NodeShuttingDown.
		written, err := nodecondition.Remove(ctx, e.Client.CoreV1().Nodes(), e.NodeName, ConditionType, ShuttingDownCondition)
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
		e.Event(corev1.EventTypeWarning, "MaintenanceEndFailed", "Could not end maintenance: %v", err)
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
	e.Event(corev1.EventTypeNormal, "MaintenanceEnded", "Maintenance ended (%s): %s", why, undone)
	e.Logger.Info("Maintenance ended", "why", why, "undone", undone)
	return nil
}

// HandOver gives the maintenance recorded for trigger from (the reboot
// coordinator's, when pkg/maintenance decides so) to another request
// (trigger and reason), with what the agent cordoned and tainted: the
// record names that request, so that the former requester sees its own
// maintenance over, and the end of that request undoes the node (handedOver
// says what becomes of each phase). waitMessage is the record's lastError
// while the new request's drain waits for its slot. A record of another
// trigger is left alone.
func (e *Engine) HandOver(ctx context.Context, from, trigger Trigger, reason, waitMessage string) error {
	now := e.Now()
	var prev, st *Status
	_, err := e.updateRecord(ctx, e.cached(), func(node *corev1.Node) (bool, error) {
		var perr error
		prev, perr = ParseStatus(node)
		if perr != nil {
			// Fail closed, as End does.
			return false, perr
		}
		if !prev.Active() || prev.Trigger != from {
			st = nil
			return false, nil
		}
		st = handedOver(prev, trigger, reason, waitMessage, now)
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
		cond, msg, what = ReasonWaiting, waitMessage, "its drain, which waits for a drain slot of its own,"
	}
	if err := e.SetCondition(ctx, cond, msg, now); err != nil {
		e.Logger.Warn("Could not set the node condition; the status annotation is set", "err", err)
	}
	e.Event(corev1.EventTypeNormal, "MaintenanceHandedOver", "The %s request no longer asks for the drain (%s); %s goes on for %s: %s", from, prev.Phase, what, trigger, reason)
	e.Logger.Info("Maintenance handed over", "from", from, "phase", prev.Phase, "trigger", trigger, "reason", reason)
	return nil
}

// handedOver is the reboot's record prev once the request of trigger and
// reason takes it over, at now. What the agent cordoned and tainted stays on
// record in every phase, so the end of that request undoes it.
//
//   - Succeeded: the node stays drained, for that request.
//   - Running: the drain goes on for that request, in a drain slot of its
//     own, which it waits for: the record says so (waitMessage), as a
//     drain that lost its slot does, and drain.timeout counts from that
//     slot (Begin sets DrainStartTime).
//   - Failed: the reboot's attempt timed out; that request's own attempt
//     begins, counted afresh, and waits for its slot likewise.
//   - Waiting: nothing changed on the node yet; it waits for that
//     request's slot.
func handedOver(prev *Status, trigger Trigger, reason, waitMessage string, now metav1.Time) *Status {
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
		st.LastError, st.ErrorOnLeaseCount = waitMessage, 0
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
