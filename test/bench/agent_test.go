package bench

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/test/testenv"
)

// agentProcess is a running `node-agent run` for one node, with its default
// drain settings (drain.parallelism, kubeAPIQPS and kubeAPIBurst).
type agentProcess struct {
	*testenv.Agent
	stopped bool
}

// startAgent runs node-agent for node against env, with its state and log in
// dir (a new temporary directory when empty) and args after its own, and
// stops it (SIGTERM, then SIGKILL) when the benchmark ends.
func startAgent(b *testing.B, env *testenv.Env, binary, node, dir string, args ...string) *agentProcess {
	b.Helper()
	return startAgentAs(b, env.KubeconfigPath(), binary, node, dir, args...)
}

// startAgentAs is startAgent with the credentials of kubeconfig, such as
// the token testenv.Env.AgentKubeconfig binds to the agent's pod.
func startAgentAs(b *testing.B, kubeconfig, binary, node, dir string, args ...string) *agentProcess {
	b.Helper()
	p := &agentProcess{Agent: testenv.StartAgent(b, testenv.AgentOptions{
		Binary: binary, Kubeconfig: kubeconfig, Node: node, LogLevel: "info", Dir: dir, Args: args,
	})}
	b.Cleanup(func() {
		if p.stopped {
			return
		}
		if err, exited := p.Exited(); exited {
			b.Errorf("node-agent exited during the benchmark: %v\n%s", err, p.Tail(40))
			return
		}
		_ = p.Stop(b)
	})
	return p
}

// drainSeconds returns the sum of node_agent_drain_duration_seconds over the
// annotation drains that succeeded.
func (p *agentProcess) drainSeconds(b *testing.B) float64 {
	b.Helper()
	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		b.Fatalf("scraping node-agent's metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	v, err := drainSecondsFrom(string(body))
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// drainSecondsFrom parses the Prometheus text exposition; 0 before the first
// drain, when the series does not exist yet.
func drainSecondsFrom(exposition string) (float64, error) {
	const name = "node_agent_drain_duration_seconds_sum{"
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name) || !strings.Contains(line, `result="succeeded"`) || !strings.Contains(line, `trigger="annotation"`) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		return v, nil
	}
	return 0, nil
}

// stop stops the agent on purpose, before the benchmark ends.
func (p *agentProcess) stop(b *testing.B) {
	b.Helper()
	p.stopped = true
	if err := p.Stop(b); err != nil {
		b.Errorf("node-agent exited with %v after SIGTERM\n%s", err, p.Tail(40))
	}
}
