package scale

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/internal/runcoordinator"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/test/testenv"
)

const (
	// coordinatorUser is the identity of the in-process coordinators: a
	// client certificate in system:masters, an admin's credentials, so the
	// benchmark does not depend on how deploy/ installs the coordinator.
	// Its requests are the same whatever its credentials.
	coordinatorUser = "scale-coordinator"
	// coordinatorReplicas run at once, as the coordinator's Deployment
	// runs two: one leads, the other waits on the election Lease.
	coordinatorReplicas = 2
	// electionName is the election Lease, runcoordinator's default.
	electionName = "node-agent-coordinator"
)

// coordinators are the drain slot coordinator's replicas, run in this
// process by internal/runcoordinator, the code node-agent-coordinator runs.
type coordinators struct {
	b   *testing.B
	env *testenv.Env
	log io.Writer

	mu     sync.Mutex
	cancel context.CancelFunc
	done   []chan error
	regs   []*prometheus.Registry
	// generation names the replicas of each start apart in the logs.
	generation int
}

// coordinatorConfig is the ConfigMap's configuration with the limit of a
// phase: slots.limit is read when the coordinator starts. Its
// client's rate limit is kubeAPIQPS and kubeAPIBurst, as
// node-agent-coordinator's: the defaults, or SCALE_COORDINATOR_QPS (burst
// twice that).
func coordinatorConfig(limit int) config.Config {
	cfg := config.Default()
	cfg.Slots.Limit = limit
	if coordinatorQPS > 0 {
		cfg.KubeAPIQPS, cfg.KubeAPIBurst = float32(coordinatorQPS), 2*coordinatorQPS
	}
	return cfg
}

// restConfig is the coordinators' credential; runcoordinator sets the rate
// limit from the configuration.
func (c *coordinators) restConfig() *rest.Config {
	c.b.Helper()
	cfg, err := c.env.UserConfig(coordinatorUser, "system:masters")
	if err != nil {
		c.b.Fatal(err)
	}
	return cfg
}

// qpsNote says which client-side rate limit the coordinator ran with.
func qpsNote() string {
	cfg := coordinatorConfig(1)
	if coordinatorQPS == 0 {
		return fmt.Sprintf("the configuration's default client rate limit of %g requests per second (kubeAPIQPS; burst %d), as node-agent-coordinator runs", cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	}
	return fmt.Sprintf("a client rate limit of %g requests per second (burst %d; SCALE_COORDINATOR_QPS), not the configuration's default", cfg.KubeAPIQPS, cfg.KubeAPIBurst)
}

// start starts coordinatorReplicas replicas with slots.limit
// limit and waits until one leads.
func (c *coordinators) start(limit int) {
	c.b.Helper()
	cfg := coordinatorConfig(limit)
	c.b.Logf("coordinator: %d replicas with slots.limit %d", coordinatorReplicas, limit)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.b.Fatal("coordinators started twice")
	}
	c.generation++
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done, c.regs = cancel, nil, nil
	for i := range coordinatorReplicas {
		id := fmt.Sprintf("scale-coordinator-%d-%d", c.generation, i)
		reg := prometheus.NewRegistry()
		done := make(chan error, 1)
		o := runcoordinator.Options{
			Config: cfg, REST: c.restConfig(), Identity: id, MetricsAddress: "0", HealthAddress: "0",
			Logger:   slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", id),
			Registry: reg,
		}
		go func() { done <- runcoordinator.Run(ctx, o) }()
		c.done = append(c.done, done)
		c.regs = append(c.regs, reg)
	}
	testenv.WaitFor(c.b, 2*time.Minute, "a coordinator replica leading", func() (bool, error) {
		for i, done := range c.done {
			if len(done) > 0 { // left for stop to read
				return false, fmt.Errorf("coordinator replica %d stopped before leading; its log is in the benchmark's temporary directory", i)
			}
		}
		for _, reg := range c.regs {
			if leading(reg) {
				return true, nil
			}
		}
		return false, nil
	})
}

// stop stops the replicas and waits for them; the leader gives the
// election Lease up (ReleaseOnCancel), so the next start leads at once.
func (c *coordinators) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		return
	}
	c.cancel()
	for _, done := range c.done {
		if err := <-done; err != nil && err != context.Canceled {
			c.b.Logf("a coordinator replica stopped with: %v", err)
		}
	}
	c.cancel = nil
}

// restart starts the replicas again with another limit, as a rollout of
// the coordinator's Deployment after a change of the ConfigMap does.
func (c *coordinators) restart(limit int) {
	c.b.Helper()
	c.stop()
	c.start(limit)
}

// leading reports whether the replica that registered its metrics on reg
// leads (node_agent_drain_slot_coordinator_leader is 1).
func leading(reg *prometheus.Registry) bool {
	fams, err := reg.Gather()
	if err != nil {
		return false
	}
	for _, f := range fams {
		if f.GetName() == "node_agent_drain_slot_coordinator_leader" && len(f.Metric) > 0 {
			return f.Metric[0].GetGauge().GetValue() == 1
		}
	}
	return false
}
