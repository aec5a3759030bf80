package selfdrain

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/node-agent/node-agent/pkg/evictionrequest"
	erspec "github.com/node-agent/node-agent/pkg/evictionrequest/spec"
)

// withdrawTimeout bounds the withdrawal of a stopped drain's requests.
const withdrawTimeout = 10 * time.Second

// chooseEvictionAPI decides before the Node changes whether the drain about
// to begin goes through EvictionRequests (drain.evictionAPI,
// evictionrequest.Choose). In evictionRequest mode, a cluster that does not
// serve them refuses the maintenance with the Node unchanged.
func (e *Engine) chooseEvictionAPI() error {
	mode, err := erspec.ParseMode(e.Config.EvictionAPI)
	if err != nil {
		return fmt.Errorf("maintenance not started, the Node is unchanged: drain.evictionAPI %w", err)
	}
	served, derr := false, error(nil)
	if mode != erspec.Eviction {
		served, derr = evictionrequest.Served(e.Client.Discovery())
	}
	use, why, err := evictionrequest.Choose(mode, served, derr)
	if err == nil && use && e.EvictionRequests == nil {
		err = errors.New("drain.evictionAPI asks for EvictionRequests, but the agent has no client for them")
	}
	if err != nil {
		return fmt.Errorf("maintenance not started, the Node is unchanged: %w", err)
	}
	e.podsMu.Lock()
	changed := e.requests != use
	e.requests = use
	e.podsMu.Unlock()
	if changed || use {
		e.Logger.Info("Eviction API chosen", "evictionRequests", use, "why", why)
	}
	return nil
}

func (e *Engine) usingRequests() bool {
	e.podsMu.Lock()
	defer e.podsMu.Unlock()
	return e.requests
}

// request asks for the pod's eviction through an EvictionRequest
// (evictionrequest.Evict), pods/eviction being the fallback. In auto mode,
// an apiserver that refuses node-agent's request (deploy/components/
// eviction-requests not applied) turns this drain back to pods/eviction,
// with a Warning Event.
func (e *Engine) request(ctx context.Context, ps *podState) (requested bool, err error) {
	p := ps.pod
	out, err := evictionrequest.Evict(ctx, e.EvictionRequests, &p, func(ctx context.Context) error { return e.evict(ctx, &p) })
	if errors.Is(err, evictionrequest.ErrCreateRefused) && e.Config.EvictionAPI == string(erspec.Auto) {
		e.podsMu.Lock()
		was := e.requests
		e.requests = false
		e.podsMu.Unlock()
		if was {
			e.event(corev1.EventTypeWarning, "EvictionRequestRefused", "The apiserver refused node-agent's EvictionRequest (%v); this drain evicts through pods/eviction (drain.evictionAPI auto). Apply deploy/components/eviction-requests to let nodes request evictions of their own pods", err)
		}
		return false, e.evict(ctx, &p)
	}
	if out.Failed != "" {
		e.event(corev1.EventTypeWarning, "EvictionRequestFailed", "The EvictionRequest for pod %s failed (%s); evicting it through pods/eviction", ps.key, out.Failed)
	}
	return out.Requested, err
}

// withdrawRequests withdraws the EvictionRequests of the pods a stopped
// drain leaves (maintenance ended, drain.timeout, shutdown deadline), so
// that no responder goes on moving them after the maintenance is over.
func (r *drainRun) withdrawRequests() {
	e := r.e
	if e.EvictionRequests == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), withdrawTimeout)
	defer cancel()
	for _, ps := range sortedStates(r.pending) {
		if !ps.requested {
			continue
		}
		err := e.EvictionRequests.Withdraw(ctx, ps.pod.Namespace, evictionrequest.Name(&ps.pod))
		switch {
		case err == nil:
			e.Logger.Info("EvictionRequest withdrawn", "pod", ps.key)
		case apierrors.IsNotFound(err):
		default:
			e.Logger.Warn("Could not withdraw the EvictionRequest", "pod", ps.key, "err", err)
			e.event(corev1.EventTypeWarning, "EvictionRequestNotWithdrawn", "The drain stopped, but the EvictionRequest for pod %s could not be withdrawn: %v", ps.key, err)
		}
	}
}
