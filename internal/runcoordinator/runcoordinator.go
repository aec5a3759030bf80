// Package runcoordinator assembles node-agent-coordinator: the clients, the
// drain slot coordinator (pkg/slots) under leader election
// (pkg/slots/election), its metrics and probes. It owns the wiring, and what
// the probes report of the election and the coordinator (probes.go). It is
// kept out of cmd/ so the tests run several coordinators in one process
// with exactly the code the command runs.
package runcoordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/events"
	"github.com/node-agent/node-agent/pkg/gates"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/recovery"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/pkg/slots/election"
)

// Options are what one coordinator replica is built from.
type Options struct {
	// Config is the agents' configuration (the same ConfigMap): the
	// coordinator reads its drain and reboot keys.
	Config config.Config
	REST   *rest.Config
	// Identity names this replica in the election (its pod's name).
	Identity string
	// ElectionName names the election Lease in slots.namespace.
	ElectionName string
	// LeaseDuration, RenewDeadline, RetryPeriod: the election's; zero
	// takes client-go's usual 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsAddress and HealthAddress are where /metrics and
	// /healthz, /readyz are served; "" or "0" serves none. /readyz passes
	// only while this replica leads and its coordinator has synced
	// (probes.go).
	MetricsAddress, HealthAddress string
	Logger                        *slog.Logger
	// Registry, when set, receives the metrics (tests); otherwise a new
	// one is made.
	Registry *prometheus.Registry
	Clock    clock.WithTicker
}

// Run runs one replica until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.ElectionName == "" {
		o.ElectionName = "node-agent-coordinator"
	}
	cfg := o.Config
	pools, err := slots.Pools(cfg.Slots)
	if err != nil {
		return err
	}
	restCfg := rest.CopyConfig(o.REST)
	restCfg.UserAgent = "node-agent-coordinator/" + o.Identity
	// The agents' kubeAPIQPS and kubeAPIBurst: client-go's default of 5
	// requests a second paced the hand-over of slots at limit 20 in make
	// scale (docs/scale.md), each grant and release being two writes.
	restCfg.QPS, restCfg.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
	client, err := kube.New(restCfg)
	if err != nil {
		return err
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	metrics := slots.NewMetrics(reg)
	if err := serve(ctx, o.MetricsAddress, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), o.Logger); err != nil {
		return err
	}
	ready := newReadiness(o.Identity)
	if err := serve(ctx, o.HealthAddress, ready.handler(), o.Logger); err != nil {
		return err
	}

	writer := events.NewWriter(events.Options{
		Sink: client.CoreV1().Events(""), Scheme: kube.Scheme, Logger: o.Logger,
		Source: corev1.EventSource{Component: "node-agent-coordinator"},
	})
	writer.Start(ctx)
	defer writer.Stop()
	recorder := reasontext.Recorder(writer)

	o.Logger.Info("Starting the drain slot coordinator", "identity", o.Identity, "namespace", cfg.Slots.Namespace,
		"limit", cfg.Slots.Limit, "pools", len(cfg.Slots.Pools),
		"heartbeatBound", cfg.Slots.HeartbeatBound.Duration, "rebootHoldBound", cfg.Reboot.SlotHoldBound.Duration)
	return election.Run(ctx, election.Options{
		REST: restCfg, Namespace: cfg.Slots.Namespace, Name: o.ElectionName, Identity: o.Identity,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		Logger: o.Logger, OnLeader: ready.observeLeader,
		OnLeading: func(leading bool) {
			metrics.SetLeader(leading)
			ready.setLeading(leading)
		},
	}, func(ctx context.Context) error {
		c := slots.NewCoordinator(slots.CoordinatorOptions{
			Client: client, Namespace: cfg.Slots.Namespace, Pools: pools,
			HeartbeatBound: cfg.Slots.HeartbeatBound.Duration, RebootHoldBound: cfg.Reboot.SlotHoldBound.Duration,
			MaxHold: slots.MaxHold(cfg), MinRebootInterval: cfg.Reboot.MinInterval.Duration, Off: slots.Off(cfg), OwnCordon: selfdrain.CordonedByAgent, Health: health(client, cfg.Slots), Clock: o.Clock, Logger: o.Logger, Recorder: recorder, Metrics: metrics,
		})
		ready.setSynced(c.Synced)
		defer ready.setSynced(nil)
		return c.Run(ctx)
	})
}

// serve serves h on addr until ctx ends; "" and "0" serve nothing.
func serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	if addr == "" || addr == "0" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("Server stopped", "addr", addr, "err", err)
		}
	}()
	return nil
}

// health adapts pkg/recovery's check of a node's health after its
// maintenance to the coordinator's Health: the Node Ready, the DaemonSet
// pods on it Ready (listed for that node only, counted from its pools'
// slots.pools[].daemonSetNamespaces), and the gates of its pools
// (slots.pools[].gates) asked of slots.prometheusURL.
func health(client kube.Interface, cfg config.SlotsConfig) func(context.Context, *corev1.Node, []string) slots.Health {
	checker := recovery.Checker{Pods: recovery.PodsOn(client), Namespaces: map[string][]string{}, Probes: map[string][]recovery.Probe{}}
	for _, p := range cfg.Pools {
		checker.Namespaces[p.Name] = p.DaemonSetNamespaces
		if len(p.Gates) == 0 {
			continue
		}
		gs := make([]gates.Gate, 0, len(p.Gates))
		for _, g := range p.Gates {
			gs = append(gs, gates.Gate{Name: g.Name, Query: g.Query})
		}
		checker.Probes[p.Name] = []recovery.Probe{recovery.PromQL(gates.Prometheus{URL: cfg.PrometheusURL, Gates: gs, Client: &http.Client{Timeout: gates.Timeout}})}
	}
	return func(ctx context.Context, node *corev1.Node, pools []string) slots.Health {
		r := checker.Check(ctx, node, pools...)
		return slots.Health{Healthy: r.Healthy, Reason: r.Reason}
	}
}
