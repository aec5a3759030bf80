package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/test/testenv"
)

// agentProcess is a running `node-agent run` (testenv.Agent) whose log the
// test checks for refused requests when it runs as the shipped
// ServiceAccount.
type agentProcess struct {
	*testenv.Agent
	// checkedLog, when set, bounds the part of the log checked for refusals:
	// a restarted kube-apiserver refuses every user (the controller manager
	// too) until its RBAC cache has synced.
	checkedLog int
}

// startAgent runs node-agent for node against env with the given extra args,
// and the drain slot coordinator for env with the first agent (coordinatorFor;
// withoutCoordinator turns that off).
func startAgent(t *testing.T, env *testenv.Env, node string, args ...string) *agentProcess {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--libvirt-uri") || strings.HasPrefix(a, "--config") || strings.HasPrefix(a, "--labeller-enabled")
	}) {
		// Tests that do not look at labels skip CPU discovery: on this kind
		// of machine it keeps a core busy for about 20 s.
		args = append(slices.Clone(args), "--labeller-enabled=false")
	}
	coordinatorFor(t, env, args)
	p := &agentProcess{Agent: testenv.StartAgent(t, testenv.AgentOptions{
		Binary: agentBinary, Kubeconfig: agentKubeconfig(t, env, node), Node: node, Args: args,
	})}
	_, asServiceAccount := identities.Load(env)
	t.Cleanup(func() {
		// Running as the shipped ServiceAccount, any refused request is a
		// failure, also one the agent only logs (an Event, a condition).
		if asServiceAccount {
			log := p.Log()
			if p.checkedLog > 0 {
				log = log[:p.checkedLog]
			}
			if lines := grepLines(log, "forbidden", 5); lines != "" {
				t.Errorf("node-agent, running as %s, was refused requests:\n%s", agentUser, lines)
			}
		}
		if t.Failed() {
			t.Logf("node-agent log:\n%s", p.Tail(60))
		}
	})
	return p
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
	p.WaitReady(t)

	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
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
		t.Fatalf("/metrics has no node_agent_build_info:\n%s", testenv.Tail(string(body), 20))
	}
	t.Logf("metrics: %s", buildInfo)
	if !strings.Contains(string(body), "go_goroutines") || !strings.Contains(string(body), "process_cpu_seconds_total") {
		t.Errorf("/metrics lacks the Go or process collector")
	}

	start := time.Now()
	if err := p.Stop(t); err != nil {
		t.Fatalf("node-agent exited with %v after SIGTERM, want status 0\n%s", err, p.Tail(40))
	}
	t.Logf("node-agent exited 0, %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	if n := hostcpu.KillProbes(hostcpu.EmbedRoot("auto", p.StateDir)); n > 0 {
		t.Errorf("node-agent left %d QEMU capability probes running after it stopped", n)
	}
}

func TestRunNotReadyWithoutItsNode(t *testing.T) {
	env := testenv.StartForTest(t, testenv.Options{Controllers: false, Scheduler: false, Kwok: false})
	p := startAgent(t, env, "no-such-node")
	// Wait for the agent to serve, then check it stays not ready.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.HealthAddr + "/readyz")
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
	if err := os.WriteFile(unknownKey, []byte("logLevel: info\nlabeller:\n  minCpuModel: Haswell\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badValue := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badValue, []byte("logLevel: info\ndrain:\n  timeout: soon\n"), 0o600); err != nil {
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
