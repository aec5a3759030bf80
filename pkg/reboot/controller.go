package reboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/events"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/metrics"
	"github.com/node-agent/node-agent/pkg/nodecondition"
	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/slots"
)

// Rebooter asks the host to reboot: logind's Reboot over D-Bus.
type Rebooter interface {
	Reboot(ctx context.Context) error
}

// BlockerSource finds blockers (PodBlockers, GateBlockers).
type BlockerSource interface {
	Blockers(ctx context.Context) []Blocker
}

// Maintenance is what the controller needs to know of the node's
// maintenance (pkg/selfdrain's record on the Node); handshake.Maintenance
// reads it, so that neither package imports the other.
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

// Observer is what the controller reports to Prometheus (*Metrics, metrics.go).
type Observer interface {
	Observe(rec *Record)
	Rebooted()
	DrainFailed()
	Loop()
}

// ControllerOptions configures a Controller.
type ControllerOptions struct {
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
	// PreferNoScheduleTaint is reboot.preferNoScheduleTaint: keep
	// PendingTaintKey on the Node while a reboot is needed and not done.
	// Off, the controller removes that taint where it finds it.
	PreferNoScheduleTaint bool
	// CheckInterval is reboot.checkInterval: how often the need and the
	// blockers are looked at when nothing else wakes the controller.
	CheckInterval time.Duration
	// SlotHoldBound is reboot.slotHoldBound: how long the slot stays held
	// while the host reboots; a node that is not back by then loses it.
	SlotHoldBound time.Duration
	// RetryReboot is how long after asking logind a host that has not
	// rebooted is asked again.
	RetryReboot time.Duration
	// BeforeRebootBound is reboot.beforeRebootBound.
	BeforeRebootBound time.Duration
	// BlockerBound is reboot.blockerBound, and ProceedPastBound says
	// reboot.onBlockerBound is proceed (Input).
	BlockerBound     time.Duration
	ProceedPastBound bool

	Slots Slots
	// Rebooter asks the host to reboot; the wiring marks the reboot as the
	// agent's own for the shutdown guard (handshake.OwnReboot).
	Rebooter Rebooter
	// Maintenance reads the node's maintenance (handshake.Maintenance).
	Maintenance func(node *corev1.Node) (Maintenance, error)

	Clock    clock.WithTicker
	Logger   *slog.Logger
	Recorder events.Recorder
	Metrics  Observer
	// WaitBound counts reboot.blockerBound running out; nil: not counted.
	WaitBound *metrics.WaitBound
}

// Controller reboots its node when the host needs it: it gathers the
// Input, asks Decide, and carries the Action out. One goroutine (Run) owns
// its state; the slot is waited for in another, which hands the slot back
// through a channel.
type Controller struct {
	o    ControllerOptions
	log  *slog.Logger
	wake chan struct{}

	// slot is the drain slot held, or nil.
	slot Slot
	// acquiring, when not nil, cancels the wait for a slot; got receives
	// its result.
	acquiring context.CancelFunc
	got       chan acquired
	// slotErr is the last error met while taking a slot, and slotQueue the
	// coordinator's last Queued answer, shown while the controller waits;
	// the waiting goroutine sets them, under mu.
	mu        sync.Mutex
	slotErr   error
	slotQueue string
	// badRecord is the last malformed record reported.
	badRecord string
	// badRequest is the last refused request value reported; "" once the
	// value is accepted again.
	badRequest string
	// replaced is the record value the last write replaced, at wroteAt;
	// nil once the cache showed another (behind).
	replaced *string
	wroteAt  time.Time
}

type acquired struct {
	slot Slot
	err  error
}

// NewController returns a controller for o.
func NewController(o ControllerOptions) *Controller {
	if o.RetryReboot <= 0 {
		o.RetryReboot = 5 * time.Minute
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = time.Minute
	}
	return &Controller{o: o, log: o.Logger, wake: make(chan struct{}, 1), got: make(chan acquired, 1)}
}

// Name implements agent.Component.
func (c *Controller) Name() string { return "reboot" }

func (c *Controller) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run implements agent.Component: it decides on every change of the Node,
// on every CheckInterval, and when a slot is taken.
func (c *Controller) Run(ctx context.Context, view agent.NodeView) error {
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
			c.log.Info("Holding a drain slot for the reboot", "slot", a.slot.Name())
		case <-c.slotLost():
			c.loseSlot()
		}
		node, err := view.Get()
		if err != nil {
			continue
		}
		if err := c.step(ctx, node); err != nil && ctx.Err() == nil {
			c.log.Warn("Reboot controller step failed; trying again", "err", err)
		}
	}
}

// stop ends a wait for a slot and stops renewing the one held; a slot kept
// across the reboot stays held (Slot.Release).
func (c *Controller) stop() { c.dropSlot() }

// step looks at the node once and moves the reboot on, in named steps: read
// the record, observe what happened since the last step, report a refused
// request, gather the Input, ask Decide, apply its Action, write the
// Decision, and keep the reboot-pending taint as it says. Every choice is
// Decide's; the steps only find out and carry out.
func (c *Controller) step(ctx context.Context, node *corev1.Node) error {
	rec, ok := c.readRecord(node)
	if !ok {
		return nil
	}
	m, err := c.o.Maintenance(node)
	if err != nil {
		return fmt.Errorf("reading the node's maintenance: %w", err)
	}
	next := c.observe(node, rec, m)
	c.reportRefusal(node, &next)
	d := Decide(c.gather(ctx, node, &next, m))
	if d, err = c.apply(ctx, node, &next, d); err != nil {
		return err
	}
	if next.Phase != PhaseDrained {
		// Kept only while the drained node waits (observe).
		next.DrainedAt = nil
	}
	if err := c.write(ctx, node, rec, &next, d); err != nil {
		return err
	}
	return c.keepPendingTaint(ctx, node, d)
}

// readRecord reads the record on node; ok is false when the step must do
// nothing: the record is malformed (bad input changes nothing: the record
// says what this node did, and acting on a guess could reboot it twice), or
// the cache is behind the controller's last write.
func (c *Controller) readRecord(node *corev1.Node) (_ *Record, ok bool) {
	raw := node.Annotations[RecordAnnotation]
	if c.behind(raw) {
		return nil, false
	}
	rec, err := ParseRecord(node)
	if err != nil {
		if raw != c.badRecord {
			c.badRecord = raw
			c.log.Error("Malformed reboot record; the controller does nothing until it is fixed or deleted", "err", err)
			c.event(corev1.EventTypeWarning, "MalformedRebootRecord", "%v", err)
		}
		return nil, false
	}
	if rec == nil {
		rec = &Record{State: NotNeeded, Reason: string(NotNeeded)}
	}
	return rec, true
}

// behind says the cached Node still shows the record the controller's last
// write replaced. A step on it would carry out the last step's Action again
// (give up one attempt twice, count one reboot twice); the write's own
// update of the Node wakes the next step. The guard lasts at most one
// CheckInterval, so that a record set back to that value by someone else is
// not ignored for ever.
func (c *Controller) behind(raw string) bool {
	if c.replaced == nil {
		return false
	}
	if raw == *c.replaced && c.o.Clock.Since(c.wroteAt) < c.o.CheckInterval {
		return true
	}
	c.replaced = nil
	return false
}

// observe is the record after what happened since the last step: the
// reboot's drain finished or timed out, or the host came back (Advance).
func (c *Controller) observe(node *corev1.Node, rec *Record, m Maintenance) Record {
	next := *rec
	boot := node.Status.NodeInfo.BootID
	next.Phase = rec.Phase.Advance(m, boot != "" && boot != rec.BootID)
	switch {
	case next.Phase != PhaseDrained:
		next.DrainedAt = nil
	case rec.Phase != PhaseDrained || next.DrainedAt == nil:
		next.DrainedAt = &metav1.Time{Time: c.o.Clock.Now()}
	}
	if next.Phase == PhaseBack && rec.Phase != PhaseBack {
		next.LastReboot = &metav1.Time{Time: c.o.Clock.Now()}
		c.log.Info("The host rebooted", "bootID", boot, "requestedAt", rec.RequestedAt)
		if c.o.Metrics != nil {
			c.o.Metrics.Rebooted()
		}
	}
	return next
}

// gather finds out what Decide needs: the need, the request, the slot, the
// blockers (only when Decide wants them), and the record.
func (c *Controller) gather(ctx context.Context, node *corev1.Node, rec *Record, m Maintenance) Input {
	need, needErr := c.o.Need.Check(ctx)
	request, refusal := ParseRequest(node)
	in := Input{
		Now: c.o.Clock.Now(), Need: need, NeedErr: needErr,
		Request: request, RequestRefused: refusal != nil,
		Window:   c.o.Window,
		SlotHeld: c.slot != nil, SlotWaiting: c.acquiring != nil, SlotQueue: c.lastSlotQueue(), SlotErr: c.lastSlotErr(),
		Phase: rec.Phase, Drain: rec.Drain, Previous: rec.State, PreviousMessage: rec.Message,
		// Cut as the request is: a record an older agent wrote holds it
		// whole.
		Failure:     Failure{Count: rec.DrainFailures, Request: reasontext.ForNode(rec.FailedRequest, reasontext.MaxReason)},
		Maintenance: m, NodeReady: nodeReady(node),
		LoopBound: c.o.LoopBound, RebootWithoutDrain: c.o.RebootWithoutDrain, RetryReboot: c.o.RetryReboot,
		CheckInterval: c.o.CheckInterval, BeforeRebootBound: c.o.BeforeRebootBound,
		BlockerBound: c.o.BlockerBound, ProceedPastBound: c.o.ProceedPastBound,
	}
	if rec.BlockedSince != nil {
		in.BlockedSince = rec.BlockedSince.Time
	}
	if rec.DrainedAt != nil {
		in.DrainedAt = rec.DrainedAt.Time
	}
	if rec.RequestedAt != nil {
		in.RequestedAt = rec.RequestedAt.Time
	}
	if rec.LastReboot != nil {
		in.Last = LastReboot{At: rec.LastReboot.Time, SentinelSurvived: rec.SentinelSurvived}
	}
	if rec.FailedAt != nil {
		in.Failure.At = rec.FailedAt.Time
	}
	if rec.RetryAt != nil {
		in.Failure.RetryAt = rec.RetryAt.Time
	}
	if in.WantsBlockers() {
		for _, b := range c.o.Blockers {
			in.Blockers = append(in.Blockers, b.Blockers(ctx)...)
		}
	}
	return in
}

// reportRefusal reports a value of RequestAnnotation on node that is
// refused (reasontext.ParseRequest: it reads as no, such as "false"), once
// for each value, with a Warning Event on the Node that says what is
// accepted. Decide lets it change nothing (Input.RequestRefused).
func (c *Controller) reportRefusal(node *corev1.Node, rec *Record) {
	_, refusal := ParseRequest(node)
	var re *reasontext.RefusedError
	if !errors.As(refusal, &re) {
		c.badRequest = ""
		return
	}
	if re.Value == c.badRequest {
		return
	}
	c.badRequest = re.Value
	then := "no reboot starts for it"
	if rec.Phase != PhaseIdle && rec.Phase != PhaseWaitingForSlot {
		then = "the reboot under way goes on"
	}
	c.log.Warn("Reboot request refused; it changes nothing", "err", refusal)
	c.event(corev1.EventTypeWarning, "RebootRequestRefused", "%v. Nothing changed: %s", refusal, then)
}

// apply carries d out: it answers the request, changes the slot, the host
// and next as d.Action says (see Action), and records d's Last and Failure.
// A reboot logind refused is not an error of the step: d's message says so,
// and Decide asks again at a later step.
func (c *Controller) apply(ctx context.Context, node *corev1.Node, next *Record, d Decision) (Decision, error) {
	if d.AnswerRequest {
		// First: a step that fails here changes nothing, and the next one
		// decides the same again.
		if err := c.removeRequest(ctx); err != nil {
			return d, err
		}
	}
	switch d.Action {
	case ActTakeSlot:
		next.Phase = PhaseWaitingForSlot
		c.acquire(ctx)
	case ActTakeSlotBack:
		c.acquire(ctx)
	case ActReleaseSlot:
		c.releaseSlot(next)
		next.Phase = PhaseIdle
	case ActStartDrain:
		next.Phase, next.Drain, next.Slot = PhaseDraining, true, c.slot.Name()
	case ActCancelDrain:
		next.Phase, next.Drain = PhaseIdle, false
		c.event(corev1.EventTypeNormal, "RebootCancelled", "%s", d.Message)
	case ActReboot:
		if err := c.reboot(ctx, node, next); err != nil {
			d.Message += "; the reboot could not be asked for: " + err.Error() + "; trying again"
		}
	case ActGiveUp:
		next.Phase, next.Drain = PhaseIdle, false
		c.releaseSlot(next)
		if c.o.Metrics != nil {
			c.o.Metrics.DrainFailed()
		}
	case ActUndoDrain:
		next.Drain = false
	case ActFinish:
		next.Drain = false
		c.releaseSlot(next)
		next.Phase, next.RequestedAt, next.BootID = PhaseIdle, nil, ""
		if c.o.Metrics != nil && d.State == RebootLoop {
			c.o.Metrics.Loop()
		}
	}
	next.SentinelSurvived = d.Last.SentinelSurvived
	next.FailedAt, next.RetryAt = optionalTime(d.Failure.At), optionalTime(d.Failure.RetryAt)
	next.DrainFailures, next.FailedRequest = d.Failure.Count, d.Failure.Request
	return d, nil
}

// acquire starts waiting for a slot, unless a wait is under way.
func (c *Controller) acquire(ctx context.Context) {
	if c.acquiring != nil {
		return
	}
	actx, cancel := context.WithCancel(ctx)
	c.acquiring = cancel
	c.setSlotErr(nil)
	c.setSlotQueue("")
	go func() {
		s, err := c.o.Slots.Acquire(actx, slots.PurposeReboot, func(err error) {
			// The coordinator's Queued answer is a wait, not a failure to
			// take a slot: the message says what the reboot waits behind.
			if q, queued := errors.AsType[slots.QueueWait](err); queued {
				c.setSlotQueue(q.Reason)
				err = nil
			}
			c.setSlotErr(err)
			c.poke()
		})
		c.got <- acquired{slot: s, err: err}
	}()
}

func (c *Controller) setSlotQueue(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slotQueue = reason
}

func (c *Controller) lastSlotQueue() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slotQueue
}

func (c *Controller) setSlotErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slotErr = err
}

func (c *Controller) lastSlotErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slotErr
}

// slotLost is closed when the slot held was taken back; nil while none is
// held.
func (c *Controller) slotLost() <-chan struct{} {
	if c.slot == nil {
		return nil
	}
	return c.slot.Lost()
}

// loseSlot lets go of a slot that was taken back (held past its bound, or
// its agent found silent for a while). The record still says the reboot
// holds one, so the next step takes it back (ActTakeSlotBack), as after a
// restart: the reboot's drain, which drains only in this slot, waits
// meanwhile, and no reboot is asked for without it. Kept, the lost slot
// left the drain waiting for ever.
func (c *Controller) loseSlot() {
	c.log.Warn("The drain slot was taken back; asking for it again", "slot", c.slot.Name(), "reason", c.slot.LostReason())
	c.event(corev1.EventTypeWarning, "DrainSlotLost", "The drain slot %s was taken back: %s; the reboot asks for it again", c.slot.Name(), c.slot.LostReason())
	c.dropSlot()
}

// releaseSlot stops waiting for a slot and gives back the one held.
func (c *Controller) releaseSlot(rec *Record) {
	c.dropSlot()
	rec.Slot = ""
}

// dropSlot ends a wait for a slot, and releases the slot held (which, once
// kept across the reboot, only stops renewing it).
func (c *Controller) dropSlot() {
	if c.acquiring != nil {
		c.acquiring()
		if a := <-c.got; a.slot != nil {
			a.slot.Release()
		}
		c.acquiring = nil
	}
	if c.slot != nil {
		c.slot.Release()
		c.log.Info("Released the drain slot", "slot", c.slot.Name())
		c.slot = nil
	}
}

// reboot keeps the slot across the reboot, records the request, and asks
// the host to reboot. The record is written before logind is asked, so the
// agent after the reboot knows that it asked.
func (c *Controller) reboot(ctx context.Context, node *corev1.Node, rec *Record) error {
	boot := node.Status.NodeInfo.BootID
	if boot == "" {
		return errors.New("the Node reports no status.nodeInfo.bootID, so the controller could not tell that the host rebooted; not rebooting")
	}
	if c.slot == nil {
		return errors.New("the drain slot is not held (taking it back after a restart); not rebooting without it")
	}
	if err := c.slot.KeepAcrossReboot(ctx, c.o.SlotHoldBound); err != nil {
		return fmt.Errorf("keeping the drain slot across the reboot: %w", err)
	}
	now := metav1.Time{Time: c.o.Clock.Now()}
	rec.Phase, rec.BootID, rec.RequestedAt = PhaseRebootRequested, boot, &now
	if err := c.patchRecord(ctx, node, rec); err != nil {
		return err
	}
	c.event(corev1.EventTypeNormal, "Rebooting", "Asking logind to reboot the host (boot %s); the drain slot %s stays held for up to %s", boot, c.slot.Name(), c.o.SlotHoldBound)
	c.log.Info("Rebooting the host", "bootID", boot, "slot", c.slot.Name(), "slotHoldBound", c.o.SlotHoldBound)
	if err := c.o.Rebooter.Reboot(ctx); err != nil {
		c.event(corev1.EventTypeWarning, "RebootRefused", "logind refused the reboot: %v", err)
		return fmt.Errorf("asking logind to reboot: %w", err)
	}
	return nil
}

// write records next with the decision's state, sets the condition, and
// says what changed in an Event and the log.
func (c *Controller) write(ctx context.Context, node *corev1.Node, prev, next *Record, d Decision) error {
	// Cut as the record and the condition keep it, so that a long message
	// compares equal to what they hold and is not written again each step.
	d.Message = reasontext.ForNode(d.Message, reasontext.MaxMessage)
	status, reason := d.Status, d.Reason()
	next.State, next.Reason, next.Message = d.State, reason, d.Message
	next.BlockedSince, next.BoundExceeded = nil, d.BoundExceeded
	if !d.BlockedSince.IsZero() {
		next.BlockedSince = &metav1.Time{Time: d.BlockedSince}
	}
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
		if err := c.patchRecord(ctx, node, next); err != nil {
			return err
		}
	}
	if cond := condition(node); cond == nil || cond.Status != status || cond.Reason != reason || cond.Message != d.Message {
		if err := c.patchCondition(ctx, node, status, reason, d.Message, now); err != nil {
			return err
		}
	}
	c.o.WaitBound.Hold(metrics.WaitRebootBlockers, d.BoundExceeded == BoundWait)
	if d.BoundExceeded != "" && prev.BoundExceeded != d.BoundExceeded {
		// Once per decision: the bound ran out (or the decision changed
		// with the configuration), not at every check past it.
		c.o.WaitBound.Ran(metrics.WaitRebootBlockers, d.BoundExceeded)
		c.event(corev1.EventTypeWarning, "RebootBlockerBoundExceeded", "%s", d.Message)
		c.log.Warn("Blockers held the reboot past reboot.blockerBound", "decision", d.BoundExceeded, "message", d.Message)
	}
	if prev.Reason != reason {
		typ := corev1.EventTypeNormal
		switch reason {
		case string(DrainFailed), string(RebootLoop), ReasonUnknown:
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

// patchRecord writes rec on the Node that node is the cached copy of, and
// remembers the record it replaced (behind).
func (c *Controller) patchRecord(ctx context.Context, node *corev1.Node, rec *Record) error {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{RecordAnnotation: rec.Encode()}}})
	if err != nil {
		return err
	}
	if _, err := c.o.Client.CoreV1().Nodes().Patch(ctx, c.o.NodeName, types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("writing the reboot record on Node %s: %w", c.o.NodeName, err)
	}
	replaced := node.Annotations[RecordAnnotation]
	c.replaced, c.wroteAt = &replaced, c.o.Clock.Now()
	return nil
}

func (c *Controller) removeRequest(ctx context.Context) error {
	b := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, RequestAnnotation))
	if _, err := c.o.Client.CoreV1().Nodes().Patch(ctx, c.o.NodeName, types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("removing the reboot request from Node %s: %w", c.o.NodeName, err)
	}
	return nil
}

func (c *Controller) patchCondition(ctx context.Context, node *corev1.Node, status corev1.ConditionStatus, reason, message string, now metav1.Time) error {
	_, err := nodecondition.Set(ctx, c.o.Client.CoreV1().Nodes(), c.o.NodeName, node, ConditionType, status, reason, message, now)
	return err
}

// event records an Event on the Node, its message cut to
// reasontext.MaxMessage: it may quote the request's reason.
func (c *Controller) event(typ, reason, format string, args ...any) {
	if c.o.Recorder == nil {
		return
	}
	c.o.Recorder.Event(kube.NodeReference(c.o.NodeName), typ, reason,
		reasontext.ForNode(fmt.Sprintf(format, args...), reasontext.MaxMessage))
}

// FieldManager is the controller's field manager on the Node.
const FieldManager = "node-agent-reboot"

func condition(node *corev1.Node) *corev1.NodeCondition {
	i := slices.IndexFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == ConditionType })
	if i < 0 {
		return nil
	}
	return &node.Status.Conditions[i]
}

func optionalTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t}
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
