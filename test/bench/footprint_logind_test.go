package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

// logindAgent is node-agent as a systemd unit in a systemd-nspawn machine
// (the end-to-end tests' rootfs), with its defaults: the labeller on, and
// the shutdown guard holding a delay lock of the machine's real logind. The
// host-process agents of BenchmarkFootprint have no system bus, so their
// guard only retries connecting; this one is the acceptance figure.
type logindAgent struct {
	c           *testenv.Container
	node        string
	metricsAddr string
	healthAddr  string
	ready       time.Time // when logind listed its lock
}

const logindAgentUnit = "node-agent.service"

// startLogindAgent boots the machine and waits until logind lists the
// agent's delay lock. Without the end-to-end prerequisites (root, nspawn,
// the rootfs) it returns nil and says why.
func startLogindAgent(ctx context.Context, b *testing.B, env *testenv.Env, binary, node string) *logindAgent {
	b.Helper()
	if _, missing := testenv.ContainerPrerequisites(); len(missing) > 0 {
		b.Logf("no idle figure with a real logind: %s", strings.Join(missing, "; "))
		return nil
	}
	a := &logindAgent{node: node, metricsAddr: testenv.FreeAddr(b), healthAddr: testenv.FreeAddr(b)}
	a.c = testenv.NewContainer(b, testenv.ContainerOptions{Binds: []testenv.Bind{
		{Host: binary, Container: "/usr/local/bin/node-agent", ReadOnly: true},
		{Host: testenv.HelperBinary(binary), Container: "/usr/local/bin/node-agent-discover", ReadOnly: true},
	}})
	kubeconfig, err := os.ReadFile(env.KubeconfigPath())
	if err != nil {
		b.Fatal(err)
	}
	// The container shares the host's network: the API and the two
	// listeners are on loopback.
	unit := fmt.Sprintf(`[Unit]
After=dbus.service systemd-logind.service

[Service]
ExecStart=/usr/local/bin/node-agent run --kubeconfig=/etc/node-agent/kubeconfig --node-name=%s --metrics-bind-address=%s --health-probe-bind-address=%s

[Install]
WantedBy=multi-user.target
`, node, a.metricsAddr, a.healthAddr)
	for path, data := range map[string]string{
		"/etc/node-agent/kubeconfig":               string(kubeconfig),
		"/etc/systemd/system/" + logindAgentUnit:   unit,
		"/etc/systemd/logind.conf.d/50-bench.conf": "[Login]\nInhibitDelayMaxSec=60\n",
	} {
		if err := a.c.WriteFile(path, []byte(data), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	if err := a.c.Symlink("/etc/systemd/system/"+logindAgentUnit, "/etc/systemd/system/multi-user.target.wants/"+logindAgentUnit); err != nil {
		b.Fatal(err)
	}
	if err := a.c.Boot(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := a.c.WaitReady(ctx); err != nil {
		b.Fatalf("the machine did not boot: %v\n%s", err, a.c.Console())
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !a.locked(ctx) {
		if time.Now().After(deadline) || !a.c.Running() {
			out, _ := a.c.Exec(ctx, "journalctl", "--no-pager", "-u", logindAgentUnit)
			b.Fatalf("logind never listed node-agent's delay lock\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.ready = time.Now()
	return a
}

// locked reports whether `systemd-inhibit --list` shows node-agent's
// shutdown delay lock.
func (a *logindAgent) locked(ctx context.Context) bool {
	_, ok := a.c.DelayLock(ctx)
	return ok
}

// pid finds the agent's process, in the host's PID namespace, by its
// --node-name.
func (a *logindAgent) pid(b *testing.B) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	want := []byte("--node-name=" + a.node + "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.HasPrefix(cmdline, []byte("/usr/local/bin/node-agent\x00run\x00")) && bytes.Contains(cmdline, want) {
			return pid
		}
	}
	b.Fatalf("no node-agent process for %s", a.node)
	return 0
}

// memory reads the agent's memory once it has held its lock for idleFor.
func (a *logindAgent) memory(ctx context.Context, b *testing.B) memory {
	b.Helper()
	if d := time.Until(a.ready.Add(idleFor)); d > 0 {
		time.Sleep(d)
	}
	if !a.locked(ctx) {
		b.Fatal("node-agent no longer holds its delay lock")
	}
	resp, err := http.Get("http://" + a.metricsAddr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return memoryOf(a.pid(b), string(body))
}
