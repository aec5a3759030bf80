package testenv

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/hostcpu/subprocess"
)

// AgentBinaryEnv names a node-agent binary for the tests and the benchmark
// to run instead of building one; `make test` and `make bench` set it to
// bin/node-agent, so the binary is built once for every package.
const AgentBinaryEnv = "NODE_AGENT_BINARY"

var agentBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// AgentBinary returns $NODE_AGENT_BINARY, or else node-agent built from this
// tree once per test process, as `make build` builds it (cgo, -tags
// libvirt_dlopen), so a test never runs a stale binary by accident. Either
// way the discovery helper is beside it (HelperBinary), where node-agent
// looks for it, and so is node-agent-coordinator (CoordinatorBinary; checked
// only by StartCoordinator, so that the tests that run no coordinator run
// with an older bin/). TestMain removes that build with RemoveAgentBuild.
func AgentBinary() (string, error) {
	if p := os.Getenv(AgentBinaryEnv); p != "" {
		for _, f := range []string{p, HelperBinary(p)} {
			if fi, err := os.Stat(f); err != nil || fi.Mode().Perm()&0o111 == 0 {
				return "", fmt.Errorf("$%s=%s: %s is not an executable file (%v); run `make build` or unset it", AgentBinaryEnv, p, f, err)
			}
		}
		return p, nil
	}
	agentBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "node-agent-test-")
		if err != nil {
			agentBuild.err = err
			return
		}
		agentBuild.dir = dir
		// A directory as -o: one build writes both binaries there.
		cmd := exec.Command("go", "build", "-tags", "libvirt_dlopen", "-o", dir+"/", ModulePath+"/cmd/node-agent", ModulePath+"/cmd/node-agent-discover", ModulePath+"/cmd/"+CoordinatorName)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if msg, err := cmd.CombinedOutput(); err != nil {
			agentBuild.err = fmt.Errorf("building node-agent: %w\n%s", err, msg)
			return
		}
		agentBuild.path = filepath.Join(dir, "node-agent")
	})
	return agentBuild.path, agentBuild.err
}

// HelperBinary is the discovery helper of the node-agent at agent: the file
// beside it, where node-agent looks (subprocess.FindHelper).
func HelperBinary(agent string) string {
	return filepath.Join(filepath.Dir(agent), subprocess.HelperName)
}

// RemoveAgentBuild removes the binary AgentBinary built, if it built one.
func RemoveAgentBuild() {
	if agentBuild.dir != "" {
		_ = os.RemoveAll(agentBuild.dir)
	}
}

// AgentOptions says how to run `node-agent run`.
type AgentOptions struct {
	// Binary is the node-agent to run (see AgentBinary).
	Binary     string
	Kubeconfig string
	Node       string
	// LogLevel defaults to debug.
	LogLevel string
	// Args are added after the ones StartAgent sets.
	Args []string
	// Dir holds the agent's state directory and log; default a new
	// temporary directory. Give the same Dir to a second agent to start it
	// warm (the QEMU capability cache stays in the state directory).
	Dir string
}

// Agent is a running `node-agent run`. Its log (stdout and stderr) goes to
// LogPath.
type Agent struct {
	child
	MetricsAddr string
	HealthAddr  string
	StateDir    string
}

// StartAgent runs node-agent with free ports for its metrics and probes and
// a state directory of its own, and kills it when the test ends if it is
// still running. A caller that wants a graceful stop calls Stop in a cleanup
// of its own, registered after StartAgent (so it runs first).
func StartAgent(tb testing.TB, o AgentOptions) *Agent {
	tb.Helper()
	dir := o.Dir
	if dir == "" {
		dir = tb.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	a := &Agent{MetricsAddr: FreeAddr(tb), HealthAddr: FreeAddr(tb), StateDir: filepath.Join(dir, "state")}
	level := o.LogLevel
	if level == "" {
		level = "debug"
	}
	a.start(tb, "node-agent", filepath.Join(dir, "node-agent.log"), exec.Command(o.Binary, append([]string{"run",
		"--kubeconfig", o.Kubeconfig,
		"--node-name", o.Node,
		"--metrics-bind-address", a.MetricsAddr,
		"--health-probe-bind-address", a.HealthAddr,
		"--state-dir", a.StateDir,
		"--log-level", level,
	}, o.Args...)...))
	tb.Logf("started node-agent (pid %d) for %s; log %s", a.Cmd.Process.Pid, o.Node, a.LogPath)
	tb.Cleanup(a.kill)
	return a
}

// WaitReady polls /readyz until it answers 200, for at most a minute.
func (a *Agent) WaitReady(tb testing.TB) {
	tb.Helper()
	a.waitReady(tb, a.HealthAddr)
}

// child is a program a test runs (node-agent, node-agent-coordinator), its
// output in a log file of its own.
type child struct {
	Cmd     *exec.Cmd
	LogPath string
	name    string
	done    chan error
}

// start runs cmd with its output to logPath; it fails the test when cmd
// cannot start.
func (c *child) start(tb testing.TB, name, logPath string, cmd *exec.Cmd) {
	tb.Helper()
	c.Cmd, c.LogPath, c.name, c.done = cmd, logPath, name, make(chan error, 1)
	logFile, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The child must not outlive the test, even one killed by its -timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		tb.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		c.done <- cmd.Wait()
		logFile.Close()
	}()
}

// Exited reports whether the program has exited, and with what.
func (c *child) Exited() (error, bool) {
	select {
	case err := <-c.done:
		c.done <- err
		return err, true
	default:
		return nil, false
	}
}

// waitReady polls http://addr/readyz until it answers 200, for at most a
// minute.
func (c *child) waitReady(tb testing.TB, addr string) {
	tb.Helper()
	c.waitProbe(tb, addr, "/readyz")
}

// waitProbe polls http://addr<path>?verbose until it answers 200, for at
// most a minute.
func (c *child) waitProbe(tb testing.TB, addr, path string) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	for time.Now().Before(deadline) {
		if err, exited := c.Exited(); exited {
			tb.Fatalf("%s exited before it was ready: %v\n%s", c.name, err, c.Tail(40))
		}
		resp, err := http.Get("http://" + addr + path + "?verbose")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
			if resp.StatusCode == http.StatusOK {
				return
			}
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	tb.Fatalf("%s not ready after a minute; last %s: %s\n%s", c.name, path, last, c.Tail(40))
}

// Stop sends SIGTERM and returns the exit error; it kills the program and
// fails the test when it is still running 30 s later.
func (c *child) Stop(tb testing.TB) error {
	tb.Helper()
	if err, exited := c.Exited(); exited {
		return err
	}
	if err := c.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(30 * time.Second):
		_ = c.Cmd.Process.Kill()
		tb.Fatalf("%s still running 30s after SIGTERM; killed\n%s", c.name, c.Tail(40))
		return nil
	}
}

// Kill kills the program, as a crash or an OOM kill would, and waits for
// it.
func (c *child) Kill(tb testing.TB) {
	tb.Helper()
	c.kill()
}

func (c *child) kill() {
	if _, exited := c.Exited(); exited {
		return
	}
	// An error here is a process that exited meanwhile; Wait says so.
	_ = c.Cmd.Process.Kill()
	err := <-c.done
	c.done <- err
}

// Log returns the program's log so far.
func (c *child) Log() string {
	b, err := os.ReadFile(c.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// Tail returns up to n last lines of the program's log.
func (c *child) Tail(n int) string { return TailFile(c.LogPath, n) }

// FreeAddr returns a loopback address with a port free at the time of the
// call.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Tail returns up to n last lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
