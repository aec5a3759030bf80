package selfdrain

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

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
	out, err := evictionrequest.Evict(ctx, e.EvictionRequests, &p, &ps.erMemo, func(ctx context.Context) error { return e.evict(ctx, &p) })
	if errors.Is(err, evictionrequest.ErrCreateRefused) && e.Config.EvictionAPI == string(erspec.Auto) {
		e.podsMu.Lock()
		was := e.requests
		e.requests = false
		e.podsMu.Unlock()
		if was {
			e.Event(corev1.EventTypeWarning, "EvictionRequestRefused", "The apiserver refused node-agent's EvictionRequest (%v); this drain evicts through pods/eviction (drain.evictionAPI auto). Apply deploy/components/eviction-requests to let nodes request evictions of their own pods", err)
		}
		return false, e.evict(ctx, &p)
	}
	if out.Foreign != "" {
		e.Event(corev1.EventTypeWarning, "EvictionRequestNotOwn", "Pod %s: %s", ps.key, out.Foreign)
	}
	if out.Failed != "" {
		e.Event(corev1.EventTypeWarning, "EvictionRequestFailed", "The EvictionRequest for pod %s failed (%s); evicting it through pods/eviction", ps.key, out.Failed)
	}
	return out.Requested, err
}

// withdrawRequests withdraws the EvictionRequests of the pods a drain that
// gives up (drain.timeout) leaves, so that no responder goes on moving them
// while the drain asks for nothing. A drain stopped for an agent restart
// keeps them: the next agent resumes it, and finds them as they were.
func (r *drainRun) withdrawRequests() {
	var pods []corev1.Pod
	for _, ps := range sortedStates(r.pending) {
		if ps.requested {
			pods = append(pods, ps.pod)
		}
	}
	r.e.withdraw(r.ctx, pods)
}

// withdrawNodeRequests withdraws the EvictionRequests of every pod still on
// the node when its maintenance ends, unless drain.evictionAPI is eviction
// (none was made). The run that made them is gone, maybe with an earlier
// agent, so each pod's request is named from its UID; one that does not
// exist is skipped.
func (e *Engine) withdrawNodeRequests(ctx context.Context) {
	if mode, _ := erspec.ParseMode(e.Config.EvictionAPI); e.EvictionRequests == nil || mode == erspec.Eviction {
		return
	}
	// After an agent restart no drain began in this process: choose how
	// the node's pods are reached first.
	e.podsMu.Lock()
	chosen := e.pods != nil
	e.podsMu.Unlock()
	if !chosen {
		if _, err := e.choosePodClient(ctx); err != nil {
			e.Logger.Warn("Could not reach the node's pods to withdraw their EvictionRequests", "err", err)
			return
		}
	}
	list, err := e.podClient().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", e.NodeName).String()})
	if err != nil {
		e.Logger.Warn("Could not list the node's pods to withdraw their EvictionRequests", "err", err)
		return
	}
	e.withdraw(ctx, list.Items)
}

// withdraw sets the intent of the pods' EvictionRequests to Withdrawn.
func (e *Engine) withdraw(parent context.Context, pods []corev1.Pod) {
	if e.EvictionRequests == nil || len(pods) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), withdrawTimeout)
	defer cancel()
	for i := range pods {
		p := &pods[i]
		err := e.EvictionRequests.Withdraw(ctx, p.Namespace, evictionrequest.Name(p))
		switch {
		case err == nil:
			e.Logger.Info("EvictionRequest withdrawn", "pod", p.Namespace+"/"+p.Name)
		case apierrors.IsNotFound(err):
		default:
			e.Logger.Warn("Could not withdraw the EvictionRequest", "pod", p.Namespace+"/"+p.Name, "err", err)
			e.Event(corev1.EventTypeWarning, "EvictionRequestNotWithdrawn", "The EvictionRequest for pod %s/%s could not be withdrawn: %v", p.Namespace, p.Name, err)
		}
	}
}
