// Package election runs the drain slot coordinator under client-go's leader
// election, so that of its replicas exactly one decides at a time. It is
// kept out of pkg/slots because client-go's leader election links the whole
// client-go clientset and its scheme: only node-agent-coordinator links it,
// never the agent (cmd/node-agent's TestLinksNoClientset).
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Options configures Run.
type Options struct {
	// REST reaches the apiserver for the election Lease.
	REST *rest.Config
	// Namespace and Name name the election Lease.
	Namespace, Name string
	// Identity names this replica (its pod's name).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's; zero
	// takes 15s, 10s and 2s, the values of kube-controller-manager.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Logger                                    *slog.Logger
	// OnLeading is told whether this replica leads: true before lead
	// starts, false once the lead is lost or given up (and after a
	// campaign that ends without leading).
	OnLeading func(bool)
	// OnLeader is told the holder of the election Lease each time a read
	// or write of it shows a new one: this replica's own identity too, and
	// "" once a leader has given the Lease up. Either way this replica has
	// reached the apiserver with its rights on that Lease. client-go calls
	// it on a goroutine of its own, so two quick changes may arrive out of
	// order.
	OnLeader func(identity string)
}

// Run campaigns for the lead until ctx ends, and runs lead while it leads.
// lead's context ends when the lead is lost; Run then campaigns again, and
// lead starts afresh from what the cluster shows.
func Run(ctx context.Context, o Options, lead func(context.Context) error) error {
	if o.Identity == "" {
		return errors.New("leader election: no identity; set --identity or $POD_NAME")
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cfg := rest.CopyConfig(o.REST)
	// One hung request must not cost the lead (client-go's advice).
	cfg.Timeout = max(o.RenewDeadline/2, time.Second)
	client, err := coordinationv1client.NewForConfig(rest.AddUserAgent(cfg, "node-agent-coordinator/leader-election"))
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Client:     client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
		Labels:     map[string]string{"app.kubernetes.io/name": "node-agent"},
	}
	for ctx.Err() == nil {
		// A lead that stops on its own (an error) gives the lead up:
		// leading without deciding would hold every slot still.
		term, endTerm := context.WithCancel(ctx)
		leadErr := make(chan error, 1)
		// client-go starts OnStartedLeading on a goroutine and does not
		// wait for it: it may run after le.Run has returned. Under
		// termMu, either it starts lead before the term is over, or it
		// never does, so that after the term no lead starts behind the
		// next campaign's back.
		var termMu sync.Mutex
		termOver := false
		started := make(chan struct{})
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: o.Name, ReleaseOnCancel: true,
			LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					termMu.Lock()
					if termOver {
						termMu.Unlock()
						return
					}
					close(started)
					termMu.Unlock()
					o.Logger.Info("Leading: deciding the drain slots", "identity", o.Identity)
					if o.OnLeading != nil {
						o.OnLeading(true)
					}
					leadErr <- lead(ctx)
					endTerm()
				},
				OnStoppedLeading: func() {
					o.Logger.Info("Not leading", "identity", o.Identity)
					if o.OnLeading != nil {
						o.OnLeading(false)
					}
				},
				OnNewLeader: func(id string) {
					if id != o.Identity {
						o.Logger.Info("Another replica leads", "leader", id)
					}
					if o.OnLeader != nil {
						o.OnLeader(id)
					}
				},
			},
		})
		if err != nil {
			endTerm()
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(term)
		endTerm()
		termMu.Lock()
		termOver = true
		termMu.Unlock()
		select {
		case <-started:
		default:
			continue
		}
		// Never two leads at once in one process: the last one has
		// stopped writing before the next campaign.
		err = <-leadErr
		// Said again now that lead has returned: a term that ends as it
		// begins can report leading after OnStoppedLeading.
		if o.OnLeading != nil {
			o.OnLeading(false)
		}
		if err != nil && ctx.Err() == nil {
			o.Logger.Error("The coordinator stopped while leading; campaigning again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(o.RetryPeriod):
			}
		}
	}
	return nil
}
