package selfdrain

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/kube"
)

// Slots bounds how many nodes drain at once across the cluster. Each slot is
// a coordination.k8s.io Lease named SlotPrefix<i>, i < Max; a node drains
// only while it holds one. A holder that stops renewing loses its slot after
// LeaseDuration, so a crashed agent cannot block the cluster for good, and a
// restarted agent gets its own slot back at once (the holder is the node).
type Slots struct {
	Client        kube.Interface
	Namespace     string
	Identity      string
	Max           int
	LeaseDuration time.Duration
	// PollInterval is how long a node waits before it tries again after an
	// error; otherwise a waiting node watches the Leases (AcquireHeld).
	PollInterval time.Duration
	// TakeJitter spreads the tries of the nodes that wait when a slot
	// comes free (see AcquireHeld); zero tries at once.
	TakeJitter time.Duration
	Clock      clock.WithTicker
	Logger     *slog.Logger
}

// SlotPrefix names the slot Leases.
const SlotPrefix = "node-agent-drain-slot-"

// Acquire blocks until this node holds a slot, or ctx ends. onWait is called
// with nil once when every slot is held by other nodes, and with the error
// after every round in which a slot could not even be checked (for example
// because drain.leaseNamespace does not exist), so the caller can say why the
// node waits. The returned release gives the slot back and stops renewing it.
func (s *Slots) Acquire(ctx context.Context, onWait func(err error)) (release func(), err error) {
	h, err := s.AcquireHeld(ctx, onWait)
	if err != nil {
		return nil, err
	}
	return h.Release, nil
}

// AcquireHeld is Acquire, returning the slot as a Held, which can also be
// kept across a reboot.
//
// A waiting node keeps one view of the slot Leases: it lists them once and
// follows them with one watch, and writes only when its view shows a slot
// free (no holder, or an expired one). A renewal of a held slot costs the
// waiters no request. When a slot comes free while several nodes wait, each
// waits a random part of TakeJitter before it tries, and drops its try when
// the watch shows the slot taken meanwhile: one node takes it and the rest
// stay quiet, instead of all of them writing at once and all but one
// failing.
func (s *Slots) AcquireHeld(ctx context.Context, onWait func(err error)) (*Held, error) {
	w := &slotWatch{s: s, onWait: onWait}
	for {
		h, err := w.round(ctx)
		if h != nil || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return h, nil
		}
		if err != nil {
			// Fail closed: a slot we cannot check is not ours. An error
			// is not cured by a change of a Lease; try again after a
			// pause.
			s.Logger.Warn("Cannot check drain slots", "namespace", s.Namespace, "err", err)
			if onWait != nil {
				onWait(err)
			}
			if err := s.pause(ctx); err != nil {
				return nil, err
			}
		}
		// Otherwise the watch ended: list and watch again.
	}
}

// slotWatch is one node's wait for a slot.
type slotWatch struct {
	s      *Slots
	onWait func(error)
	waited bool
	// view holds the slot Leases as last seen, by name.
	view map[string]*coordinationv1.Lease
	// lost holds, by name, the resourceVersion ("" for none yet) of each
	// slot this node tried to take and lost: it is not tried again while
	// the view still shows that version.
	lost map[string]string
}

func versionOf(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	return l.ResourceVersion
}

// round lists the slot Leases, takes a free one (its own first: a restarted
// agent gets its own slot back and never holds two), and otherwise watches
// until it can take one. It returns the slot, or the error that stopped
// it, or neither when the watch ended.
func (w *slotWatch) round(ctx context.Context) (*Held, error) {
	s := w.s
	leases := s.Client.CoordinationV1().Leases(s.Namespace)
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Leases in %s: %w", s.Namespace, err)
	}
	w.view = map[string]*coordinationv1.Lease{}
	for i := range list.Items {
		if l := &list.Items[i]; s.isSlot(l.Name) {
			w.view[l.Name] = l
		}
	}
	w.lost = map[string]string{}
	for name, l := range w.view {
		if ptr.Deref(l.Spec.HolderIdentity, "") == s.Identity {
			if written, ok, err := s.takeFrom(ctx, name, l); ok && err == nil {
				s.Logger.Info("Holding drain slot again", "lease", s.Namespace+"/"+name)
				return s.hold(ctx, name, written), nil
			}
		}
	}
	if h, err := w.tryFree(ctx); h != nil || err != nil {
		return h, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := leases.Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("watching Leases in %s: %w", s.Namespace, err)
	}
	defer watch.Stop()
	for {
		if !w.waited {
			w.waited = true
			if w.onWait != nil {
				w.onWait(nil)
			}
		}
		var expiry <-chan time.Time
		if at, ok := w.earliestExpiry(); ok {
			// A second past the expiry, so that it has passed on the
			// clock that expired compares with.
			expiry = s.Clock.After(at.Sub(s.Clock.Now()) + time.Second)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-expiry:
		case ev, ok := <-watch.ResultChan():
			if !ok || !w.apply(ev) {
				return nil, nil
			}
		}
		if len(w.free()) == 0 {
			continue
		}
		// A slot came free while others may wait too: wait a random
		// part of TakeJitter, following the watch, before trying.
		if s.TakeJitter > 0 {
			delay := s.Clock.After(time.Duration(rand.Int64N(int64(s.TakeJitter))))
		jitter:
			for {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-delay:
					break jitter
				case ev, ok := <-watch.ResultChan():
					if !ok || !w.apply(ev) {
						return nil, nil
					}
				}
			}
		}
		if h, err := w.tryFree(ctx); h != nil || err != nil {
			return h, err
		}
	}
}

// apply updates the view with a watch event; false when the watch failed.
func (w *slotWatch) apply(ev watch.Event) bool {
	switch ev.Type {
	case watch.Error:
		return false
	case watch.Deleted:
		if l, ok := ev.Object.(*coordinationv1.Lease); ok {
			delete(w.view, l.Name)
		}
	default:
		if l, ok := ev.Object.(*coordinationv1.Lease); ok && w.s.isSlot(l.Name) {
			w.view[l.Name] = l
		}
	}
	return true
}

// free lists the slots the view shows free: never created, without a
// holder, or expired. Each node starts at a slot of its own (a hash of its
// name), so nodes that look for a free slot at the same moment mostly try
// different ones instead of all racing for the first.
func (w *slotWatch) free() []string {
	var out []string
	h := fnv.New32a()
	h.Write([]byte(w.s.Identity))
	first := int(h.Sum32() % uint32(max(w.s.Max, 1)))
	for j := range w.s.Max {
		name := fmt.Sprintf("%s%d", SlotPrefix, (first+j)%w.s.Max)
		l := w.view[name]
		if v, tried := w.lost[name]; tried && v == versionOf(l) {
			continue
		}
		if l == nil || ptr.Deref(l.Spec.HolderIdentity, "") == "" || w.s.expired(l) {
			out = append(out, name)
		}
	}
	return out
}

// tryFree tries the first free slot of the view (each node starts at a slot
// of its own). A try that loses a race (the Lease changed or was created
// meanwhile) is no error, and ends the try: the watch brings the new state,
// and with it the next chance. Trying every free slot in turn after a lost
// race would have each of many nodes asked at once write up to Max times.
func (w *slotWatch) tryFree(ctx context.Context) (*Held, error) {
	free := w.free()
	if len(free) == 0 {
		return nil, nil
	}
	name := free[0]
	cur := w.view[name]
	written, ok, err := w.s.takeFrom(ctx, name, cur)
	if err != nil {
		return nil, err
	}
	if ok {
		w.s.Logger.Info("Holding drain slot", "lease", w.s.Namespace+"/"+name)
		return w.s.hold(ctx, name, written), nil
	}
	// Lost the race: another node wrote the slot. Not again until the
	// watch shows what it wrote.
	w.lost[name] = versionOf(cur)
	return nil, nil
}

// earliestExpiry is when the first held slot of the view expires, so that a
// holder that stopped renewing (and so sends no event) frees its slot.
func (w *slotWatch) earliestExpiry() (time.Time, bool) {
	var at time.Time
	for _, l := range w.view {
		if ptr.Deref(l.Spec.HolderIdentity, "") == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			continue
		}
		end := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		if at.IsZero() || end.Before(at) {
			at = end
		}
	}
	return at, !at.IsZero()
}

func (s *Slots) isSlot(name string) bool {
	for i := range s.Max {
		if name == fmt.Sprintf("%s%d", SlotPrefix, i) {
			return true
		}
	}
	return false
}

func (s *Slots) pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.Clock.After(s.PollInterval):
		return nil
	}
}

// take waits for a slot for a drain of trigger and reason, and says on the
// Node, in its log and in Events why the drain waits meanwhile (see
// slotWait). It fails only when ctx ends.
func (s *Slots) take(ctx context.Context, e *Engine, trigger Trigger, reason string) (release func(), err error) {
	w := &slotWait{s: s, e: e, trigger: trigger, reason: reason}
	return s.Acquire(ctx, func(err error) { w.report(ctx, err) })
}

// slotWait reports, while a drain waits for a slot, why it waits: every
// slot is held by other nodes, or a slot cannot be taken at all because of
// an error (a missing drain.leaseNamespace, no permission), which waiting
// will not cure and which the status and a Warning Event then name.
type slotWait struct {
	s *Slots
	// e writes the status, the condition and the Events.
	e       *Engine
	trigger Trigger
	reason  string
	start   *metav1.Time
	errors  int
	lastMsg string
}

func (w *slotWait) report(ctx context.Context, cause error) {
	s, e := w.s, w.e
	now := e.now()
	if w.start == nil {
		w.start = &now
	}
	msg := fmt.Sprintf("waiting for one of %d drain slots (drain.maxConcurrentNodes)", s.Max)
	if cause != nil {
		w.errors++
		msg = fmt.Sprintf("cannot take a drain slot: %v; check drain.leaseNamespace (%q): the namespace must exist and the agent must be allowed to create and update Leases in it", cause, s.Namespace)
	} else {
		w.errors = 0
	}
	if err := w.record(ctx, msg, now); err != nil {
		s.Logger.Warn("Could not record why the drain waits", "err", err)
	}
	if msg == w.lastMsg {
		return
	}
	w.lastMsg = msg
	if err := e.setCondition(ctx, ReasonWaiting, msg, now); err != nil {
		s.Logger.Warn("Could not set the node condition", "err", err)
	}
	if cause != nil {
		s.Logger.Error("Cannot take a drain slot", "err", cause, "leaseNamespace", s.Namespace)
		e.event(corev1.EventTypeWarning, "DrainSlotError", "Maintenance requested, but %s", msg)
		return
	}
	s.Logger.Info("Waiting for a drain slot", "maxConcurrentNodes", s.Max)
	e.event(corev1.EventTypeNormal, "MaintenanceWaiting", "Maintenance requested; waiting for a drain slot (at most %d nodes drain at once)", s.Max)
}

// record writes phase Waiting with msg. A drain that already began (the
// agent restarted and its slot went to another node, or a Lease request
// failed) keeps its record of what the agent changed, with msg as lastError;
// a Node that cannot be read is not written at all, so that record is never
// lost.
func (w *slotWait) record(ctx context.Context, msg string, now metav1.Time) error {
	prev, err := w.e.readStatus(ctx)
	if err != nil {
		return err
	}
	st := &Status{Phase: PhaseWaiting, Trigger: w.trigger, Reason: w.reason, StartTime: w.start, LastUpdate: &now,
		LastError: msg, ErrorOnLeaseCount: w.errors}
	if prev.Active() && prev.Phase != PhaseWaiting {
		kept := *prev
		kept.LastError, kept.ErrorOnLeaseCount, kept.LastUpdate = msg, w.errors, &now
		st = &kept
	}
	return w.e.patchStatus(ctx, st)
}

// tryAcquire takes or renews the slot name for duration, reading it first:
// false when another node holds it. It returns the Lease as written.
func (s *Slots) tryAcquire(ctx context.Context, name string, duration time.Duration) (*coordinationv1.Lease, bool, error) {
	lease, err := s.Client.CoordinationV1().Leases(s.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease, err = nil, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading Lease %s/%s: %w", s.Namespace, name, err)
	}
	return s.write(ctx, name, lease, duration)
}

// renew writes the slot name for duration starting from last, the Lease as
// this node last wrote it, without reading it first; when the Lease changed
// since (a conflict), it reads it and tries once more.
func (s *Slots) renew(ctx context.Context, name string, last *coordinationv1.Lease, duration time.Duration) (*coordinationv1.Lease, bool, error) {
	if last != nil {
		if l, ok, err := s.write(ctx, name, last, duration); ok || err != nil {
			return l, ok, err
		}
	}
	return s.tryAcquire(ctx, name, duration)
}

// takeFrom takes the slot name as cur (nil: not created yet) shows it, for
// LeaseDuration, without reading it again: a stale cur fails on the
// Lease's resourceVersion, and the slot is then not taken.
func (s *Slots) takeFrom(ctx context.Context, name string, cur *coordinationv1.Lease) (*coordinationv1.Lease, bool, error) {
	return s.write(ctx, name, cur, s.LeaseDuration)
}

func (s *Slots) write(ctx context.Context, name string, lease *coordinationv1.Lease, duration time.Duration) (*coordinationv1.Lease, bool, error) {
	leases := s.Client.CoordinationV1().Leases(s.Namespace)
	now := metav1.NewMicroTime(s.Clock.Now())
	if lease == nil {
		created, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(s.Identity), LeaseDurationSeconds: ptr.To(int32(duration / time.Second)),
				AcquireTime: &now, RenewTime: &now,
			},
		}, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("creating Lease %s/%s: %w (does the namespace exist?)", s.Namespace, name, err)
		}
		return created, true, nil
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder != "" && holder != s.Identity && !s.expired(lease) {
		return nil, false, nil
	}
	lease = lease.DeepCopy()
	if holder != s.Identity {
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.HolderIdentity = ptr.To(s.Identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(duration / time.Second))
	lease.Spec.RenewTime = &now
	written, err := leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("taking Lease %s/%s: %w", s.Namespace, name, err)
	}
	return written, true, nil
}

func (s *Slots) expired(l *coordinationv1.Lease) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	end := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return s.Clock.Now().After(end)
}

// Held is a slot this node holds; it renews it until Release or the end of
// the context it was taken with.
type Held struct {
	s      *Slots
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu sync.Mutex
	// keep, when set, is the Lease's duration while the host reboots:
	// the slot is then never given back by this process.
	keep time.Duration
	// last is the Lease as this node last wrote it, the start of the next
	// renewal and of the release.
	last *coordinationv1.Lease
}

func (h *Held) lastLease() *coordinationv1.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

func (h *Held) setLast(l *coordinationv1.Lease) {
	h.mu.Lock()
	h.last = l
	h.mu.Unlock()
}

// Name is the slot Lease's name.
func (h *Held) Name() string { return h.name }

func (h *Held) duration() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keep > 0 {
		return h.keep
	}
	return h.s.LeaseDuration
}

// KeepAcrossReboot writes the Lease with duration d, renews it at that
// duration for as long as this process lives, and makes Release (and the
// end of the context) stop renewing without giving the slot back: the agent
// that starts after the reboot takes the slot back (Acquire finds its own
// slot first), or it expires d after the last renewal when the node never
// comes back.
func (h *Held) KeepAcrossReboot(ctx context.Context, d time.Duration) error {
	h.mu.Lock()
	h.keep = d
	h.mu.Unlock()
	written, ok, err := h.s.renew(ctx, h.name, h.lastLease(), d)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("drain slot %s/%s is held by another node now", h.s.Namespace, h.name)
	}
	h.setLast(written)
	return nil
}

// Release stops renewing the slot and gives it back, unless it is kept
// across a reboot. It may be called more than once.
func (h *Held) Release() {
	h.once.Do(func() {
		h.cancel()
		<-h.done
		h.mu.Lock()
		kept := h.keep > 0
		h.mu.Unlock()
		if kept {
			h.s.Logger.Info("Drain slot stays held across the reboot", "lease", h.s.Namespace+"/"+h.name, "for", h.keep)
			return
		}
		h.s.releaseSlot(h.name, h.lastLease())
	})
}

// hold renews the slot until Release is called or ctx ends.
// written is the Lease as this node wrote it when it took the slot.
func (s *Slots) hold(ctx context.Context, name string, written *coordinationv1.Lease) *Held {
	ctx, cancel := context.WithCancel(ctx)
	h := &Held{s: s, name: name, cancel: cancel, done: make(chan struct{}), last: written}
	go func() {
		defer close(h.done)
		t := s.Clock.NewTicker(s.LeaseDuration / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				written, ok, err := s.renew(ctx, name, h.lastLease(), h.duration())
				if ok {
					h.setLast(written)
				} else if ctx.Err() == nil {
					s.Logger.Warn("Lost drain slot; still draining", "lease", s.Namespace+"/"+name, "err", err)
				}
			}
		}
	}()
	return h
}

// releaseSlot gives the slot name back, starting from last (the Lease as
// this node last wrote it) and reading the Lease only when it changed since.
func (s *Slots) releaseSlot(name string, last *coordinationv1.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases := s.Client.CoordinationV1().Leases(s.Namespace)
	release := func(lease *coordinationv1.Lease) error {
		lease = lease.DeepCopy()
		lease.Spec.HolderIdentity = nil
		lease.Spec.RenewTime = nil
		_, err := leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	}
	var err error
	if last != nil {
		err = release(last)
	}
	if last == nil || apierrors.IsConflict(err) {
		lease, gerr := leases.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != s.Identity {
			return
		}
		err = release(lease)
	}
	if err != nil {
		s.Logger.Warn("Could not release drain slot; it expires by itself", "lease", s.Namespace+"/"+name, "err", err)
		return
	}
	s.Logger.Info("Released drain slot", "lease", s.Namespace+"/"+name)
}
