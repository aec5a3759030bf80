package reboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/kube"
)

// Slot is a drain slot the coordinator holds (pkg/slots).
type Slot interface {
	Name() string
	// Release stops renewing and gives the slot back; after
	// KeepAcrossReboot it only stops renewing.
	Release()
	// KeepAcrossReboot keeps the slot held for d without renewal: the
	// rebooted agent takes it back, or it expires when the node never
	// returns.
	KeepAcrossReboot(ctx context.Context, d time.Duration) error
}

// Slots hands out the cluster's drain slots (pkg/slots, the same Leases as
// drain.maxConcurrentNodes).
type Slots interface {
	// Acquire blocks until this node holds a slot, or ctx ends; a slot
	// this node still holds (from before a restart or a reboot) is taken
	// back at once. onWait says why it waits, as in pkg/slots.
	Acquire(ctx context.Context, onWait func(error)) (Slot, error)
}

// Rebooter asks the host to reboot: logind's Reboot over D-Bus.
type Rebooter interface {
	Reboot(ctx context.Context) error
}

// BlockerSource finds blockers (PodBlockers, AlertBlockers).
type BlockerSource interface {
	Blockers(ctx context.Context) []Blocker
}

// Maintenance is what the coordinator needs to know of the node's
// maintenance (pkg/selfdrain's record on the Node). The wiring reads it.
type Maintenance struct {
	// Other: a maintenance that is not this reboot's is asked for or
	// under way.
	Other bool
	// Active: a maintenance of this reboot is recorded on the Node and not
	// yet undone (the agent may have cordoned and tainted it).
	Active bool
	// Drained: the reboot's drain finished: no pod is left to evict.
	Drained bool
	// TimedOut: the reboot's drain did not finish within drain.timeout.
	TimedOut bool
}

// Observer is what the coordinator reports to Prometheus (*Metrics, metrics.go).
type Observer interface {
	Observe(rec *Record)
	Rebooted()
	Failed()
	Loop()
}

// Options configures a Coordinator.
type Options struct {
	// Client writes the record, the condition and the request annotation
	// on the Node.
	Client   kube.Interface
	NodeName string
	Need     NeedChecker
	Window   Window
	Blockers []BlockerSource
	// LoopBound is reboot.loopBound.
	LoopBound time.Duration
	// RebootWithoutDrain is reboot.rebootWithoutDrain.
	RebootWithoutDrain bool
	// CheckInterval is reboot.checkInterval: how often the need and the
	// blockers are looked at when nothing else wakes the coordinator.
	CheckInterval time.Duration
	// SlotHoldBound is reboot.slotHoldBound: how long the slot stays held
	// while the host reboots; a node that is not back by then loses it.
	SlotHoldBound time.Duration
	// RetryReboot is how long after asking logind a host that has not
	// rebooted is asked again.
	RetryReboot time.Duration

	Slots       Slots
	Rebooter    Rebooter
	Maintenance func(node *corev1.Node) (Maintenance, error)

	Clock    clock.WithTicker
	Logger   *slog.Logger
	Recorder record.EventRecorder
	Metrics  Observer
}

// Coordinator reboots its node when the host needs it: it gathers the
// Input, asks Decide, and carries the Action out. One goroutine (Run) owns
// its state; the slot is waited for in another, which hands the slot back
// through a channel.
type Coordinator struct {
	o    Options
	log  *slog.Logger
	wake chan struct{}

	// slot is the drain slot held, or nil.
	slot Slot
	// acquiring, when not nil, cancels the wait for a slot; got receives
	// its result.
	acquiring context.CancelFunc
	got       chan acquired
	// slotErr is the last error met while taking a slot, shown while the
	// coordinator waits; the waiting goroutine sets it, under mu.
	mu      sync.Mutex
	slotErr error
	// badRecord is the last malformed record reported.
	badRecord string
}

type acquired struct {
	slot Slot
	err  error
}

// NewCoordinator returns a coordinator for o.
func NewCoordinator(o Options) *Coordinator {
	if o.RetryReboot <= 0 {
		o.RetryReboot = 5 * time.Minute
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = time.Minute
	}
	return &Coordinator{o: o, log: o.Logger, wake: make(chan struct{}, 1), got: make(chan acquired, 1)}
}

// Name implements agent.Component.
func (c *Coordinator) Name() string { return "reboot" }

func (c *Coordinator) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run implements agent.Component: it decides on every change of the Node,
// on every CheckInterval, and when a slot is taken.
func (c *Coordinator) Run(ctx context.Context, view agent.NodeView) error {
	if err := view.AddHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(_, _ any) { c.poke() },
	}); err != nil {
		return err
	}
	t := c.o.Clock.NewTicker(c.o.CheckInterval)
	defer t.Stop()
	defer c.stop()
	c.poke()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-t.C():
		case a := <-c.got:
			c.acquiring = nil
			if a.err != nil {
				if ctx.Err() == nil {
					c.log.Warn("Could not take a drain slot", "err", a.err)
				}
				continue
			}
			c.slot = a.slot
			c.log.Info("Holding a drain slot for the reboot", "lease", a.slot.Name())
		}
		node, err := view.Get()
		if err != nil {
			continue
		}
		if err := c.step(ctx, node); err != nil && ctx.Err() == nil {
			c.log.Warn("Reboot coordinator step failed; trying again", "err", err)
		}
	}
}

// stop ends a wait for a slot and stops renewing the one held; a slot kept
// across the reboot stays held (Slot.Release).
func (c *Coordinator) stop() { c.dropSlot() }

// step looks at the node once and moves the reboot on.
func (c *Coordinator) step(ctx context.Context, node *corev1.Node) error {
	now := c.o.Clock.Now()
	rec, err := ParseRecord(node)
	if err != nil {
		// Bad input changes nothing: the record says what this node
		// did; acting on a guess could reboot it twice.
		if raw := node.Annotations[RecordAnnotation]; raw != c.badRecord {
			c.badRecord = raw
			c.log.Error("Malformed reboot record; the coordinator does nothing until it is fixed or deleted", "err", err)
			c.event(corev1.EventTypeWarning, "MalformedRebootRecord", "%v", err)
		}
		return nil
	}
	if rec == nil {
		rec = &Record{State: NotNeeded, Reason: string(NotNeeded)}
	}
	m, err := c.o.Maintenance(node)
	if err != nil {
		return fmt.Errorf("reading the node's maintenance: %w", err)
	}
	next := *rec
	request := strings.TrimSpace(node.Annotations[RequestAnnotation])

	// What happened since the last step.
	switch rec.Phase {
	case PhaseDraining:
		switch {
		case m.Drained:
			next.Phase = PhaseDrained
		case m.TimedOut:
			next.Phase = PhaseDrainTimedOut
		}
	case PhaseRebootRequested:
		if boot := node.Status.NodeInfo.BootID; boot != "" && boot != rec.BootID {
			next.Phase = PhaseBack
			next.LastReboot = &metav1.Time{Time: now}
			c.log.Info("The host rebooted", "bootID", boot, "requestedAt", rec.RequestedAt)
		}
	}
	// A slot the node held before a restart or the reboot is taken back,
	// so that it can be held on or given back.
	if c.slot == nil && c.acquiring == nil && next.Drain {
		c.acquire(ctx)
	}

	idle := next.Phase == PhaseIdle || next.Phase == PhaseWaitingForSlot
	// A request asks anew after a failure: the coordinator removed the
	// one that failed (and remembers it, in case the cache still shows
	// it).
	if request != "" && idle && request != rec.FailedRequest {
		next.FailedAt, next.FailedRequest = nil, ""
	}
	need, needErr := c.need(ctx, request, next.Phase)
	if needErr != nil && idle {
		c.releaseSlot(&next)
		next.Phase = PhaseIdle
		return c.write(ctx, node, rec, &next, Decision{State: rec.State, Message: "cannot tell whether the host needs a reboot: " + needErr.Error()}, corev1.ConditionUnknown, ReasonUnknown)
	}
	if needErr != nil {
		// Past the start, an unknown need is no reason to call the
		// reboot off: only a need seen gone is.
		need = Need{Needed: true, Why: "the need cannot be checked now (" + needErr.Error() + ")"}
	}
	var blockers []Blocker
	if need.Needed && (idle || next.Phase == PhaseDraining) {
		for _, b := range c.o.Blockers {
			blockers = append(blockers, b.Blockers(ctx)...)
		}
	}
	in := Input{
		Now: now, Need: need, Window: c.o.Window, Blockers: blockers, SlotHeld: c.slot != nil, Phase: next.Phase,
		LoopBound: c.o.LoopBound, RebootWithoutDrain: c.o.RebootWithoutDrain,
		InMaintenance: m.Other && idle, NodeReady: nodeReady(node),
	}
	if next.LastReboot != nil {
		in.Last = LastReboot{At: next.LastReboot.Time, SentinelSurvived: next.SentinelSurvived}
	}
	if next.FailedAt != nil {
		in.FailedAt = next.FailedAt.Time
	}
	d := Decide(in)
	if err := c.lastSlotErr(); d.State == Pending && d.Detail == WaitingForSlot && err != nil {
		d.Message += "; cannot take a slot: " + err.Error()
	}

	switch d.Action {
	case ActTakeSlot:
		next.Phase = PhaseWaitingForSlot
		if c.acquiring == nil {
			c.acquire(ctx)
		}
	case ActStartDrain:
		next.Phase, next.Drain, next.Slot = PhaseDraining, true, c.slot.Name()
	case ActReleaseSlot:
		if next.Phase == PhaseDrainTimedOut {
			// Once: the attempt is over; the drain is undone, then the
			// slot given back, while Decide keeps saying Failed. The
			// request it answered is removed, so that asking again is a
			// new request.
			next.Phase, next.Drain, next.FailedAt = PhaseIdle, false, &metav1.Time{Time: now}
			if request != "" {
				if err := c.removeRequest(ctx); err != nil {
					return err
				}
				next.FailedRequest = request
			}
			if c.o.Metrics != nil {
				c.o.Metrics.Failed()
			}
		}
		if next.Phase == PhaseDraining {
			next.Phase, next.Drain = PhaseIdle, false
			c.event(corev1.EventTypeNormal, "RebootCancelled", "%s", d.Message)
		}
		if next.Drain || m.Active {
			// The slot is given back once the drain is undone.
			break
		}
		c.releaseSlot(&next)
		next.Phase = PhaseIdle
	case ActReboot:
		if err := c.reboot(ctx, node, &next); err != nil {
			d = Decision{State: Rebooting, Message: "drained, but the reboot could not be asked for: " + err.Error() + "; trying again"}
		}
	case ActFinish:
		next.Drain = false
		next.SentinelSurvived = need.Needed
		if m.Active {
			d = Decision{State: Rebooting, Message: "the host rebooted; undoing the drain (uncordon, drain taint) before giving the slot back"}
			break
		}
		c.releaseSlot(&next)
		next.Phase, next.RequestedAt, next.BootID = PhaseIdle, nil, ""
		if c.o.Metrics != nil && d.State == RebootLoop {
			c.o.Metrics.Loop()
		}
	default:
		if next.Phase == PhaseRebootRequested && node.Status.NodeInfo.BootID == rec.BootID &&
			rec.RequestedAt != nil && now.Sub(rec.RequestedAt.Time) >= c.o.RetryReboot {
			// The host did not go down: logind refused, or a shutdown
			// was cancelled. Ask again, as often as RetryReboot.
			if err := c.reboot(ctx, node, &next); err != nil {
				d.Message += "; asking again failed: " + err.Error()
			}
		}
	}
	// A finished reboot answers the request.
	if request != "" && next.Phase == PhaseIdle && d.Action == ActFinish {
		if err := c.removeRequest(ctx); err != nil {
			return err
		}
	}
	status := corev1.ConditionTrue
	if d.State == NotNeeded || d.State == Done {
		status = corev1.ConditionFalse
	}
	if d.State == NotNeeded && (rec.State == Done || rec.State == Failed) {
		// Nothing is needed now; keep saying how the last attempt ended.
		d.State, d.Message = rec.State, rec.Message
	}
	return c.write(ctx, node, rec, &next, d, status, d.Reason())
}

// need says whether the host needs a reboot. After the reboot (PhaseBack)
// only the sentinel counts: the request was for the reboot that happened,
// and must not count as a sentinel that survived it.
func (c *Coordinator) need(ctx context.Context, request string, phase Phase) (Need, error) {
	if request != "" && phase != PhaseBack {
		return Need{Needed: true, Why: fmt.Sprintf("reboot requested (%s: %s)", RequestAnnotation, request)}, nil
	}
	return c.o.Need.Check(ctx)
}

// acquire starts waiting for a slot.
func (c *Coordinator) acquire(ctx context.Context) {
	actx, cancel := context.WithCancel(ctx)
	c.acquiring = cancel
	c.setSlotErr(nil)
	go func() {
		s, err := c.o.Slots.Acquire(actx, func(err error) {
			c.setSlotErr(err)
			c.poke()
		})
		c.got <- acquired{slot: s, err: err}
	}()
}

func (c *Coordinator) setSlotErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slotErr = err
}

func (c *Coordinator) lastSlotErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slotErr
}

// releaseSlot stops waiting for a slot and gives back the one held.
func (c *Coordinator) releaseSlot(rec *Record) {
	c.dropSlot()
	rec.Slot = ""
}

// dropSlot ends a wait for a slot, and releases the slot held (which, once
// kept across the reboot, only stops renewing it).
func (c *Coordinator) dropSlot() {
	if c.acquiring != nil {
		c.acquiring()
		if a := <-c.got; a.slot != nil {
			a.slot.Release()
		}
		c.acquiring = nil
	}
	if c.slot != nil {
		c.slot.Release()
		c.log.Info("Released the drain slot", "lease", c.slot.Name())
		c.slot = nil
	}
}

// reboot keeps the slot across the reboot, records the request, and asks
// the host to reboot. The record is written before logind is asked, so the
// agent after the reboot knows that it asked.
func (c *Coordinator) reboot(ctx context.Context, node *corev1.Node, rec *Record) error {
	boot := node.Status.NodeInfo.BootID
	if boot == "" {
		return errors.New("the Node reports no status.nodeInfo.bootID, so the coordinator could not tell that the host rebooted; not rebooting")
	}
	if c.slot == nil {
		return errors.New("the drain slot is not held (taking it back after a restart); not rebooting without it")
	}
	if err := c.slot.KeepAcrossReboot(ctx, c.o.SlotHoldBound); err != nil {
		return fmt.Errorf("keeping the drain slot across the reboot: %w", err)
	}
	now := metav1.Time{Time: c.o.Clock.Now()}
	first := rec.Phase != PhaseRebootRequested
	rec.Phase, rec.BootID, rec.RequestedAt = PhaseRebootRequested, boot, &now
	if err := c.patchRecord(ctx, rec); err != nil {
		return err
	}
	c.event(corev1.EventTypeNormal, "Rebooting", "Asking logind to reboot the host (boot %s); the drain slot %s stays held for up to %s", boot, c.slot.Name(), c.o.SlotHoldBound)
	c.log.Info("Rebooting the host", "bootID", boot, "slot", c.slot.Name(), "slotHoldBound", c.o.SlotHoldBound)
	if err := c.o.Rebooter.Reboot(ctx); err != nil {
		c.event(corev1.EventTypeWarning, "RebootFailed", "logind refused the reboot: %v", err)
		return fmt.Errorf("asking logind to reboot: %w", err)
	}
	if first && c.o.Metrics != nil {
		c.o.Metrics.Rebooted()
	}
	return nil
}

// write records next with the decision's state, sets the condition, and
// says what changed in an Event and the log.
func (c *Coordinator) write(ctx context.Context, node *corev1.Node, prev, next *Record, d Decision, status corev1.ConditionStatus, reason string) error {
	next.State, next.Reason, next.Message = d.State, reason, d.Message
	now := metav1.Time{Time: c.o.Clock.Now()}
	switch {
	case status == corev1.ConditionFalse:
		next.Since = nil
	case next.Since == nil:
		next.Since = &now
	}
	if c.o.Metrics != nil {
		c.o.Metrics.Observe(next)
	}
	if !recordEqual(prev, next) {
		if err := c.patchRecord(ctx, next); err != nil {
			return err
		}
	}
	if cond := condition(node); cond == nil || cond.Status != status || cond.Reason != reason || cond.Message != d.Message {
		if err := c.patchCondition(ctx, node, status, reason, d.Message, now); err != nil {
			return err
		}
	}
	if prev.Reason != reason {
		typ := corev1.EventTypeNormal
		switch reason {
		case string(Failed), string(RebootLoop), ReasonUnknown:
			typ = corev1.EventTypeWarning
		}
		c.event(typ, "Reboot"+reason, "%s", d.Message)
		c.log.Info("Reboot state changed", "from", prev.Reason, "to", reason, "message", d.Message)
	}
	return nil
}

func recordEqual(a, b *Record) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func (c *Coordinator) patchRecord(ctx context.Context, rec *Record) error {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{RecordAnnotation: rec.Encode()}}})
	if err != nil {
		return err
	}
	if _, err := c.o.Client.CoreV1().Nodes().Patch(ctx, c.o.NodeName, types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("writing the reboot record on Node %s: %w", c.o.NodeName, err)
	}
	return nil
}

func (c *Coordinator) removeRequest(ctx context.Context) error {
	b := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, RequestAnnotation))
	if _, err := c.o.Client.CoreV1().Nodes().Patch(ctx, c.o.NodeName, types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("removing the reboot request from Node %s: %w", c.o.NodeName, err)
	}
	return nil
}

func (c *Coordinator) patchCondition(ctx context.Context, node *corev1.Node, status corev1.ConditionStatus, reason, message string, now metav1.Time) error {
	transition := now
	if cond := condition(node); cond != nil && cond.Status == status && !cond.LastTransitionTime.IsZero() {
		transition = cond.LastTransitionTime
	}
	b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": ConditionType, "status": status, "reason": reason, "message": message,
		"lastHeartbeatTime": now, "lastTransitionTime": transition,
	}}}})
	if err != nil {
		return err
	}
	if _, err := c.o.Client.CoreV1().Nodes().PatchStatus(ctx, c.o.NodeName, b); err != nil {
		return fmt.Errorf("setting condition %s on Node %s: %w", ConditionType, c.o.NodeName, err)
	}
	return nil
}

func (c *Coordinator) event(typ, reason, format string, args ...any) {
	if c.o.Recorder == nil {
		return
	}
	c.o.Recorder.Eventf(&corev1.ObjectReference{Kind: "Node", Name: c.o.NodeName, UID: types.UID(c.o.NodeName)}, typ, reason, format, args...)
}

// FieldManager is the coordinator's field manager on the Node.
const FieldManager = "node-agent-reboot"

func condition(node *corev1.Node) *corev1.NodeCondition {
	i := slices.IndexFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == ConditionType })
	if i < 0 {
		return nil
	}
	return &node.Status.Conditions[i]
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
