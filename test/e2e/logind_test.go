//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

const (
	busctlLogind = "org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager"
	// hangGuard bounds a whole test, so a stuck container fails the test
	// instead of hanging `go test`. It is not a performance bound.
	hangGuard = 5 * time.Minute
)

func logindProperty(ctx context.Context, t *testing.T, c *testenv.Container, name string) string {
	t.Helper()
	args := append([]string{"busctl", "get-property"}, strings.Fields(busctlLogind)...)
	return strings.TrimSpace(c.MustExec(ctx, append(args, name)...))
}

// poll is waitFor for a cheap condition, checked every 50 ms because the
// logind tests time what follows it.
func poll(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := testenv.Poll(ctx, 50*time.Millisecond, what, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatal(err)
	}
}

func bootReady(ctx context.Context, t *testing.T, c *testenv.Container) time.Duration {
	t.Helper()
	start := time.Now()
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("measured: boot to is-system-running took %s", took.Round(time.Millisecond))
	return took
}

// TestLogindDelaysRebootForInhibitor checks the facts the shutdown guard is
// built on, with systemd's own tools: the default delay, a reload that keeps
// logind's inhibitors, a reboot held by a delay lock, and exit status 133.
func TestLogindDelaysRebootForInhibitor(t *testing.T) {
	rootfs := testenv.RequireContainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	c := testenv.NewContainer(t, testenv.ContainerOptions{Rootfs: rootfs})
	bootReady(ctx, t, c)

	if got := logindProperty(ctx, t, c, "InhibitDelayMaxUSec"); got != "t 5000000" {
		t.Errorf("InhibitDelayMaxUSec = %q, want logind's default t 5000000", got)
	}

	// Raise the delay the way the guard does (drop-in, then SIGHUP through
	// systemd), so that "still running while the lock is held" below does
	// not depend on how fast this machine is.
	if err := c.WriteFile("/etc/systemd/logind.conf.d/50-e2e.conf", []byte("[Login]\nInhibitDelayMaxSec=120\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pidBefore := strings.TrimSpace(c.MustExec(ctx, "systemctl", "show", "-P", "MainPID", "systemd-logind.service"))
	c.MustExec(ctx, "busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
		"org.freedesktop.systemd1.Manager", "KillUnit", "ssi", "systemd-logind.service", "main", "1")
	poll(ctx, t, "logind to reload InhibitDelayMaxSec=120", func() bool {
		return logindProperty(ctx, t, c, "InhibitDelayMaxUSec") == "t 120000000"
	})
	if pidAfter := strings.TrimSpace(c.MustExec(ctx, "systemctl", "show", "-P", "MainPID", "systemd-logind.service")); pidAfter != pidBefore {
		t.Errorf("logind's PID changed from %s to %s on SIGHUP: it restarted instead of reloading, which drops every lock", pidBefore, pidAfter)
	}

	c.MustExec(ctx, "systemd-run", "--unit=e2e-inhibit", "--",
		"systemd-inhibit", "--what=shutdown", "--mode=delay", "--who=e2e", "--why=smoke test", "sleep", "infinity")
	poll(ctx, t, "the e2e delay lock", func() bool {
		return strings.Contains(c.MustExec(ctx, "systemd-inhibit", "--list", "--no-pager"), "e2e")
	})

	c.MustExec(ctx, "systemctl", "reboot")
	poll(ctx, t, "logind to prepare for shutdown", func() bool {
		return logindProperty(ctx, t, c, "PreparingForShutdown") == "b true"
	})
	if !c.Running() {
		t.Fatal("the container went down although a delay lock was held")
	}
	release := time.Now()
	c.MustExec(ctx, "systemctl", "kill", "--signal=SIGKILL", "e2e-inhibit.service")
	code, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("measured: delay lock released to container exit took %s", time.Since(release).Round(time.Millisecond))
	if code != testenv.ExitReboot {
		t.Errorf("systemd-nspawn exited %d, want %d (reboot)", code, testenv.ExitReboot)
	}
}

// Event is a line of guard-probe's events file (see cmd/guard-probe).
type Event struct {
	Time         time.Time `json:"time"`
	Event        string    `json:"event"`
	State        string    `json:"state"`
	Held         bool      `json:"held"`
	InhibitDelay float64   `json:"inhibitDelaySeconds"`
	DrainWindow  float64   `json:"drainWindowSeconds"`
	Deadline     string    `json:"deadline"`
	Detail       string    `json:"detail"`
}

func readEvents(t *testing.T, path string) []Event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line being written
		}
		out = append(out, e)
	}
	return out
}

func findEvent(events []Event, match func(Event) bool) (Event, int) {
	for i, e := range events {
		if match(e) {
			return e, i
		}
	}
	return Event{}, -1
}

func waitEvent(ctx context.Context, t *testing.T, path, what string, match func(Event) bool) Event {
	t.Helper()
	var e Event
	poll(ctx, t, what, func() bool {
		var i int
		e, i = findEvent(readEvents(t, path), match)
		return i >= 0
	})
	return e
}

// buildProbe builds cmd/guard-probe as a static binary for the container,
// whose libc may differ from the host's.
func buildProbe(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "guard-probe")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/guard-probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building guard-probe: %v\n%s", err, b)
	}
	return out
}

type probeRun struct {
	c      *testenv.Container
	shared string // host side of /e2e
	events string
}

func startProbeContainer(ctx context.Context, t *testing.T, rootfs string, preBoot func(*testenv.Container)) *probeRun {
	t.Helper()
	probe := buildProbe(t)
	shared := t.TempDir()
	c := testenv.NewContainer(t, testenv.ContainerOptions{Rootfs: rootfs, Binds: []testenv.Bind{
		{Host: probe, Container: "/usr/local/bin/guard-probe", ReadOnly: true},
		{Host: shared, Container: "/e2e"},
	}})
	if preBoot != nil {
		preBoot(c)
	}
	bootReady(ctx, t, c)
	return &probeRun{c: c, shared: shared, events: filepath.Join(shared, "events.jsonl")}
}

// startProbe runs guard-probe as a systemd service, as node-agent would run.
func (p *probeRun) startProbe(ctx context.Context, t *testing.T, args ...string) {
	t.Helper()
	cmd := append([]string{"systemd-run", "--unit=guard-probe", "--",
		"/usr/local/bin/guard-probe", "--events=/e2e/events.jsonl", "--finish-file=/e2e/finish-drain"}, args...)
	p.c.MustExec(ctx, cmd...)
}

// TestGuardDrainsBeforeRebootOnRealLogind runs pkg/shutdown's Guard and D-Bus
// code against the real logind: it raises the delay with its drop-in, holds
// the lock, gets PrepareForShutdown(true) on `systemctl reboot`, keeps the
// host up while the drain runs, and releases when the drain is done; only
// then does the container reboot. A second boot keeps the drop-in.
func TestGuardDrainsBeforeRebootOnRealLogind(t *testing.T) {
	rootfs := testenv.RequireContainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	p := startProbeContainer(ctx, t, rootfs, nil)
	c := p.c
	p.startProbe(ctx, t, "--drain-budget=120s", "--safety-margin=2s", "--manage-logind-config")

	holding := waitEvent(ctx, t, p.events, "the Guard to hold the lock", func(e Event) bool {
		return e.Event == "status" && e.Held && e.State == "holding"
	})
	if holding.InhibitDelay != 120 || holding.DrainWindow != 118 {
		t.Errorf("Guard reports delay %vs, window %vs; want 120s raised by its drop-in, window 118s", holding.InhibitDelay, holding.DrainWindow)
	}
	if got := logindProperty(ctx, t, c, "InhibitDelayMaxUSec"); got != "t 120000000" {
		t.Errorf("logind's InhibitDelayMaxUSec = %q after the Guard's reload, want t 120000000", got)
	}
	inhibitors := c.MustExec(ctx, "systemd-inhibit", "--list", "--no-pager")
	if !strings.Contains(inhibitors, "node-agent") || !strings.Contains(inhibitors, "delay") {
		t.Errorf("systemd-inhibit --list does not show node-agent's delay lock:\n%s", inhibitors)
	}

	reboot := time.Now()
	c.MustExec(ctx, "systemctl", "reboot")
	started := waitEvent(ctx, t, p.events, "the drain to start", func(e Event) bool { return e.Event == "drain-started" })
	t.Logf("measured: systemctl reboot to PrepareForShutdown handled took %s", started.Time.Sub(reboot).Round(time.Millisecond))
	if got := logindProperty(ctx, t, c, "PreparingForShutdown"); got != "b true" {
		t.Errorf("PreparingForShutdown = %q during the drain, want b true", got)
	}
	if !c.Running() {
		t.Fatal("the container went down while the drain held the lock")
	}

	finish := time.Now()
	if err := os.WriteFile(filepath.Join(p.shared, "finish-drain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	if code != testenv.ExitReboot {
		t.Errorf("systemd-nspawn exited %d, want %d (reboot)", code, testenv.ExitReboot)
	}
	events := readEvents(t, p.events)
	_, iFinished := findEvent(events, func(e Event) bool { return e.Event == "drain-finished" })
	released, iReleased := findEvent(events, func(e Event) bool { return e.Event == "status" && e.State == "released" && !e.Held })
	if iFinished < 0 || iReleased < iFinished {
		t.Errorf("events do not show the drain finishing and then the lock released: %+v", events)
	} else {
		t.Logf("measured: drain finished to lock released took %s; lock released to container exit took %s",
			released.Time.Sub(events[iFinished].Time).Round(time.Millisecond), end.Sub(released.Time).Round(time.Millisecond))
	}
	t.Logf("measured: systemctl reboot to container exit took %s, of which the drain (test-controlled) %s, finish to exit %s",
		end.Sub(reboot).Round(time.Millisecond), finish.Sub(started.Time).Round(time.Millisecond), end.Sub(finish).Round(time.Millisecond))

	// Booting again: the container's changes survive, as on a host.
	bootReady(ctx, t, c)
	if got := logindProperty(ctx, t, c, "InhibitDelayMaxUSec"); got != "t 120000000" {
		t.Errorf("after the reboot InhibitDelayMaxUSec = %q, want the drop-in's t 120000000", got)
	}
}

// TestGuardReleasesAtDeadlineOnRealLogind: a drain that never finishes. The
// Guard releases the lock at its deadline (budget 4s - margin 1s), long
// before logind's own 120 s delay would run out, and the host reboots.
func TestGuardReleasesAtDeadlineOnRealLogind(t *testing.T) {
	rootfs := testenv.RequireContainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	p := startProbeContainer(ctx, t, rootfs, func(c *testenv.Container) {
		// Read by logind at boot; the Guard does not manage it here.
		if err := c.WriteFile("/etc/systemd/logind.conf.d/50-e2e.conf", []byte("[Login]\nInhibitDelayMaxSec=120\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	c := p.c
	p.startProbe(ctx, t, "--hang", "--drain-budget=4s", "--safety-margin=1s")
	holding := waitEvent(ctx, t, p.events, "the Guard to hold the lock", func(e Event) bool {
		return e.Event == "status" && e.Held && e.State == "holding"
	})
	if holding.InhibitDelay != 120 || holding.DrainWindow != 3 {
		t.Errorf("Guard reports delay %vs, window %vs; want 120s from the drop-in, window 3s", holding.InhibitDelay, holding.DrainWindow)
	}

	reboot := time.Now()
	c.MustExec(ctx, "systemctl", "reboot")
	started := waitEvent(ctx, t, p.events, "the drain to start", func(e Event) bool { return e.Event == "drain-started" })
	deadline, err := time.Parse(time.RFC3339Nano, started.Deadline)
	if err != nil {
		t.Fatalf("drain-started deadline %q: %v", started.Deadline, err)
	}
	if d := deadline.Sub(started.Time); d > 3*time.Second {
		t.Errorf("the Guard planned %s of drain, want at most the 3s window", d)
	}
	code, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	if code != testenv.ExitReboot {
		t.Errorf("systemd-nspawn exited %d, want %d (reboot)", code, testenv.ExitReboot)
	}
	events := readEvents(t, p.events)
	_, iStopped := findEvent(events, func(e Event) bool { return e.Event == "drain-stopped" })
	released, iReleased := findEvent(events, func(e Event) bool {
		return e.Event == "status" && e.State == "released" && !e.Held && strings.Contains(e.Detail, "timed out")
	})
	if iStopped < 0 || iReleased < 0 {
		t.Errorf("events do not show the drain stopped at its deadline and the lock released as timed out: %+v", events)
	} else {
		t.Logf("measured: reboot to deadline release took %s; release to container exit took %s; the planned deadline was %s after the drain started",
			released.Time.Sub(reboot).Round(time.Millisecond), end.Sub(released.Time).Round(time.Millisecond), deadline.Sub(started.Time).Round(time.Millisecond))
	}
	t.Logf("measured: systemctl reboot to container exit took %s (logind's own delay: 120s)", end.Sub(reboot).Round(time.Millisecond))
}

// TestRebootThroughLogindWaitsForGuard: shutdown.Logind's Reboot, called by
// a second process as the reboot controller will call it, makes the real
// logind reboot the host, and that reboot waits for the Guard's delay lock
// like `systemctl reboot` does: the drain starts, the host stays up until it
// ends, then the container exits as a reboot.
func TestRebootThroughLogindWaitsForGuard(t *testing.T) {
	rootfs := testenv.RequireContainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	p := startProbeContainer(ctx, t, rootfs, func(c *testenv.Container) {
		if err := c.WriteFile("/etc/systemd/logind.conf.d/50-e2e.conf", []byte("[Login]\nInhibitDelayMaxSec=120\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	c := p.c
	p.startProbe(ctx, t, "--drain-budget=60s", "--safety-margin=1s")
	waitEvent(ctx, t, p.events, "the Guard to hold the lock", func(e Event) bool {
		return e.Event == "status" && e.Held && e.State == "holding"
	})

	c.MustExec(ctx, "/usr/local/bin/guard-probe", "--reboot")
	waitEvent(ctx, t, p.events, "the drain to start on the reboot asked through Reboot", func(e Event) bool { return e.Event == "drain-started" })
	if got := logindProperty(ctx, t, c, "PreparingForShutdown"); got != "b true" {
		t.Errorf("PreparingForShutdown = %q after Reboot, want b true", got)
	}
	if !c.Running() {
		t.Fatal("the container went down while the Guard's lock was held")
	}
	if err := os.WriteFile(filepath.Join(p.shared, "finish-drain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != testenv.ExitReboot {
		t.Errorf("systemd-nspawn exited %d, want %d (reboot, not poweroff)", code, testenv.ExitReboot)
	}
}
