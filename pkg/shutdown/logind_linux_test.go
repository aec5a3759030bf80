//go:build linux

package shutdown

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// These tests run the real D-Bus implementation against a logind stand-in
// served on a private dbus-daemon: the inhibitor descriptor really crosses
// the bus (SCM_RIGHTS), and the stand-in sees its release as EOF on the read
// end of a pipe, as logind sees it on its FIFO.

// privateBus is a dbus-daemon listening only on a socket in a temporary
// directory.
type privateBus struct {
	t       *testing.T
	dir     string
	address string
	cmd     *exec.Cmd
	exited  chan struct{}
	stderr  lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`

func requireDBusDaemon(t *testing.T) string {
	t.Helper()
	if testing.Short() && os.Getenv("NODE_AGENT_INTEGRATION") != "1" {
		t.Skip("starts dbus-daemon; skipped with -short")
	}
	path, err := exec.LookPath("dbus-daemon")
	if err != nil {
		if os.Getenv("NODE_AGENT_E2E") == "1" {
			t.Fatalf("dbus-daemon not found (%v); run hack/install-deps.sh dbus", err)
		}
		t.Skipf("dbus-daemon not found (%v); run hack/install-deps.sh dbus, or set NODE_AGENT_E2E=1 to make this a failure", err)
	}
	return path
}

// newPrivateBus starts a bus; a socket path must fit in sun_path (108 bytes),
// so the directory is a short one under os.TempDir rather than t.TempDir.
func newPrivateBus(t *testing.T) *privateBus {
	t.Helper()
	requireDBusDaemon(t)
	dir, err := os.MkdirTemp("", "na-bus-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := &privateBus{t: t, dir: dir}
	b.start()
	t.Cleanup(func() {
		b.stop()
		if t.Failed() {
			t.Logf("dbus-daemon's messages:\n%s", b.stderr.String())
		}
	})
	return b
}

func (b *privateBus) start() {
	b.t.Helper()
	sock := filepath.Join(b.dir, "bus")
	_ = os.Remove(sock) // left behind by a killed daemon
	conf := filepath.Join(b.dir, "bus.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, busConfig, sock), 0o644); err != nil {
		b.t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	// Its messages are shown only when the test fails, and never through
	// t.Log from exec's copying goroutine, which may outlive the test.
	cmd.Stderr = &b.stderr
	// Should the test binary die without its cleanups, the daemon goes too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("starting dbus-daemon: %v", err)
	}
	b.cmd = cmd
	b.exited = make(chan struct{})
	// The daemon prints its address once it listens.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		b.t.Fatalf("dbus-daemon did not print its address: %v", err)
	}
	if !strings.HasPrefix(line, "unix:path="+sock) {
		b.t.Fatalf("dbus-daemon listens at %q, want %s", line, sock)
	}
	// Without the guid the printed address carries, so that the address
	// stays the same when the bus restarts, as the system bus's does.
	b.address = "unix:path=" + sock
	go func() {
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(b.exited)
	}()
}

// stop kills the daemon as a crash would: every connection drops at once.
func (b *privateBus) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Kill()
	<-b.exited
	b.cmd = nil
}

// standIn plays systemd-logind (and the one systemd method logind's reload
// needs) on a private bus.
type standIn struct {
	t       *testing.T
	conn    *dbus.Conn
	locks   chan *standInLock
	reloads chan string
	reboots chan bool // the interactive argument of each Reboot call

	mu        sync.Mutex
	delay     time.Duration
	preparing bool
	dropInDir string
	// rebootErr, when set, is logind's refusal of Reboot.
	rebootErr *dbus.Error
	// inhibitGate, when set, holds every Inhibit call until it is closed;
	// each held call is announced on inhibitHeld first.
	inhibitGate chan struct{}
	inhibitHeld chan struct{}
}

// standInLock is one inhibitor as the stand-in sees it.
type standInLock struct {
	what, who, why, mode string
	// w is the stand-in's copy of the write end. godbus sends the reply after
	// the method returns and offers no hook after that, so the copy stays
	// open until seal: call it once the client has the descriptor.
	w *os.File
	// released is closed when the read end sees EOF: every copy of the
	// write end, the client's included, is closed.
	released chan struct{}
}

func (l *standInLock) seal() { _ = l.w.Close() }

func (l *standInLock) isReleased() bool {
	select {
	case <-l.released:
		return true
	default:
		return false
	}
}

func newStandIn(t *testing.T, address string, delay time.Duration) *standIn {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatalf("stand-in: connecting to %s: %v", address, err)
	}
	s := &standIn{t: t, conn: conn, delay: delay, locks: make(chan *standInLock, 8), reloads: make(chan string, 8),
		reboots: make(chan bool, 8), inhibitHeld: make(chan struct{}, 8)}
	for _, e := range []struct {
		v     any
		path  dbus.ObjectPath
		iface string
	}{
		{standInManager{s}, LogindPath, LogindInterface},
		{standInProperties{s}, LogindPath, "org.freedesktop.DBus.Properties"},
		{standInSystemd{s}, systemdPath, systemdInterface},
	} {
		if err := conn.Export(e.v, e.path, e.iface); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{LogindBusName, systemdBusName} {
		reply, err := conn.RequestName(name, dbus.NameFlagDoNotQueue)
		if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
			t.Fatalf("stand-in: owning %s: reply %v, %v", name, reply, err)
		}
	}
	t.Cleanup(s.leave)
	return s
}

// leave drops the stand-in's connection: the bus announces that
// org.freedesktop.login1 has no owner, as when logind exits.
func (s *standIn) leave() { _ = s.conn.Close() }

func (s *standIn) emitPrepareForShutdown(active bool) {
	s.t.Helper()
	s.mu.Lock()
	s.preparing = active
	s.mu.Unlock()
	if err := s.conn.Emit(LogindPath, LogindInterface+".PrepareForShutdown", active); err != nil {
		s.t.Fatalf("stand-in: emitting PrepareForShutdown(%v): %v", active, err)
	}
}

type standInManager struct{ s *standIn }

func (m standInManager) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	m.s.mu.Lock()
	gate := m.s.inhibitGate
	m.s.mu.Unlock()
	if gate != nil {
		m.s.inhibitHeld <- struct{}{}
		<-gate
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	fd := dbus.UnixFD(w.Fd())
	l := &standInLock{what: what, who: who, why: why, mode: mode, w: w, released: make(chan struct{})}
	go func() {
		defer r.Close()
		_, _ = io.Copy(io.Discard, r)
		close(l.released)
	}()
	m.s.locks <- l
	return fd, nil
}

func (m standInManager) Reboot(interactive bool) *dbus.Error {
	m.s.reboots <- interactive
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	return m.s.rebootErr
}

type standInProperties struct{ s *standIn }

func (p standInProperties) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if iface != LogindInterface {
		return dbus.Variant{}, dbus.MakeFailedError(fmt.Errorf("no interface %s", iface))
	}
	switch name {
	case "InhibitDelayMaxUSec":
		return dbus.MakeVariant(uint64(p.s.delay / time.Microsecond)), nil
	case "PreparingForShutdown":
		return dbus.MakeVariant(p.s.preparing), nil
	}
	return dbus.Variant{}, dbus.MakeFailedError(fmt.Errorf("no property %s", name))
}

type standInSystemd struct{ s *standIn }

// KillUnit with SIGHUP for systemd-logind.service re-reads the drop-in, as
// logind does on SIGHUP.
func (m standInSystemd) KillUnit(unit, who string, signal int32) *dbus.Error {
	m.s.reloads <- fmt.Sprintf("%s %s %d", unit, who, signal)
	if unit != logindUnit || syscall.Signal(signal) != syscall.SIGHUP {
		return nil
	}
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if m.s.dropInDir == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(m.s.dropInDir, DropInName))
	if err != nil {
		return dbus.MakeFailedError(err)
	}
	if sm := dropInDelay.FindSubmatch(data); sm != nil {
		secs, _ := strconv.Atoi(string(sm[1]))
		m.s.delay = time.Duration(secs) * time.Second
	}
	return nil
}

func TestConnectTalksToLogind(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 5*time.Second)
	ctx := context.Background()

	l, err := Connect(ctx, bus.address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	if d, err := l.InhibitDelayMax(ctx); err != nil || d != 5*time.Second {
		t.Errorf("InhibitDelayMax = %s, %v; want 5s", d, err)
	}
	if p, err := l.PreparingForShutdown(ctx); err != nil || p {
		t.Errorf("PreparingForShutdown = %v, %v; want false", p, err)
	}

	f, err := l.InhibitShutdown(ctx, "testing")
	if err != nil {
		t.Fatal(err)
	}
	lock := recv(t, si.locks, "the stand-in to hand out a lock")
	lock.seal()
	if lock.what != "shutdown" || lock.who != Who || lock.why != "testing" || lock.mode != "delay" {
		t.Errorf("Inhibit(%q, %q, %q, %q), want (shutdown, %s, testing, delay)", lock.what, lock.who, lock.why, lock.mode, Who)
	}
	if lock.isReleased() {
		t.Fatal("the stand-in saw the lock released while the client holds it")
	}

	si.emitPrepareForShutdown(true)
	if v := recv(t, l.PrepareForShutdown(), "PrepareForShutdown(true)"); !v {
		t.Error("PrepareForShutdown delivered false, want true")
	}
	si.emitPrepareForShutdown(false)
	if v := recv(t, l.PrepareForShutdown(), "PrepareForShutdown(false)"); v {
		t.Error("PrepareForShutdown delivered true, want false")
	}

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	recv(t, lock.released, "the stand-in to see the lock's descriptor closed")

	if err := l.ReloadConfig(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := recv(t, si.reloads, "KillUnit"), fmt.Sprintf("systemd-logind.service main %d", syscall.SIGHUP); got != want {
		t.Errorf("KillUnit(%s), want (%s)", got, want)
	}

	select {
	case <-l.Lost():
		t.Fatalf("Lost closed on a healthy connection: %v", l.Err())
	default:
	}
}

func TestConnectReboot(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 5*time.Second)
	ctx := context.Background()
	l, err := Connect(ctx, bus.address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	if err := l.Reboot(ctx); err != nil {
		t.Fatalf("Reboot = %v", err)
	}
	if interactive := recv(t, si.reboots, "logind to be asked to reboot"); interactive {
		t.Error("Reboot(interactive=true), want false: an agent cannot answer a polkit prompt")
	}

	si.mu.Lock()
	si.rebootErr = &dbus.Error{Name: "org.freedesktop.login1.BlockedByInhibitorLock", Body: []any{"Operation inhibited by someone"}}
	si.mu.Unlock()
	err = l.Reboot(ctx)
	recv(t, si.reboots, "the second Reboot call")
	if !isDBusError(err, "org.freedesktop.login1.BlockedByInhibitorLock") {
		t.Errorf("Reboot refused by logind = %v, want logind's BlockedByInhibitorLock", err)
	}
}

// A lock that logind hands out after the caller gave up must not stay held:
// nobody would release it, and it would delay the next shutdown.
func TestConnectInhibitReleasesALateLock(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 5*time.Second)
	l, err := Connect(context.Background(), bus.address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	gate := make(chan struct{})
	si.mu.Lock()
	si.inhibitGate = gate
	si.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-si.inhibitHeld
		cancel()
	}()
	if f, err := l.InhibitShutdown(ctx, "testing"); !errors.Is(err, context.Canceled) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("InhibitShutdown with its context cancelled mid-call = %v, want context.Canceled", err)
	}
	close(gate)
	lock := recv(t, si.locks, "the stand-in to hand out the late lock")
	lock.seal()
	recv(t, lock.released, "the late lock to be released")
}

// envSystemBus is where godbus's SystemBus and go-systemd's login1.New look
// for the system bus; Connect must neither need it nor touch it.
const envSystemBus = "DBUS_SYSTEM_BUS_ADDRESS"

// Connect dials the address it is given, whatever DBUS_SYSTEM_BUS_ADDRESS
// says or whether it is set, takes the delay lock on that bus, and leaves
// the variable as it found it.
func TestConnectIgnoresTheEnvironment(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 5*time.Second)
	elsewhere := "unix:path=" + filepath.Join(t.TempDir(), "not-the-bus")
	for _, env := range []*string{&elsewhere, nil} {
		name := "unset"
		if env != nil {
			name = "elsewhere"
		}
		t.Run(name, func(t *testing.T) {
			t.Setenv(envSystemBus, "") // restored after the subtest
			if env == nil {
				os.Unsetenv(envSystemBus)
			} else {
				os.Setenv(envSystemBus, *env)
			}
			l, err := Connect(context.Background(), bus.address)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			f, err := l.InhibitShutdown(context.Background(), "testing")
			if err != nil {
				t.Fatalf("InhibitShutdown = %v, want a lock from the bus at %s", err, bus.address)
			}
			recv(t, si.locks, "the stand-in to hand out the lock").seal()
			f.Close()
			got, set := os.LookupEnv(envSystemBus)
			if env == nil && set {
				t.Errorf("%s = %q after Connect, want it unset as before", envSystemBus, got)
			}
			if env != nil && got != *env {
				t.Errorf("%s = %q after Connect, want %q as before", envSystemBus, got, *env)
			}
		})
	}
}

func TestConnectIgnoresSignalsFromOthers(t *testing.T) {
	bus := newPrivateBus(t)
	newStandIn(t, bus.address, 5*time.Second)
	l, err := Connect(context.Background(), bus.address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	impostor, err := dbus.Connect(bus.address)
	if err != nil {
		t.Fatal(err)
	}
	defer impostor.Close()
	if err := impostor.Emit(LogindPath, LogindInterface+".PrepareForShutdown", true); err != nil {
		t.Fatal(err)
	}
	// A round trip through logind after the impostor's signal: had the
	// signal got through, it would be queued by now.
	if _, err := l.InhibitDelayMax(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-l.PrepareForShutdown():
		t.Errorf("delivered PrepareForShutdown(%v) from a process that is not logind", v)
	default:
	}
}

func TestConnectUnavailable(t *testing.T) {
	t.Run("no bus", func(t *testing.T) {
		_, err := Connect(context.Background(), "unix:path="+filepath.Join(t.TempDir(), "no-such-socket"))
		if !errors.Is(err, ErrNoSystemBus) || !IsUnavailable(err) {
			t.Errorf("Connect = %v, want ErrNoSystemBus", err)
		}
	})
	t.Run("no logind", func(t *testing.T) {
		bus := newPrivateBus(t)
		_, err := Connect(context.Background(), bus.address)
		if !errors.Is(err, ErrNoLogind) || !IsUnavailable(err) {
			t.Errorf("Connect = %v, want ErrNoLogind", err)
		}
	})
}

func TestConnectLostWhenLogindLeaves(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 5*time.Second)
	l, err := Connect(context.Background(), bus.address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	si.leave()
	recv(t, l.Lost(), "Lost after logind left the bus")
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "left the system bus") {
		t.Errorf("Err = %v, want one saying logind left the bus", err)
	}
}

func TestConnectLostWhenBusStops(t *testing.T) {
	bus := newPrivateBus(t)
	newStandIn(t, bus.address, 5*time.Second)
	l, err := Connect(context.Background(), bus.address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bus.stop()
	recv(t, l.Lost(), "Lost after the bus stopped")
	if err := l.Err(); err == nil {
		t.Error("Err = nil after Lost")
	}
}

// dbusGuard is a Guard on the real D-Bus implementation with a fake clock.
func dbusGuard(t *testing.T, bus *privateBus, drainer *fakeDrainer, mutate func(*GuardOptions)) *guardHarness {
	t.Helper()
	h := startGuard(t, drainer, func(o *GuardOptions) {
		o.Connect = func(ctx context.Context) (Logind, error) { return Connect(ctx, bus.address) }
		o.ReconnectInitial = time.Second
		o.ReconnectMax = 4 * time.Second
		if mutate != nil {
			mutate(o)
		}
	})
	return h
}

// nextLock waits for the Guard to take a lock from si and to hold it.
func (h *guardHarness) nextLock(si *standIn) *standInLock {
	h.t.Helper()
	l := recv(h.t, si.locks, "the Guard to take a lock")
	// The Guard marks the lock held only after the reply reached it, so the
	// stand-in's copy of the descriptor can go now.
	eventually(h.t, "the Guard to hold the lock", func() bool { return h.g.Status().DelayLockHeld })
	l.seal()
	return l
}

func TestGuardOverDBusDrainsThenReleases(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 5*time.Second)
	drainer := newFakeDrainer(func(context.Context) (Result, error) { return Result{Complete: true}, nil })
	h := dbusGuard(t, bus, drainer, nil)
	lock := h.nextLock(si)
	h.waitState(StateHolding)

	si.emitPrepareForShutdown(true)
	call := recv(t, drainer.calls, "Drain to be called")
	if want := t0.Add(3 * time.Second); !call.deadline.Equal(want) {
		t.Errorf("deadline %s, want %s", call.deadline, want)
	}
	recv(t, lock.released, "the stand-in to see the lock released after the drain")
	if got := h.metric("node_agent_shutdown_drains_total", "result", "drained"); got != 1 {
		t.Errorf("drains_total{result=drained} = %v, want 1", got)
	}

	// Cancelled after the release: undo and a new lock.
	si.emitPrepareForShutdown(false)
	recv(t, drainer.undos, "Undo after the cancellation")
	again := h.nextLock(si)
	h.waitState(StateHolding)
	if again.isReleased() {
		t.Error("the lock taken after the cancellation is already released")
	}
}

func TestGuardOverDBusCancelDuringDrain(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 5*time.Second)
	drainer := newFakeDrainer(drainUntilCancelled)
	h := dbusGuard(t, bus, drainer, nil)
	lock := h.nextLock(si)

	si.emitPrepareForShutdown(true)
	call := recv(t, drainer.calls, "Drain to be called")
	si.emitPrepareForShutdown(false)
	recv(t, call.ctx.Done(), "the drain to be cancelled")
	recv(t, drainer.undos, "Undo")
	h.waitState(StateHolding)
	if lock.isReleased() {
		t.Error("the lock was released although the shutdown was cancelled during the drain")
	}
}

func TestGuardOverDBusReleasesAtDeadline(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 120*time.Second)
	stuck := make(chan struct{})
	defer close(stuck)
	drainer := newFakeDrainer(drainIgnoringContext(stuck))
	h := dbusGuard(t, bus, drainer, func(o *GuardOptions) { o.DrainBudget = time.Minute })
	lock := h.nextLock(si)

	si.emitPrepareForShutdown(true)
	recv(t, drainer.calls, "Drain to be called")
	h.stepWhenWaiting(58 * time.Second)
	recv(t, lock.released, "the stand-in to see the lock released at the deadline although Drain hangs")
	if got := h.metric("node_agent_shutdown_drains_total", "result", "timeout"); got != 1 {
		t.Errorf("drains_total{result=timeout} = %v, want 1", got)
	}
}

func TestGuardOverDBusReconnectsAfterLogindLeaves(t *testing.T) {
	bus := newPrivateBus(t)
	first := newStandIn(t, bus.address, 5*time.Second)
	h := dbusGuard(t, bus, newFakeDrainer(drainUntilCancelled), nil)
	lock := h.nextLock(first)

	first.leave()
	recv(t, lock.released, "the old lock to be closed once logind left")
	// The immediate reconnection finds no logind; the Guard backs off.
	eventually(t, "the Guard to back off", h.clock.HasWaiters)
	if st := h.g.Status(); st.State != StateReconnecting || st.DelayLockHeld {
		t.Errorf("Status = %+v, want reconnecting without a lock", st)
	}
	second := newStandIn(t, bus.address, 5*time.Second)
	h.clock.Step(4 * time.Second)
	h.nextLock(second)
	h.waitState(StateHolding)
}

func TestGuardOverDBusReconnectsAfterBusRestart(t *testing.T) {
	bus := newPrivateBus(t)
	first := newStandIn(t, bus.address, 5*time.Second)
	h := dbusGuard(t, bus, newFakeDrainer(drainUntilCancelled), nil)
	lock := h.nextLock(first)

	bus.stop()
	recv(t, lock.released, "the old lock to be closed once the bus went away")
	eventually(t, "the Guard to back off", h.clock.HasWaiters)
	bus.start()
	second := newStandIn(t, bus.address, 5*time.Second)
	h.clock.Step(4 * time.Second)
	h.nextLock(second)
	h.waitState(StateHolding)
	if got := h.metric("node_agent_shutdown_delay_lock_held"); got != 1 {
		t.Errorf("delay_lock_held = %v after the bus came back, want 1", got)
	}
}

func TestGuardOverDBusRaisesDelay(t *testing.T) {
	bus := newPrivateBus(t)
	si := newStandIn(t, bus.address, 5*time.Second)
	dir := t.TempDir()
	si.mu.Lock()
	si.dropInDir = dir
	si.mu.Unlock()
	h := dbusGuard(t, bus, newFakeDrainer(drainUntilCancelled), func(o *GuardOptions) {
		o.DrainBudget = 2 * time.Minute
		o.ManageLogindConfig = true
		o.LogindDropInDir = dir
	})
	h.nextLock(si)
	h.waitState(StateHolding)
	if got := recv(t, si.reloads, "logind to be asked to reload"); !strings.HasPrefix(got, logindUnit+" main ") {
		t.Errorf("KillUnit(%s), want systemd-logind.service main SIGHUP", got)
	}
	if st := h.g.Status(); st.InhibitDelay != 2*time.Minute {
		t.Errorf("InhibitDelay in force = %s, want 2m0s read back from logind after the reload", st.InhibitDelay)
	}
}
