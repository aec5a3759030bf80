package selfdrain

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// PollInterval is how often a waiting node tries again.
	PollInterval time.Duration
	Clock        clock.WithTicker
	Logger       *slog.Logger
}

// SlotPrefix names the slot Leases.
const SlotPrefix = "node-agent-drain-slot-"

// Acquire blocks until this node holds a slot, or ctx ends. onWait is called
// with nil once when every slot is held by other nodes, and with the error
// after every round in which a slot could not even be checked (for example
// because drain.leaseNamespace does not exist), so the caller can say why the
// node waits. The returned release gives the slot back and stops renewing it.
func (s *Slots) Acquire(ctx context.Context, onWait func(err error)) (release func(), err error) {
	waited := false
	// A restarted agent first looks for the slot it already holds, so it
	// never holds two.
	for i := range s.Max {
		name := fmt.Sprintf("%s%d", SlotPrefix, i)
		lease, err := s.Client.CoordinationV1().Leases(s.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") == s.Identity {
			if ok, err := s.tryAcquire(ctx, name); ok && err == nil {
				s.Logger.Info("Holding drain slot again", "lease", s.Namespace+"/"+name)
				return s.hold(ctx, name), nil
			}
		}
	}
	for {
		var roundErr error
		for i := range s.Max {
			name := fmt.Sprintf("%s%d", SlotPrefix, i)
			ok, err := s.tryAcquire(ctx, name)
			if err != nil {
				// Fail closed: a slot we cannot check is not ours.
				s.Logger.Warn("Cannot check drain slot", "lease", s.Namespace+"/"+name, "err", err)
				if roundErr == nil {
					roundErr = err
				}
				continue
			}
			if ok {
				s.Logger.Info("Holding drain slot", "lease", s.Namespace+"/"+name)
				return s.hold(ctx, name), nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch {
		case roundErr != nil:
			if onWait != nil {
				onWait(roundErr)
			}
		case !waited:
			waited = true
			if onWait != nil {
				onWait(nil)
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.Clock.After(s.PollInterval):
		}
	}
}

func (s *Slots) tryAcquire(ctx context.Context, name string) (bool, error) {
	leases := s.Client.CoordinationV1().Leases(s.Namespace)
	now := metav1.NewMicroTime(s.Clock.Now())
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(s.Identity), LeaseDurationSeconds: ptr.To(int32(s.LeaseDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now,
			},
		}, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("creating Lease %s/%s: %w (does the namespace exist?)", s.Namespace, name, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading Lease %s/%s: %w", s.Namespace, name, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder != "" && holder != s.Identity && !s.expired(lease) {
		return false, nil
	}
	if holder != s.Identity {
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.HolderIdentity = ptr.To(s.Identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(s.LeaseDuration / time.Second))
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("taking Lease %s/%s: %w", s.Namespace, name, err)
	}
	return true, nil
}

func (s *Slots) expired(l *coordinationv1.Lease) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	end := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return s.Clock.Now().After(end)
}

// hold renews the slot until release is called or ctx ends.
func (s *Slots) hold(ctx context.Context, name string) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := s.Clock.NewTicker(s.LeaseDuration / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				if ok, err := s.tryAcquire(ctx, name); !ok && ctx.Err() == nil {
					s.Logger.Warn("Lost drain slot; still draining", "lease", s.Namespace+"/"+name, "err", err)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		s.releaseSlot(name)
	}
}

func (s *Slots) releaseSlot(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases := s.Client.CoordinationV1().Leases(s.Namespace)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != s.Identity {
		return
	}
	lease.Spec.HolderIdentity = nil
	lease.Spec.RenewTime = nil
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		s.Logger.Warn("Could not release drain slot; it expires by itself", "lease", s.Namespace+"/"+name, "err", err)
		return
	}
	s.Logger.Info("Released drain slot", "lease", s.Namespace+"/"+name)
}
