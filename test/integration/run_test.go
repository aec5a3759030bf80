package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/test/testenv"
)

// agentProcess is a running `node-agent run`.
type agentProcess struct {
	cmd         *exec.Cmd
	metricsAddr string
	healthAddr  string
	stateDir    string
	stderr      *syncBuffer
	// checkedLog, when set, bounds the part of the log checked for refusals:
	// a restarted kube-apiserver refuses every user (the controller manager
	// too) until its RBAC cache has synced.
	checkedLog int
	done       chan error
}

// startAgent runs node-agent for node against env with the given extra args.
func startAgent(t *testing.T, env *testenv.Env, node string, args ...string) *agentProcess {
	t.Helper()
	p := &agentProcess{metricsAddr: freeAddr(t), healthAddr: freeAddr(t), stateDir: t.TempDir(), stderr: &syncBuffer{}, done: make(chan error, 1)}
	all := append([]string{"run",
		"--kubeconfig", agentKubeconfig(t, env, node),
		"--node-name", node,
		"--metrics-bind-address", p.metricsAddr,
		"--health-probe-bind-address", p.healthAddr,
		"--state-dir", p.stateDir,
		"--log-level", "debug",
	}, args...)
	if !slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--libvirt-uri") || strings.HasPrefix(a, "--config") || strings.HasPrefix(a, "--labeller-enabled")
	}) {
		// Tests that do not look at labels skip CPU discovery: on this kind
		// of machine it keeps a core busy for about 20 s.
		all = append(all, "--labeller-enabled=false")
	}
	p.cmd = exec.Command(agentBinary, all...)
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started node-agent (pid %d) for %s", p.cmd.Process.Pid, node)
	go func() { p.done <- p.cmd.Wait() }()
	_, asServiceAccount := identities.Load(env)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		// Running as the shipped ServiceAccount, any refused request is a
		// failure, also one the agent only logs (an Event, a condition).
		if asServiceAccount {
			log := p.stderr.String()
			if p.checkedLog > 0 {
				log = log[:p.checkedLog]
			}
			if lines := grepLines(log, "forbidden", 5); lines != "" {
				t.Errorf("node-agent, running as %s, was refused requests:\n%s", agentUser, lines)
			}
		}
		if t.Failed() {
			t.Logf("node-agent log:\n%s", tail(p.stderr.String(), 60))
		}
	})
	return p
}

// waitReady polls /readyz until it answers 200.
func (p *agentProcess) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("node-agent exited before it was ready: %v\n%s", err, tail(p.stderr.String(), 40))
		default:
		}
		resp, err := http.Get("http://" + p.healthAddr + "/readyz?verbose")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
			if resp.StatusCode == http.StatusOK {
				t.Logf("/readyz: %s", strings.TrimSpace(string(body)))
				return
			}
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("node-agent not ready after 60s; last /readyz: %s", last)
}

// stop sends SIGTERM and returns the exit error.
func (p *agentProcess) stop(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("node-agent still running 30s after SIGTERM\n%s", tail(p.stderr.String(), 40))
		return nil
	}
}

func TestRunServesMetricsAndStopsOnSIGTERM(t *testing.T) {
	env := testenv.StartForTest(t, testenv.Options{Controllers: false, Scheduler: false})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if err := env.AddNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}

	// The default configuration: labelling on, so SIGTERM may come in the
	// middle of CPU discovery.
	p := startAgent(t, env, "node-1", "--labeller-enabled=true")
	p.waitReady(t)

	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var buildInfo string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "node_agent_build_info{") {
			buildInfo = line
		}
	}
	if buildInfo == "" {
		t.Fatalf("/metrics has no node_agent_build_info:\n%s", tail(string(body), 20))
	}
	t.Logf("metrics: %s", buildInfo)
	if !strings.Contains(string(body), "go_goroutines") || !strings.Contains(string(body), "process_cpu_seconds_total") {
		t.Errorf("/metrics lacks the Go or process collector")
	}

	start := time.Now()
	if err := p.stop(t); err != nil {
		t.Fatalf("node-agent exited with %v after SIGTERM, want status 0\n%s", err, tail(p.stderr.String(), 40))
	}
	t.Logf("node-agent exited 0, %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	if n := hostcpu.KillProbes(hostcpu.EmbedRoot("auto", p.stateDir)); n > 0 {
		t.Errorf("node-agent left %d QEMU capability probes running after it stopped", n)
	}
}

func TestRunNotReadyWithoutItsNode(t *testing.T) {
	env := testenv.StartForTest(t, testenv.Options{Controllers: false, Scheduler: false, Kwok: false})
	p := startAgent(t, env, "no-such-node")
	// Wait for the agent to serve, then check it stays not ready.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.healthAddr + "/readyz")
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("/readyz ready for a Node that does not exist: %s", body)
		}
		if strings.Contains(string(body), "not found") {
			t.Logf("/readyz: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("/readyz never reported the missing Node")
}

func TestRunRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	unknownKey := filepath.Join(dir, "unknown.yaml")
	if err := os.WriteFile(unknownKey, []byte("nodeName: node-1\nlabeller:\n  minCpuModel: Haswell\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badValue := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badValue, []byte("nodeName: node-1\ndrain:\n  timeout: soon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{name: "unknown config key", args: []string{"--config", unknownKey}, want: `unknown field "labeller.minCpuModel"`},
		{name: "bad config value", args: []string{"--config", badValue}, want: "drain.timeout"},
		{name: "empty node name", args: nil, env: []string{"NODE_NAME="}, want: "nodeName: empty"},
		{name: "unknown flag", args: []string{"--node-name=a", "--no-such-flag"}, want: "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(agentBinary, append([]string{"run", "--kubeconfig", "/nonexistent"}, tt.args...)...)
			cmd.Env = append(os.Environ(), tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if err == nil {
				t.Fatalf("exit 0, want non-zero; stderr: %s", stderr.String())
			}
			msg := strings.TrimSpace(stderr.String())
			if !strings.Contains(msg, tt.want) {
				t.Errorf("stderr %q does not contain %q", msg, tt.want)
			}
			if strings.Count(msg, "\n") != 0 {
				t.Errorf("error is not one line:\n%s", msg)
			}
			t.Logf("exit %v: %s", err, msg)
		})
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
