package selfdrain

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// vmPollInterval is how often a drain reads its VMs' progress.
const vmPollInterval = 5 * time.Second

// vmFinalPollTimeout bounds the last read of the VMs when a drain ends.
const vmFinalPollTimeout = 5 * time.Second

// followVMs starts following the node's KubeVirt VMs (EngineOptions.
// VMProgress) for this run: their progress goes into the status with the
// next progress write (publish). The VMs are first read beside the
// evictions, not before them. stop ends it; with final, it reads the VMs
// once more, so that the last status shows where each went.
func (r *drainRun) followVMs() (stop func(final bool)) {
	e := r.e
	if e.VMProgress == nil {
		return func(bool) {}
	}
	ctx, cancel := context.WithCancel(r.ctx)
	// poll is set by the goroutine before it ends; stop reads it after
	// waiting for it.
	var poll func(context.Context) ([]VMStatus, error)
	read := func(ctx context.Context) {
		vms, err := poll(ctx)
		if err != nil {
			if ctx.Err() == nil {
				e.Logger.Warn("Could not read the progress of the node's VMs", "err", err)
			}
			return
		}
		shown := capVMs(vms)
		r.vms.Store(&shown)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// The run's context, not ctx: a drain that ends before this
		// first read does still waits for it, and reads the VMs once
		// more for its final status.
		p := e.VMProgress(r.ctx)
		if p == nil {
			return
		}
		poll = p
		t := e.Clock.NewTicker(vmPollInterval)
		defer t.Stop()
		for {
			read(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
		}
	})
	var once sync.Once
	return func(final bool) {
		once.Do(func() {
			cancel()
			wg.Wait()
			if final && poll != nil {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), vmFinalPollTimeout)
				defer cancel()
				read(ctx)
			}
		})
	}
}

// capVMs keeps at most MaxVMsShown entries, the last counting the others.
func capVMs(vms []VMStatus) []VMStatus {
	if len(vms) <= MaxVMsShown {
		return vms
	}
	out := slices.Clone(vms[:MaxVMsShown-1])
	return append(out, VMStatus{Name: fmt.Sprintf("and %d more", len(vms)-MaxVMsShown+1)})
}

// takeVMs puts the latest VM progress into the status; it reports whether
// it changed.
func (r *drainRun) takeVMs() bool {
	v := r.vms.Load()
	if v == nil || slices.EqualFunc(*v, r.st.VMs, sameVM) {
		return false
	}
	r.st.VMs = *v
	return true
}

func sameVM(a, b VMStatus) bool {
	return a.Name == b.Name && a.Phase == b.Phase && a.Target == b.Target && a.Message == b.Message &&
		(a.Since == nil) == (b.Since == nil) && (a.Since == nil || a.Since.Equal(b.Since))
}

// cancelVMs calls off the evacuation of the node's VMs (EngineOptions.
// CancelVMs) as its maintenance ends, and says in an Event which were still
// moving.
func (e *Engine) cancelVMs(ctx context.Context) {
	if e.CancelVMs == nil {
		return
	}
	msg, err := e.CancelVMs(ctx)
	if err != nil {
		e.Logger.Warn("Could not call off the evacuation of the node's VMs", "err", err)
		e.Event(corev1.EventTypeWarning, "VMEvacuationNotCancelled", "The maintenance ended, but the evacuation of its VMs could not all be called off: %v", err)
	}
	if msg != "" {
		e.Logger.Info("Called off the evacuation of the node's VMs", "vms", msg)
		e.Event(corev1.EventTypeNormal, "VMEvacuationCancelled", "The maintenance ended while VMs were leaving the node; their evacuation is called off: %s", msg)
	}
}
