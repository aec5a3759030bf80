package slots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/kube"
)

// ErrNoAnswer says that no coordinator answered a request in time.
var ErrNoAnswer = errors.New("no drain slot coordinator answered the request; check that node-agent-coordinator runs (kubectl -n node-agent get deployment node-agent-coordinator) and reads this node")

// DefaultRefusedRetry is Requester.RefusedRetry's default: a purpose the
// coordinator refuses stays off until an admin changes its configuration and
// restarts it, so asking again sooner would only be refused again.
const DefaultRefusedRetry = 5 * time.Minute

// The timings of an agent's requests, as NewRequester sets them.
const (
	// DefaultNoAnswerAfter: a coordinator that answers no request for this
	// long is reported as missing (ErrNoAnswer) to the waiting drain, which
	// says so on the Node; it answers within a second or two when it runs.
	DefaultNoAnswerAfter = 30 * time.Second
	// DefaultClaimGrace: a request left on the Node from before a restart
	// that no part of the agent asks for again within this long (the
	// maintenance ended while the agent was down) is withdrawn; the
	// components that would claim it start within seconds.
	DefaultClaimGrace = 2 * time.Minute
	// renewsPerHeartbeatBound: a held slot's request shows the agent alive
	// this many times per slots.heartbeatBound, so that one or two lost
	// renewals do not cost the slot.
	renewsPerHeartbeatBound = 3
)

// NewRequester is the requester of node's agent: it renews a held slot
// renewsPerHeartbeatBound times per heartbeatBound (slots.heartbeatBound, the
// coordinator's patience with an agent whose heartbeat stops), and waits DefaultNoAnswerAfter
// and DefaultClaimGrace.
func NewRequester(client kube.Interface, node string, heartbeatBound time.Duration, clk clock.WithTicker, log *slog.Logger) *Requester {
	return &Requester{
		Client: client, NodeName: node, RenewInterval: heartbeatBound / renewsPerHeartbeatBound,
		NoAnswerAfter: DefaultNoAnswerAfter, ClaimGrace: DefaultClaimGrace, Clock: clk, Logger: log,
	}
}

// Requester is the agent's side of the drain slots, for its own Node. It is
// an agent component (Run), shared by every part of the agent that drains:
// Acquire asks for a slot for one purpose at a time, so the node never
// holds two and one purpose never adopts the other's slot.
type Requester struct {
	Client   kube.Interface
	NodeName string
	// RenewInterval is how often a held slot's request shows the agent
	// alive (a third of slots.heartbeatBound).
	RenewInterval time.Duration
	// NoAnswerAfter is how long a request may go unanswered before the
	// waiting caller is told (ErrNoAnswer).
	NoAnswerAfter time.Duration
	// RefusedRetry is how long the agent waits after a refused request
	// (Grant.Refused) before it asks again; 0: DefaultRefusedRetry.
	RefusedRetry time.Duration
	// ClaimGrace is how long after the start a request that no part of
	// this agent asks for again (a maintenance that ended while the agent
	// was down) stays on the Node before it is withdrawn.
	ClaimGrace time.Duration
	Clock      clock.WithTicker
	Logger     *slog.Logger

	once  sync.Once
	ready chan struct{}

	mu   sync.Mutex
	view agent.NodeView
	// running is Run's context, the agent's: once it ends, the agent
	// stops (stopping).
	running context.Context
	// changed is closed (and replaced) on every change of the Node.
	changed chan struct{}
	// owner is the purpose that asks now, "" for none.
	owner Purpose
	// held is the slot held, nil for none.
	held *Held
}

func (r *Requester) init() {
	r.once.Do(func() {
		r.ready = make(chan struct{})
		r.changed = make(chan struct{})
		if r.Logger == nil {
			r.Logger = slog.Default()
		}
	})
}

// Name implements agent.Component.
func (r *Requester) Name() string { return "slots" }

// Run implements agent.Component: it follows the Node, renews the request of
// a held slot, and withdraws a request no part of the agent claims within
// ClaimGrace of the start. ctx is the agent's: when it ends, the agent stops,
// and the request on the Node stays for the agent that comes next
// (stopping).
func (r *Requester) Run(ctx context.Context, view agent.NodeView) error {
	r.init()
	if err := view.AddHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.notify() },
		UpdateFunc: func(_, _ any) { r.notify() },
	}); err != nil {
		return err
	}
	r.mu.Lock()
	r.view, r.running = view, ctx
	r.mu.Unlock()
	close(r.ready)
	renew := r.Clock.NewTicker(r.RenewInterval)
	defer renew.Stop()
	grace := r.Clock.After(r.ClaimGrace)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-grace:
			grace = nil
			r.withdrawUnclaimed(ctx)
		case <-renew.C():
			r.renew(ctx)
		}
	}
}

func (r *Requester) notify() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	h := r.held
	r.mu.Unlock()
	if h != nil {
		h.check()
	}
}

// state reads the request and the grant on the Node, with a channel that is
// closed at the Node's next change.
func (r *Requester) state() (*Request, *Grant, <-chan struct{}, error) {
	req, g, _, changed, err := r.stateRV()
	return req, g, changed, err
}

// stateRV is state with the Node's resourceVersion.
func (r *Requester) stateRV() (*Request, *Grant, string, <-chan struct{}, error) {
	r.mu.Lock()
	view, changed := r.view, r.changed
	r.mu.Unlock()
	node, err := view.Get()
	if err != nil {
		return nil, nil, "", changed, err
	}
	req, err := ParseRequest(node)
	if err != nil {
		// Ours to write: a malformed one is replaced.
		req = nil
	}
	g, _ := ParseGrant(node)
	return req, g, node.ResourceVersion, changed, nil
}

// Acquire waits until the node holds a slot for purpose, or ctx ends. A
// request of that purpose already on the Node (from before a restart or
// the reboot) is taken up again, with its place in the queue or its slot.
// onWait is called with a QueueWait whenever the coordinator's answer to a
// request that waits in its queue changes, with nil once the request waits
// behind this node's other purpose, and with an error whenever the request
// cannot be written or no coordinator answers it.
func (r *Requester) Acquire(ctx context.Context, purpose Purpose, onWait func(error)) (Slot, error) {
	r.init()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.ready:
	}
	report := func(err error) {
		if onWait != nil {
			onWait(err)
		}
	}
	waited := false
	// Wait until no other purpose of this node asks.
	for {
		r.mu.Lock()
		if r.owner == "" || r.owner == purpose {
			r.owner = purpose
			r.mu.Unlock()
			break
		}
		changed := r.changed
		r.mu.Unlock()
		if !waited {
			waited = true
			report(nil)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
	h, err := r.await(ctx, purpose, report)
	if err != nil {
		r.giveUp(purpose)
		return nil, err
	}
	return h, nil
}

func (r *Requester) await(ctx context.Context, purpose Purpose, report func(error)) (*Held, error) {
	asked := r.Clock.Now()
	var lastErr string
	// told is the Queued answer last passed to report.
	var told *Grant
	// pausedFor is the refused request this call has waited out.
	var pausedFor string
	for {
		req, g, rv, changed, err := r.stateRV()
		r.Logger.Debug("Drain slot request", "purpose", purpose, "request", req, "grant", g, "rv", rv, "err", err)
		switch {
		case err != nil:
			// The agent's own Node is not in its cache yet.
		case g.Answers(req) && req.Purpose == purpose && g.State == Revoked && g.Refused && pausedFor != req.ID:
			pause := r.RefusedRetry
			if pause <= 0 {
				pause = DefaultRefusedRetry
			}
			r.Logger.Warn("The coordinator refused the drain slot request; asking again later", "purpose", purpose, "reason", g.Reason, "retry", pause)
			report(fmt.Errorf("node-agent-coordinator refused the %s drain slot: %s; asking again in %s", purpose, g.Reason, pause))
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-r.Clock.After(pause):
			}
			pausedFor = req.ID
			continue
		case req == nil || req.Purpose != purpose || (g.Answers(req) && g.State == Revoked):
			if g.Answers(req) && g.State == Revoked {
				r.Logger.Warn("The drain slot was revoked; asking again", "reason", g.Reason)
			}
			now := r.Clock.Now()
			next := &Request{Purpose: purpose, ID: strconv.FormatInt(now.UnixNano(), 36), RequestedAt: now.UTC().Truncate(time.Second)}
			if err := r.write(ctx, req, next); err != nil {
				if r.raced(rv, req) {
					// The Node changed since it was read (the
					// patch tests the old value): read it again.
					continue
				}
				if msg := err.Error(); msg != lastErr {
					lastErr = msg
					report(err)
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-r.Clock.After(2 * time.Second):
				}
				continue
			}
			asked, lastErr = now, ""
			r.Logger.Info("Asked for a drain slot", "purpose", purpose, "id", next.ID)
			// Read on once the cache shows the write, so that a stale
			// view never asks twice.
			r.raced(rv, req)
			continue
		case g.Answers(req) && g.State == Granted:
			h := &Held{r: r, purpose: purpose, req: *req, slot: g.Slot, lost: make(chan struct{})}
			r.mu.Lock()
			r.held = h
			r.mu.Unlock()
			r.Logger.Info("Holding a drain slot", "purpose", purpose, "slot", g.Slot)
			return h, nil
		case g.Answers(req) && g.State == Queued:
			if told == nil || told.ID != g.ID || told.Reason != g.Reason {
				told = g
				report(QueueWait{Reason: g.Reason})
			}
		default:
			if r.Clock.Since(asked) >= r.NoAnswerAfter {
				if lastErr != ErrNoAnswer.Error() {
					lastErr = ErrNoAnswer.Error()
					report(fmt.Errorf("%w (asked %s ago)", ErrNoAnswer, r.Clock.Since(asked).Round(time.Second)))
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		case <-r.Clock.After(r.NoAnswerAfter):
		}
	}
}

// raced reports whether the Node changed since the agent read it (its
// resourceVersion rv, and the request old on it), so that a write
// conditional on what it read failed only because it was stale. It waits
// briefly for the agent's cache to catch up with the apiserver.
func (r *Requester) raced(rv string, old *Request) bool {
	for range 20 {
		cur, _, curRV, changed, err := r.stateRV()
		if err == nil && (curRV != rv || cur.Encode() != old.Encode()) {
			return true
		}
		select {
		case <-changed:
		case <-r.Clock.After(100 * time.Millisecond):
		}
	}
	return false
}

// stopping reports whether the agent stops (Run's context ended). A request
// is then left on the Node as it is, with its place in the queue or its
// slot: the agent that comes next takes it up again (Acquire), and if none
// comes, the coordinator gives the slot to the next node once the request has
// gone without a heartbeat for slots.heartbeatBound. Every caller's context
// derives from the agent's, which ends before theirs do, so a caller that
// stops because the agent stops finds stopping true.
func (r *Requester) stopping() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running != nil && r.running.Err() != nil
}

// giveUp withdraws purpose's request after its caller stopped waiting,
// unless the agent stops.
func (r *Requester) giveUp(purpose Purpose) {
	if r.stopping() {
		r.Logger.Info("The agent stops; its request for a drain slot stays on the Node, with its place in the queue, for the agent that comes next", "purpose", purpose)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if req, _, _, err := r.state(); err == nil && req != nil && req.Purpose == purpose {
		if err := r.withdraw(ctx, req); err != nil {
			r.Logger.Warn("Could not withdraw the request for a drain slot; the coordinator takes it back once its heartbeat stops", "err", err)
		}
	}
	r.mu.Lock()
	if r.owner == purpose {
		r.owner = ""
	}
	r.mu.Unlock()
	r.notify()
}

// withdrawUnclaimed removes a request that no part of the agent asked for
// since the start.
func (r *Requester) withdrawUnclaimed(ctx context.Context) {
	r.mu.Lock()
	owner := r.owner
	r.mu.Unlock()
	if owner != "" {
		return
	}
	req, _, _, err := r.state()
	if err != nil || req == nil {
		return
	}
	r.Logger.Info("Withdrawing a request for a drain slot that nothing on this node asks for any longer", "purpose", req.Purpose, "id", req.ID)
	if err := r.withdraw(ctx, req); err != nil {
		r.Logger.Warn("Could not withdraw the request for a drain slot", "err", err)
	}
}

// renew shows the holder alive: a new heartbeat in its request.
func (r *Requester) renew(ctx context.Context) {
	r.mu.Lock()
	h := r.held
	r.mu.Unlock()
	if h == nil {
		return
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return
	}
	cur := h.req
	next := cur
	next.Heartbeat++
	if !h.kept {
		// Back from the reboot: the heartbeat goes on.
		next.HoldSeconds = 0
	}
	h.mu.Unlock()
	if err := r.write(ctx, &cur, &next); err != nil {
		// The value on the Node may have changed since (the same
		// request renewed by an earlier holder in this process, or by
		// the agent before a restart): take it up from the apiserver,
		// not the cache, so that the next renewal tests the right value.
		if stored, ferr := r.fresh(ctx); ferr == nil && stored != nil && stored.ID == cur.ID {
			h.mu.Lock()
			h.req = *stored
			h.mu.Unlock()
		}
		r.Logger.Warn("Could not renew the drain slot's request", "err", err)
		return
	}
	h.mu.Lock()
	h.req = next
	h.mu.Unlock()
}

// fresh reads the node's request from the apiserver rather than the cache.
func (r *Requester) fresh(ctx context.Context) (*Request, error) {
	node, err := r.Client.CoreV1().Nodes().Get(ctx, r.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", r.NodeName, err)
	}
	req, err := ParseRequest(node)
	if err != nil {
		return nil, nil // malformed: ours to replace, nothing to release
	}
	return req, nil
}

// withdraw removes the request req, as the agent's cache shows it. The
// patch tests that value, so when the cache lags the Node (a heartbeat
// written since, say) it fails; the request is then read from the apiserver
// and removed if it is still req's (the same ID). One an admin withdrew or
// a new request is left alone.
func (r *Requester) withdraw(ctx context.Context, req *Request) error {
	err := r.write(ctx, req, nil)
	if err == nil {
		return nil
	}
	cur, ferr := r.fresh(ctx)
	if ferr != nil {
		return errors.Join(err, ferr)
	}
	if cur == nil || cur.ID != req.ID {
		return nil
	}
	return r.write(ctx, cur, nil)
}

// write replaces the request old (nil: none) with next (nil: remove it),
// atomically: a JSON patch that first tests the old value, so a request an
// admin withdrew or another writer changed is never written back.
func (r *Requester) write(ctx context.Context, old, next *Request) error {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(RequestAnnotation, "~", "~0"), "/", "~1")
	var ops []map[string]any
	switch {
	case old == nil && next != nil:
		// Only if the Node is still as this agent saw it (no request,
		// or a malformed one): a merge patch that names the Node's
		// resourceVersion fails with a conflict otherwise.
		node, err := r.view.Get()
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": node.ResourceVersion,
			"annotations":     map[string]string{RequestAnnotation: next.Encode()},
		}})
		if err != nil {
			return err
		}
		if _, err := r.Client.CoreV1().Nodes().Patch(ctx, r.NodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager + "-agent"}); err != nil {
			return fmt.Errorf("writing the drain slot request on Node %s: %w", r.NodeName, err)
		}
		return nil
	case old != nil:
		ops = append(ops, map[string]any{"op": "test", "path": path, "value": old.Encode()})
		if next == nil {
			ops = append(ops, map[string]any{"op": "remove", "path": path})
		} else {
			ops = append(ops, map[string]any{"op": "replace", "path": path, "value": next.Encode()})
		}
	default:
		return nil
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if _, err := r.Client.CoreV1().Nodes().Patch(ctx, r.NodeName, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager + "-agent"}); err != nil {
		return fmt.Errorf("writing the drain slot request on Node %s: %w", r.NodeName, err)
	}
	return nil
}

// Held is a slot the node holds for one purpose.
type Held struct {
	r       *Requester
	purpose Purpose
	slot    string
	lost    chan struct{}

	// wmu makes the writes of the request (renewal, reboot, release) one
	// at a time, each from the value the last one wrote.
	wmu sync.Mutex

	mu       sync.Mutex
	req      Request
	kept     bool
	released bool
	lostOnce sync.Once
	reason   string
}

// Name is the slot Lease's name.
func (h *Held) Name() string { return h.slot }

// Lost is closed when the slot is no longer held although Release was not
// called: the coordinator revoked it, or an admin withdrew the request.
func (h *Held) Lost() <-chan struct{} { return h.lost }

// LostReason says why the slot was lost, once Lost is closed.
func (h *Held) LostReason() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reason
}

// check closes Lost when the Node no longer shows this slot granted.
func (h *Held) check() {
	req, g, _, err := h.r.state()
	if err != nil {
		return
	}
	h.mu.Lock()
	id, released := h.req.ID, h.released
	h.mu.Unlock()
	if released {
		return
	}
	var why string
	switch {
	case req == nil || req.ID != id:
		why = "the request for the drain slot was withdrawn from the Node"
	case g != nil && g.ID == id && g.State == Revoked:
		why = "the coordinator took the drain slot back: " + g.Reason
	default:
		return
	}
	h.lostOnce.Do(func() {
		h.mu.Lock()
		h.reason = why
		h.mu.Unlock()
		h.r.Logger.Warn("Lost the drain slot", "purpose", h.purpose, "slot", h.slot, "reason", why)
		close(h.lost)
	})
}

// KeepAcrossReboot tells the coordinator that the host is about to reboot and
// that its agent will send no heartbeat for up to d: the slot stays held that long
// (never longer than the coordinator's own reboot.slotHoldBound), and
// Release then keeps it. The agent after the reboot takes it up again
// (Acquire), or the coordinator gives it to the next node once d has passed.
func (h *Held) KeepAcrossReboot(ctx context.Context, d time.Duration) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.mu.Lock()
	cur := h.req
	h.mu.Unlock()
	next := cur
	next.Heartbeat++
	next.HoldSeconds = max(int64(d/time.Second), 1)
	if err := h.r.write(ctx, &cur, &next); err != nil {
		return err
	}
	h.mu.Lock()
	h.req, h.kept = next, true
	h.mu.Unlock()
	return nil
}

// Release gives the slot back by withdrawing the request, unless it is kept
// across a reboot or the agent stops (Requester.stopping): a drain or reboot
// cut short by the agent's restart goes on in the slot it held. It may be
// called more than once.
func (h *Held) Release() {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return
	}
	h.released = true
	kept, req := h.kept, h.req
	h.mu.Unlock()
	r := h.r
	if !kept && r.stopping() {
		r.Logger.Info("The agent stops; the drain slot stays with this node for the agent that comes next, or until the coordinator finds its heartbeat stopped", "purpose", h.purpose, "slot", h.slot)
		return
	}
	r.mu.Lock()
	if r.held == h {
		r.held = nil
	}
	if !kept && r.owner == h.purpose {
		r.owner = ""
	}
	r.mu.Unlock()
	if kept {
		r.Logger.Info("Drain slot stays held across the reboot", "slot", h.slot, "holdSeconds", req.HoldSeconds)
		return
	}
	defer r.notify()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.write(ctx, &req, nil); err != nil {
		// Written since as this process does not know it: remove it
		// if it is still this request; an admin's withdrawal or a new
		// request is left alone. Read from the apiserver: the cache may
		// be as stale as the value that failed.
		cur, gerr := r.fresh(ctx)
		if gerr != nil {
			r.Logger.Warn("Could not release the drain slot; the coordinator takes it back once this agent's heartbeat stops", "slot", h.slot, "err", errors.Join(err, gerr))
			return
		}
		if cur == nil || cur.ID != req.ID {
			r.Logger.Info("Drain slot request already gone or replaced; nothing to release", "slot", h.slot)
			return
		}
		if err := r.write(ctx, cur, nil); err != nil {
			r.Logger.Warn("Could not release the drain slot; the coordinator takes it back once this agent's heartbeat stops", "slot", h.slot, "err", err)
			return
		}
	}
	r.Logger.Info("Released drain slot", "purpose", h.purpose, "slot", h.slot)
}
