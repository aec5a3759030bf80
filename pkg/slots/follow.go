package slots

import (
	"context"
	"sync"
)

// Await waits until the node holds a slot for purpose that a part of this
// agent asked for, without asking for one itself, or ctx ends: the drain of
// a coordinated reboot runs in the slot the reboot controller holds
// (PurposeReboot), and must not evict before that slot is granted, nor
// after it is taken back. onWait, when not nil, is called with nil once
// it waits. What it returns follows that grant on the Node: Lost is closed
// when the grant no longer stands, and Release only stops following it, as
// the slot is its asker's to give back.
func (r *Requester) Await(ctx context.Context, purpose Purpose, onWait func(error)) (Slot, error) {
	r.init()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.ready:
	}
	waited := false
	for {
		req, g, changed, err := r.state()
		if err == nil && req != nil && req.Purpose == purpose && g.Answers(req) && g.State == Granted {
			f := &Followed{r: r, purpose: purpose, id: req.ID, slot: g.Slot, lost: make(chan struct{}), done: make(chan struct{})}
			go f.follow()
			return f, nil
		}
		if !waited {
			waited = true
			if onWait != nil {
				onWait(nil)
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}

// Followed is a slot of this node that another part of the agent holds,
// followed on the Node (Await).
type Followed struct {
	r       *Requester
	purpose Purpose
	id      string
	slot    string
	lost    chan struct{}

	once   sync.Once
	done   chan struct{}
	mu     sync.Mutex
	reason string
}

// Name is the slot Lease's name.
func (f *Followed) Name() string { return f.slot }

// Release stops following the slot; the slot stays with its asker. It may
// be called more than once.
func (f *Followed) Release() { f.once.Do(func() { close(f.done) }) }

// Lost is closed when the grant followed no longer stands: the coordinator
// took it back, or its request was withdrawn or replaced.
func (f *Followed) Lost() <-chan struct{} { return f.lost }

// LostReason says why the slot was lost, once Lost is closed.
func (f *Followed) LostReason() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reason
}

// follow watches the Node until the grant no longer stands or Release.
func (f *Followed) follow() {
	for {
		req, g, changed, err := f.r.state()
		if err == nil {
			var why string
			switch {
			case req == nil || req.ID != f.id:
				why = "the request for the drain slot was withdrawn from the Node"
			case g.Answers(req) && g.State == Revoked:
				why = "the coordinator took the drain slot back: " + g.Reason
			case !g.Answers(req) || g.State != Granted:
				why = "the drain slot is no longer granted"
			}
			if why != "" {
				f.mu.Lock()
				f.reason = why
				f.mu.Unlock()
				f.r.Logger.Warn("The drain slot followed was lost", "purpose", f.purpose, "slot", f.slot, "reason", why)
				close(f.lost)
				return
			}
		}
		select {
		case <-f.done:
			return
		case <-changed:
		}
	}
}
