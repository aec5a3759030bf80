package bench

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

// agentProcess is a running `node-agent run` for one node, with its default
// drain settings (drain.parallelism, kubeAPIQPS and kubeAPIBurst).
type agentProcess struct {
	cmd         *exec.Cmd
	metricsAddr string
	healthAddr  string
	logPath     string
	done        chan error
	stopped     bool
}

// startAgent runs node-agent for node against env, with its state and log in
// dir and args after its own, and stops it (SIGTERM, then SIGKILL) when the
// benchmark ends.
func startAgent(b *testing.B, env *testenv.Env, binary, node, dir string, args ...string) *agentProcess {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	p := &agentProcess{metricsAddr: freeAddr(b), healthAddr: freeAddr(b), logPath: filepath.Join(dir, "node-agent.log"), done: make(chan error, 1)}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		b.Fatal(err)
	}
	stateDir := filepath.Join(dir, "agent-state")
	p.cmd = exec.Command(binary, "run",
		"--kubeconfig", env.KubeconfigPath(),
		"--node-name", node,
		"--metrics-bind-address", p.metricsAddr,
		"--health-probe-bind-address", p.healthAddr,
		"--state-dir", stateDir,
		"--log-level", "info",
	)
	p.cmd.Args = append(p.cmd.Args, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// The agent must not outlive the benchmark, even one killed by its
	// -timeout.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		b.Fatalf("starting node-agent: %v", err)
	}
	b.Logf("started node-agent (pid %d) for %s; log %s", p.cmd.Process.Pid, node, p.logPath)
	go func() {
		p.done <- p.cmd.Wait()
		logFile.Close()
	}()
	b.Cleanup(func() {
		if p.stopped {
			return
		}
		select {
		case err := <-p.done:
			b.Errorf("node-agent exited during the benchmark: %v\n%s", err, p.logTail(40))
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			b.Errorf("node-agent still running 30s after SIGTERM; killed\n%s", p.logTail(40))
		}
	})
	return p
}

// stop ends the agent with SIGTERM before the benchmark does.
func (p *agentProcess) stop(b *testing.B) {
	b.Helper()
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		b.Errorf("node-agent still running 30s after SIGTERM; killed\n%s", p.logTail(40))
	}
}

// waitReady polls /readyz until the agent has synced its Node.
func (p *agentProcess) waitReady(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			b.Fatalf("node-agent exited before it was ready: %v\n%s", err, p.logTail(40))
		default:
		}
		resp, err := http.Get("http://" + p.healthAddr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("node-agent not ready after a minute; last /readyz: %s\n%s", last, p.logTail(40))
}

// drainSeconds returns the sum of node_agent_drain_duration_seconds over the
// annotation drains that succeeded.
func (p *agentProcess) drainSeconds(b *testing.B) float64 {
	b.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
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

func (p *agentProcess) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
