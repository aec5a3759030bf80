package testenv

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/node-agent/node-agent/pkg/config"
)

// CoordinatorName is the drain slot coordinator's binary, built beside
// node-agent (`make build`).
const CoordinatorName = "node-agent-coordinator"

// CoordinatorBinary is the node-agent-coordinator beside the node-agent at
// agent.
func CoordinatorBinary(agent string) string {
	return filepath.Join(filepath.Dir(agent), CoordinatorName)
}

// CoordinatorOptions say how to run node-agent-coordinator.
type CoordinatorOptions struct {
	// Binary is the coordinator to run; empty: the one beside AgentBinary.
	Binary string
	// Kubeconfig is the coordinator's credential.
	Kubeconfig string
	// ConfigFile is the agents' configuration file it reads (--config).
	// When empty, Config, if set, is written to a file and read instead
	// (see CoordinatorConfig); with neither it runs with the defaults.
	ConfigFile string
	Config     []byte
	// Identity names the replica in the leader election; empty: a name
	// unique in the test process.
	Identity string
	// ElectionName names the election Lease; empty: the coordinator's
	// default (node-agent-coordinator). Coordinators of one election share
	// it.
	ElectionName string
	// LogLevel defaults to debug.
	LogLevel string
	// Args are added after the ones StartCoordinator sets.
	Args []string
	// Dir holds the log and the written Config; default a new temporary
	// directory.
	Dir string
}

// Coordinator is a running node-agent-coordinator. Its log (stdout and
// stderr) goes to LogPath.
type Coordinator struct {
	child
	Identity    string
	MetricsAddr string
	HealthAddr  string
	// ConfigPath is the file it reads, "" for none.
	ConfigPath string
}

var coordinatorSeq atomic.Int64

// StartCoordinator runs node-agent-coordinator with free loopback ports for
// its metrics and probes. When the test ends it is stopped with SIGTERM, as
// a Deployment's pod is, so that it hands its election Lease back at once
// (a coordinator started next need not wait out the Lease), and killed if
// it is still running 10 s later. Stop and Kill end it earlier; a killed
// coordinator keeps the election Lease until it expires (15 s), as after a
// crash.
func StartCoordinator(tb testing.TB, o CoordinatorOptions) *Coordinator {
	tb.Helper()
	binary := o.Binary
	if binary == "" {
		agent, err := AgentBinary()
		if err != nil {
			tb.Fatal(err)
		}
		binary = CoordinatorBinary(agent)
	}
	if fi, err := os.Stat(binary); err != nil || fi.Mode().Perm()&0o111 == 0 {
		tb.Fatalf("%s is not an executable file (%v); `make build` builds it beside node-agent", binary, err)
	}
	dir := o.Dir
	if dir == "" {
		dir = tb.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	c := &Coordinator{Identity: o.Identity, MetricsAddr: FreeAddr(tb), HealthAddr: FreeAddr(tb), ConfigPath: o.ConfigFile}
	if c.Identity == "" {
		c.Identity = fmt.Sprintf("testenv-coordinator-%d", coordinatorSeq.Add(1))
	}
	if c.ConfigPath == "" && o.Config != nil {
		c.ConfigPath = filepath.Join(dir, c.Identity+".yaml")
		if err := os.WriteFile(c.ConfigPath, o.Config, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	level := o.LogLevel
	if level == "" {
		level = "debug"
	}
	args := []string{
		"--kubeconfig", o.Kubeconfig,
		"--identity", c.Identity,
		"--metrics-bind-address", c.MetricsAddr,
		"--health-probe-bind-address", c.HealthAddr,
		"--log-level", level,
	}
	if c.ConfigPath != "" {
		args = append(args, "--config", c.ConfigPath)
	}
	if o.ElectionName != "" {
		args = append(args, "--leader-election-name", o.ElectionName)
	}
	c.start(tb, CoordinatorName, filepath.Join(dir, c.Identity+".log"), exec.Command(binary, append(args, o.Args...)...))
	tb.Logf("started %s %s (pid %d); config %q; log %s", CoordinatorName, c.Identity, c.Cmd.Process.Pid, c.ConfigPath, c.LogPath)
	tb.Cleanup(func() { c.terminate(10 * time.Second) })
	return c
}

// terminate sends SIGTERM and kills the coordinator when it has not exited
// within grace.
func (c *Coordinator) terminate(grace time.Duration) {
	if _, exited := c.Exited(); exited {
		return
	}
	_ = c.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		c.done <- err
	case <-time.After(grace):
		c.kill()
	}
}

// WaitReady polls /readyz until it answers 200, for at most a minute: the
// coordinator leads and has read the Nodes and slot Leases, so it answers
// requests. A replica that stands by never is; WaitInElection waits for
// one.
func (c *Coordinator) WaitReady(tb testing.TB) {
	tb.Helper()
	c.waitReady(tb, c.HealthAddr)
}

// WaitInElection polls /readyz/election until it answers 200, for at most
// a minute: the coordinator has read or written the election Lease, as a
// leader or a standby (what the Deployment's readiness probe asks).
func (c *Coordinator) WaitInElection(tb testing.TB) {
	tb.Helper()
	c.waitProbe(tb, c.HealthAddr, "/readyz/election")
}

// Leading reports whether this replica leads
// (node_agent_drain_slot_coordinator_leader).
func (c *Coordinator) Leading() (bool, error) {
	v, err := c.Metric("node_agent_drain_slot_coordinator_leader")
	return v == 1, err
}

// WaitLeading waits up to timeout until this replica leads. A fresh
// election takes a moment; taking over from a replica that was killed
// waits out the election Lease (15 s).
func (c *Coordinator) WaitLeading(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	WaitFor(tb, timeout, CoordinatorName+" "+c.Identity+" leading", func() (bool, error) {
		if err, exited := c.Exited(); exited {
			return false, StopPolling(fmt.Errorf("%s exited: %v\n%s", c.Identity, err, c.Tail(40)))
		}
		leading, err := c.Leading()
		if err != nil {
			return false, nil // not serving yet
		}
		return leading, nil
	})
}

// Metric returns the value of the metric line that starts with series (a
// name, or a name with its labels) followed by a space; 0 when there is
// none, as for a series not yet created.
func (c *Coordinator) Metric(series string) (float64, error) {
	resp, err := http.Get("http://" + c.MetricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// CoordinatorConfig returns, as a configuration file for the coordinator,
// the keys of the agents' configuration that node-agent-coordinator reads
// (slots.namespace, slots.limit, slots.pools, slots.heartbeatBound,
// drain.timeout, reboot.enabled, reboot.slotHoldBound and
// reboot.minInterval), as
// `node-agent run` with agentArgs sees them: its defaults, the file its
// --config names, and its flags. The coordinator, not the agent, applies the
// limits: an agent's --slots-limit changes nothing unless
// the coordinator reads the same value. Flags that are not configuration
// keys are ignored. Agents that agree on what the coordinator reads get the
// same bytes.
func CoordinatorConfig(agentArgs []string) ([]byte, error) {
	fs := pflag.NewFlagSet("node-agent run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	cfg := config.Default()
	cfg.AddFlags(fs)
	configFile := fs.String("config", "", "")
	if err := fs.Parse(agentArgs); err != nil {
		return nil, fmt.Errorf("agent arguments %q: %w", agentArgs, err)
	}
	if *configFile != "" {
		loaded, _, err := config.Load(*configFile, config.Default(), fs)
		if err != nil {
			return nil, err
		}
		cfg = loaded
	}
	type slots struct {
		Namespace      string              `json:"namespace"`
		Limit          int                 `json:"limit"`
		Pools          []config.PoolConfig `json:"pools,omitempty"`
		HeartbeatBound string              `json:"heartbeatBound"`
	}
	type drain struct {
		Timeout string `json:"timeout"`
	}
	type reboot struct {
		// Enabled: the coordinator refuses reboot slots while it is false.
		Enabled       bool   `json:"enabled"`
		SlotHoldBound string `json:"slotHoldBound"`
		MinInterval   string `json:"minInterval"`
	}
	return yaml.Marshal(struct {
		Slots  slots  `json:"slots"`
		Drain  drain  `json:"drain"`
		Reboot reboot `json:"reboot"`
	}{
		Slots: slots{
			Namespace: cfg.Slots.Namespace, Limit: cfg.Slots.Limit, Pools: cfg.Slots.Pools,
			HeartbeatBound: cfg.Slots.HeartbeatBound.Duration.String(),
		},
		Drain:  drain{Timeout: cfg.Drain.Timeout.Duration.String()},
		Reboot: reboot{Enabled: cfg.Reboot.Enabled, SlotHoldBound: cfg.Reboot.SlotHoldBound.Duration.String(), MinInterval: cfg.Reboot.MinInterval.Duration.String()},
	})
}
