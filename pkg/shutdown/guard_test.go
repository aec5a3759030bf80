package shutdown

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeLock is one delay lock handed out by fakeLogind. released is closed
// when the Guard closes its end, seen the way logind sees it: EOF on a pipe.
type fakeLock struct {
	released chan struct{}
}

func newPipeLock(t *testing.T) (*os.File, *fakeLock) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLock{released: make(chan struct{})}
	go func() {
		defer r.Close()
		_, _ = io.Copy(io.Discard, r)
		close(l.released)
	}()
	return w, l
}

func (l *fakeLock) isReleased() bool {
	select {
	case <-l.released:
		return true
	default:
		return false
	}
}

// fakeLogind is a Logind in memory.
type fakeLogind struct {
	t       *testing.T
	prepare chan bool
	lost    chan struct{}
	locks   chan *fakeLock

	mu         sync.Mutex
	delay      time.Duration
	preparing  bool
	inhibitErr error
	dropInDir  string // ReloadConfig reads InhibitDelayMaxSec from here
	reloads    int
	err        error
	closed     bool
}

func newFakeLogind(t *testing.T, delay time.Duration) *fakeLogind {
	return &fakeLogind{
		t:       t,
		prepare: make(chan bool, 8),
		lost:    make(chan struct{}),
		locks:   make(chan *fakeLock, 8),
		delay:   delay,
	}
}

func (f *fakeLogind) InhibitDelayMax(context.Context) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delay, nil
}

func (f *fakeLogind) PreparingForShutdown(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.preparing, nil
}

func (f *fakeLogind) InhibitShutdown(context.Context, string) (*os.File, error) {
	if f.inhibitErr != nil {
		return nil, f.inhibitErr
	}
	w, l := newPipeLock(f.t)
	f.locks <- l
	return w, nil
}

var dropInDelay = regexp.MustCompile(`(?m)^InhibitDelayMaxSec=(\d+)$`)

func (f *fakeLogind) ReloadConfig(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloads++
	if f.dropInDir == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(f.dropInDir, DropInName))
	if err != nil {
		return err
	}
	m := dropInDelay.FindSubmatch(data)
	if m == nil {
		return fmt.Errorf("no InhibitDelayMaxSec in %q", data)
	}
	secs, _ := strconv.Atoi(string(m[1]))
	f.delay = time.Duration(secs) * time.Second
	return nil
}

// Reboot is not called by the Guard.
func (f *fakeLogind) Reboot(context.Context) error {
	f.t.Error("the Guard asked logind to reboot")
	return errors.New("fakeLogind: Reboot is not expected")
}

func (f *fakeLogind) PrepareForShutdown() <-chan bool { return f.prepare }
func (f *fakeLogind) Lost() <-chan struct{}           { return f.lost }

func (f *fakeLogind) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeLogind) lose(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
	close(f.lost)
}

func (f *fakeLogind) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

func (f *fakeLogind) reloadCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reloads
}

func (f *fakeLogind) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// fakeConnector hands the Guard whatever the test queues, one per attempt.
type fakeConnector struct {
	results chan connectResult
	calls   chan struct{}
}

type connectResult struct {
	l   Logind
	err error
}

func newFakeConnector() *fakeConnector {
	return &fakeConnector{results: make(chan connectResult, 8), calls: make(chan struct{}, 8)}
}

func (c *fakeConnector) connect(ctx context.Context) (Logind, error) {
	c.calls <- struct{}{}
	select {
	case r := <-c.results:
		return r.l, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fakeDrainer records calls; Drain does what the test's behaviour says.
type fakeDrainer struct {
	calls    chan drainCall
	undos    chan struct{}
	behave   func(ctx context.Context) (Result, error)
	undoErr  error
	mu       sync.Mutex
	returned int
}

type drainCall struct {
	ctx      context.Context
	deadline time.Time
}

func newFakeDrainer(behave func(ctx context.Context) (Result, error)) *fakeDrainer {
	return &fakeDrainer{calls: make(chan drainCall, 8), undos: make(chan struct{}, 8), behave: behave}
}

func (d *fakeDrainer) Drain(ctx context.Context, deadline time.Time) (Result, error) {
	d.calls <- drainCall{ctx, deadline}
	r, err := d.behave(ctx)
	d.mu.Lock()
	d.returned++
	d.mu.Unlock()
	return r, err
}

func (d *fakeDrainer) Undo(context.Context) error {
	d.undos <- struct{}{}
	return d.undoErr
}

// drainUntilCancelled is a drain that only ends when the Guard cancels it.
func drainUntilCancelled(ctx context.Context) (Result, error) {
	<-ctx.Done()
	return Result{Message: "cancelled"}, nil
}

// drainIgnoringContext never returns: a drainer stuck on the apiserver.
func drainIgnoringContext(release <-chan struct{}) func(context.Context) (Result, error) {
	return func(context.Context) (Result, error) {
		<-release
		return Result{}, nil
	}
}

var t0 = time.Date(2025, 5, 20, 10, 0, 0, 0, time.UTC)

type guardHarness struct {
	t       *testing.T
	g       *Guard
	clock   *clocktesting.FakeClock
	conn    *fakeConnector
	drainer *fakeDrainer
	reg     *prometheus.Registry
	done    chan error
	cancel  context.CancelFunc
}

func startGuard(t *testing.T, drainer *fakeDrainer, mutate func(*GuardOptions)) *guardHarness {
	t.Helper()
	h := &guardHarness{
		t:       t,
		clock:   clocktesting.NewFakeClock(t0),
		conn:    newFakeConnector(),
		drainer: drainer,
		reg:     prometheus.NewRegistry(),
		done:    make(chan error, 1),
	}
	opts := GuardOptions{
		Connect:      h.conn.connect,
		Drainer:      drainer,
		DrainBudget:  5 * time.Minute,
		SafetyMargin: 2 * time.Second,
		Clock:        h.clock,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:      NewMetrics(h.reg),
		Rand:         func() float64 { return 0.5 },
	}
	if mutate != nil {
		mutate(&opts)
	}
	g, err := NewGuard(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// connectTo answers the Guard's next connection attempt with l and returns
// the lock it takes.
func (h *guardHarness) connectTo(l *fakeLogind) *fakeLock {
	h.t.Helper()
	h.conn.results <- connectResult{l: l}
	return recv(h.t, l.locks, "the Guard to take a delay lock")
}

func (h *guardHarness) waitState(s State) {
	h.t.Helper()
	eventually(h.t, "state "+string(s), func() bool { return h.g.Status().State == s })
}

func (h *guardHarness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	return gatherValue(h.t, h.reg, name, labels...)
}

// stepWhenWaiting advances the fake clock once the Guard has a timer set.
func (h *guardHarness) stepWhenWaiting(d time.Duration) {
	h.t.Helper()
	eventually(h.t, "the Guard to wait on its clock", h.clock.HasWaiters)
	h.clock.Step(d)
}

func TestDrainWindow(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		delay, budget, margin time.Duration
		want                  time.Duration
	}{
		{"logind's default delay caps a large budget", 5 * time.Second, 5 * time.Minute, 2 * time.Second, 3 * time.Second},
		{"budget below the delay", 10 * time.Minute, 5 * time.Minute, 2 * time.Second, 5*time.Minute - 2*time.Second},
		{"raised delay equal to the budget", 120 * time.Second, 120 * time.Second, 2 * time.Second, 118 * time.Second},
		{"no margin", 5 * time.Second, time.Minute, 0, 5 * time.Second},
		{"margin eats the delay", 2 * time.Second, time.Minute, 2 * time.Second, 0},
		{"margin beyond the delay", time.Second, time.Minute, 2 * time.Second, -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := drainWindow(tc.delay, tc.budget, tc.margin); got != tc.want {
				t.Errorf("drainWindow(%s, %s, %s) = %s, want %s", tc.delay, tc.budget, tc.margin, got, tc.want)
			}
		})
	}
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	for _, tc := range []struct {
		n        int
		rand     float64
		min, max time.Duration
	}{
		{1, 0, 500 * time.Millisecond, 500 * time.Millisecond},
		{1, 0.999, 500 * time.Millisecond, time.Second},
		{2, 0, time.Second, time.Second},
		{4, 0.999, 4 * time.Second, 8 * time.Second},
		{7, 0, 30 * time.Second, 30 * time.Second},
		{100, 0.999, 30 * time.Second, time.Minute},
	} {
		g := &Guard{opts: GuardOptions{ReconnectInitial: time.Second, ReconnectMax: time.Minute, Rand: func() float64 { return tc.rand }}}
		got := g.backoff(tc.n)
		if got < tc.min || got > tc.max {
			t.Errorf("backoff(%d) with rand %v = %s, want within [%s, %s]", tc.n, tc.rand, got, tc.min, tc.max)
		}
	}
}

func TestNewGuardValidates(t *testing.T) {
	_, err := NewGuard(GuardOptions{SafetyMargin: -time.Second, ManageLogindConfig: true})
	if err == nil {
		t.Fatal("NewGuard accepted empty options")
	}
	for _, want := range []string{"Connect is nil", "Drainer is nil", "drainBudget", "safetyMargin", "logindDropInDir"} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(err.Error()) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestGuardDrainsThenReleases(t *testing.T) {
	drainer := newFakeDrainer(func(context.Context) (Result, error) { return Result{Complete: true, Message: "30 pods evicted"}, nil })
	var mu sync.Mutex
	var seen []Status
	h := startGuard(t, drainer, func(o *GuardOptions) {
		o.OnStatus = func(s Status) {
			mu.Lock()
			seen = append(seen, s)
			mu.Unlock()
		}
	})
	l := newFakeLogind(t, 5*time.Second)
	lock := h.connectTo(l)
	h.waitState(StateHolding)
	if got := h.metric("node_agent_shutdown_delay_lock_held"); got != 1 {
		t.Errorf("delay_lock_held = %v while holding, want 1", got)
	}
	if got := h.metric("node_agent_shutdown_inhibit_delay_seconds"); got != 5 {
		t.Errorf("inhibit_delay_seconds = %v, want 5", got)
	}

	l.prepare <- true
	call := recv(t, drainer.calls, "Drain to be called")
	// The budget (5m) is capped by logind's 5s delay, less the 2s margin.
	if want := t0.Add(3 * time.Second); !call.deadline.Equal(want) {
		t.Errorf("Drain deadline = %s, want now + min(5s delay, 5m budget) - 2s margin = %s", call.deadline, want)
	}
	recv(t, lock.released, "the lock to be released after the drain")
	h.waitState(StateReleased)
	if got := h.metric("node_agent_shutdown_drains_total", "result", "drained"); got != 1 {
		t.Errorf("drains_total{result=drained} = %v, want 1", got)
	}
	if got := h.metric("node_agent_shutdown_delay_lock_held"); got != 0 {
		t.Errorf("delay_lock_held = %v after release, want 0", got)
	}
	if got := h.metric("node_agent_shutdown_guard_state", "state", "released"); got != 1 {
		t.Errorf("guard_state{state=released} = %v, want 1", got)
	}

	// OnStatus saw every step, in order.
	mu.Lock()
	defer mu.Unlock()
	var steps []string
	for _, s := range seen {
		steps = append(steps, fmt.Sprintf("%s/held=%v", s.State, s.DelayLockHeld))
	}
	want := []string{
		"connecting/held=true", // lock taken
		"connecting/held=true", // delay read
		"holding/held=true",
		"draining/held=true",  // PrepareForShutdown(true)
		"draining/held=false", // drained, released
		"released/held=false",
	}
	if fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Errorf("OnStatus saw %v, want %v", steps, want)
	}
}

func TestGuardResultLabels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		behave func(context.Context) (Result, error)
		want   Outcome
	}{
		{"incomplete", func(context.Context) (Result, error) { return Result{Message: "3 pods blocked by a PDB"}, nil }, OutcomeIncomplete},
		{"failed", func(context.Context) (Result, error) { return Result{}, errors.New("apiserver unreachable") }, OutcomeFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drainer := newFakeDrainer(tc.behave)
			h := startGuard(t, drainer, nil)
			l := newFakeLogind(t, 5*time.Second)
			lock := h.connectTo(l)
			h.waitState(StateHolding)
			l.prepare <- true
			recv(t, drainer.calls, "Drain to be called")
			recv(t, lock.released, "the lock to be released")
			h.waitState(StateReleased)
			if got := h.metric("node_agent_shutdown_drains_total", "result", string(tc.want)); got != 1 {
				t.Errorf("drains_total{result=%s} = %v, want 1", tc.want, got)
			}
		})
	}
}

func TestGuardReleasesAtDeadlineWhenDrainHangs(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	drainer := newFakeDrainer(drainIgnoringContext(stuck))
	h := startGuard(t, drainer, func(o *GuardOptions) { o.DrainBudget = 30 * time.Second })
	l := newFakeLogind(t, 120*time.Second)
	lock := h.connectTo(l)
	h.waitState(StateHolding)

	l.prepare <- true
	call := recv(t, drainer.calls, "Drain to be called")
	if want := t0.Add(28 * time.Second); !call.deadline.Equal(want) {
		t.Errorf("Drain deadline = %s, want now + 30s budget - 2s margin = %s", call.deadline, want)
	}
	h.stepWhenWaiting(28*time.Second - time.Nanosecond)
	if lock.isReleased() || !h.g.Status().DelayLockHeld {
		t.Fatal("lock released before the deadline")
	}
	h.clock.Step(time.Nanosecond)
	recv(t, lock.released, "the lock to be released at the deadline although Drain hangs")
	recv(t, call.ctx.Done(), "Drain's context to be cancelled at the deadline")
	h.waitState(StateReleased)
	if got := h.metric("node_agent_shutdown_drains_total", "result", "timeout"); got != 1 {
		t.Errorf("drains_total{result=timeout} = %v, want 1", got)
	}
}

func TestGuardSkipsDrainWithoutTime(t *testing.T) {
	drainer := newFakeDrainer(func(context.Context) (Result, error) { return Result{Complete: true}, nil })
	h := startGuard(t, drainer, func(o *GuardOptions) { o.SafetyMargin = 5 * time.Second })
	l := newFakeLogind(t, 5*time.Second)
	lock := h.connectTo(l)
	h.waitState(StateHolding)
	if got := h.g.Status().DrainWindow; got != 0 {
		t.Errorf("DrainWindow = %s, want 0", got)
	}
	l.prepare <- true
	recv(t, lock.released, "the lock to be released at once")
	h.waitState(StateReleased)
	if got := h.metric("node_agent_shutdown_drains_total", "result", "skipped"); got != 1 {
		t.Errorf("drains_total{result=skipped} = %v, want 1", got)
	}
	select {
	case <-drainer.calls:
		t.Error("Drain was called with no time to drain")
	default:
	}
}

func TestGuardCancelDuringDrainKeepsLockAndUndoes(t *testing.T) {
	drainer := newFakeDrainer(drainUntilCancelled)
	h := startGuard(t, drainer, nil)
	l := newFakeLogind(t, 5*time.Second)
	lock := h.connectTo(l)
	h.waitState(StateHolding)

	l.prepare <- true
	call := recv(t, drainer.calls, "Drain to be called")
	h.waitState(StateDraining)
	l.prepare <- false
	recv(t, call.ctx.Done(), "Drain's context to be cancelled by PrepareForShutdown(false)")
	recv(t, drainer.undos, "Undo to be called")
	h.waitState(StateHolding)
	if lock.isReleased() || !h.g.Status().DelayLockHeld {
		t.Error("the lock was released although the shutdown was cancelled during the drain")
	}
	if got := h.metric("node_agent_shutdown_drains_total", "result", "cancelled"); got != 1 {
		t.Errorf("drains_total{result=cancelled} = %v, want 1", got)
	}

	// The same lock guards the next shutdown.
	l.prepare <- true
	recv(t, drainer.calls, "Drain to be called for the second shutdown")
}

func TestGuardCancelAfterReleaseTakesLockAgain(t *testing.T) {
	drainer := newFakeDrainer(func(context.Context) (Result, error) { return Result{Complete: true}, nil })
	h := startGuard(t, drainer, nil)
	l := newFakeLogind(t, 5*time.Second)
	first := h.connectTo(l)
	h.waitState(StateHolding)

	l.prepare <- true
	recv(t, first.released, "the first lock to be released after the drain")
	h.waitState(StateReleased)

	l.prepare <- false
	recv(t, drainer.undos, "Undo to be called after the cancellation")
	second := recv(t, l.locks, "a new lock to be taken after the cancellation")
	h.waitState(StateHolding)
	if second.isReleased() || h.metric("node_agent_shutdown_delay_lock_held") != 1 {
		t.Error("the new lock is not held")
	}
}

func TestGuardCancelledDrainThatHangsIsUndoneAfterUndoWait(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	drainer := newFakeDrainer(drainIgnoringContext(stuck))
	h := startGuard(t, drainer, func(o *GuardOptions) { o.UndoWait = 7 * time.Second })
	l := newFakeLogind(t, 60*time.Second)
	h.connectTo(l)
	h.waitState(StateHolding)
	l.prepare <- true
	recv(t, drainer.calls, "Drain to be called")
	h.waitState(StateDraining)
	l.prepare <- false
	// Two timers now: the drain deadline (gone once we return) and UndoWait.
	eventually(t, "the Guard to wait for the cancelled drain", func() bool { return h.clock.Waiters() >= 2 })
	select {
	case <-drainer.undos:
		t.Fatal("Undo ran before the cancelled drain returned or UndoWait passed")
	default:
	}
	h.clock.Step(7 * time.Second)
	recv(t, drainer.undos, "Undo to run after UndoWait")
	h.waitState(StateHolding)
}

func TestGuardReconnectsAndTakesLockAgain(t *testing.T) {
	drainer := newFakeDrainer(drainUntilCancelled)
	h := startGuard(t, drainer, func(o *GuardOptions) {
		o.ReconnectInitial = time.Second
		o.ReconnectMax = 8 * time.Second
	})
	first := newFakeLogind(t, 5*time.Second)
	lock := h.connectTo(first)
	h.waitState(StateHolding)
	recv(t, h.conn.calls, "the first connection attempt")

	first.lose(errors.New("logind restarted"))
	recv(t, lock.released, "the dead connection's lock to be closed")
	recv(t, h.conn.calls, "an immediate reconnection attempt")
	if got := h.metric("node_agent_shutdown_delay_lock_held"); got != 0 {
		t.Errorf("delay_lock_held = %v while disconnected, want 0", got)
	}
	h.waitState(StateReconnecting)
	if !first.isClosed() {
		t.Error("the lost connection was not closed")
	}

	// logind is still away: the Guard backs off on its clock.
	h.conn.results <- connectResult{err: fmt.Errorf("dial: %w", ErrNoLogind)}
	h.stepWhenWaiting(time.Second) // 1st backoff: [0.5s, 1s]
	recv(t, h.conn.calls, "a retry after the first backoff")
	h.conn.results <- connectResult{err: errors.New("connection refused")}
	h.stepWhenWaiting(2 * time.Second) // 2nd backoff: [1s, 2s]
	recv(t, h.conn.calls, "a retry after the second backoff")

	second := newFakeLogind(t, 5*time.Second)
	h.conn.results <- connectResult{l: second}
	recv(t, second.locks, "the lock to be taken again after reconnecting")
	h.waitState(StateHolding)
	if got := h.metric("node_agent_shutdown_delay_lock_held"); got != 1 {
		t.Errorf("delay_lock_held = %v after reconnecting, want 1", got)
	}
}

func TestGuardKeepsDrainingWhenLogindLostMidDrain(t *testing.T) {
	drainer := newFakeDrainer(drainUntilCancelled)
	h := startGuard(t, drainer, nil)
	l := newFakeLogind(t, 60*time.Second)
	lock := h.connectTo(l)
	h.waitState(StateHolding)
	l.prepare <- true
	call := recv(t, drainer.calls, "Drain to be called")
	h.waitState(StateDraining)

	l.lose(errors.New("bus closed"))
	select {
	case <-call.ctx.Done():
		t.Fatal("losing logind cancelled the drain")
	default:
	}
	h.stepWhenWaiting(58 * time.Second)
	recv(t, lock.released, "the lock to be released at the deadline")
	// Then the Guard notices the loss and reconnects.
	recv(t, h.conn.calls, "the first connection attempt")
	recv(t, h.conn.calls, "a reconnection attempt after the drain")
}

func TestGuardUnavailableReturnsQuietly(t *testing.T) {
	for _, cause := range []error{ErrNoSystemBus, ErrNoLogind, ErrNotSupported} {
		t.Run(cause.Error(), func(t *testing.T) {
			h := startGuard(t, newFakeDrainer(drainUntilCancelled), nil)
			h.conn.results <- connectResult{err: fmt.Errorf("connecting to the system bus at unix:path=/nowhere: %w", cause)}
			if err := recv(t, h.done, "Run to return"); err != nil {
				t.Errorf("Run = %v, want nil: a host without logind must not stop the agent", err)
			}
			h.done <- nil // for the cleanup
			st := h.g.Status()
			if st.State != StateUnavailable || st.Message == "" {
				t.Errorf("Status = %+v, want state unavailable with the cause", st)
			}
			if got := h.metric("node_agent_shutdown_guard_state", "state", "unavailable"); got != 1 {
				t.Errorf("guard_state{state=unavailable} = %v, want 1", got)
			}
		})
	}
}

func TestGuardRetriesTransientFirstFailure(t *testing.T) {
	h := startGuard(t, newFakeDrainer(drainUntilCancelled), nil)
	h.conn.results <- connectResult{err: errors.New("connection reset by peer")}
	recv(t, h.conn.calls, "the first attempt")
	h.stepWhenWaiting(time.Second)
	recv(t, h.conn.calls, "a retry")
	h.connectTo(newFakeLogind(t, 5*time.Second))
	h.waitState(StateHolding)
}

func TestGuardBacksOffWhenLogindRefusesTheLock(t *testing.T) {
	h := startGuard(t, newFakeDrainer(drainUntilCancelled), nil)
	refusing := newFakeLogind(t, 5*time.Second)
	refusing.inhibitErr = errors.New("org.freedesktop.DBus.Error.AccessDenied: Permission denied")
	h.conn.results <- connectResult{l: refusing}
	recv(t, h.conn.calls, "the first attempt")
	// A connection that works but yields no lock must not be retried in a
	// tight loop: the next attempt waits for the backoff.
	eventually(t, "the Guard to back off", h.clock.HasWaiters)
	select {
	case <-h.conn.calls:
		t.Fatal("reconnected without backing off after the lock was refused")
	default:
	}
	if !refusing.isClosed() {
		t.Error("the connection that refused the lock was not closed")
	}
	h.clock.Step(time.Second)
	recv(t, h.conn.calls, "a retry after the backoff")
	h.connectTo(newFakeLogind(t, 5*time.Second))
	h.waitState(StateHolding)
}

func TestGuardWaitsOutShutdownInProgressAtConnect(t *testing.T) {
	h := startGuard(t, newFakeDrainer(drainUntilCancelled), nil)
	l := newFakeLogind(t, 5*time.Second)
	l.preparing = true
	h.conn.results <- connectResult{l: l}
	h.waitState(StateReleased)
	select {
	case <-l.locks:
		t.Fatal("took a lock during a shutdown already in progress")
	default:
	}
	l.prepare <- false
	recv(t, l.locks, "a lock after the shutdown was cancelled")
	h.waitState(StateHolding)
}

func TestGuardRaisesLogindDelayWhenAllowed(t *testing.T) {
	dir := t.TempDir()
	h := startGuard(t, newFakeDrainer(drainUntilCancelled), func(o *GuardOptions) {
		o.DrainBudget = 2 * time.Minute
		o.ManageLogindConfig = true
		o.LogindDropInDir = dir
	})
	l := newFakeLogind(t, 5*time.Second)
	l.dropInDir = dir
	h.connectTo(l)
	h.waitState(StateHolding)
	st := h.g.Status()
	if st.InhibitDelay != 2*time.Minute || st.DrainWindow != 118*time.Second {
		t.Errorf("Status = %+v, want InhibitDelay 2m0s and DrainWindow 1m58s after the reload", st)
	}
	if n := l.reloadCount(); n != 1 {
		t.Errorf("logind reloaded %d times, want 1", n)
	}
	data, err := os.ReadFile(filepath.Join(dir, DropInName))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\[Login\]\nInhibitDelayMaxSec=120$`).Match(data) {
		t.Errorf("drop-in = %q, want [Login] InhibitDelayMaxSec=120", data)
	}
}

func TestGuardLeavesLogindConfigAloneByDefault(t *testing.T) {
	dir := t.TempDir()
	h := startGuard(t, newFakeDrainer(drainUntilCancelled), func(o *GuardOptions) {
		o.DrainBudget = 2 * time.Minute
		o.LogindDropInDir = dir
	})
	l := newFakeLogind(t, 5*time.Second)
	l.dropInDir = dir
	h.connectTo(l)
	h.waitState(StateHolding)
	if st := h.g.Status(); st.InhibitDelay != 5*time.Second || st.DrainWindow != 3*time.Second {
		t.Errorf("Status = %+v, want logind's 5s delay to cap the window at 3s", st)
	}
	if n := l.reloadCount(); n != 0 {
		t.Errorf("logind reloaded %d times without shutdown.manageLogindConfig", n)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("wrote %v without shutdown.manageLogindConfig", entries)
	}
}

func TestGuardReleasesLockWhenStopped(t *testing.T) {
	h := startGuard(t, newFakeDrainer(drainUntilCancelled), nil)
	l := newFakeLogind(t, 5*time.Second)
	lock := h.connectTo(l)
	h.waitState(StateHolding)
	h.cancel()
	recv(t, lock.released, "the lock to be released when the agent stops")
	if err := recv(t, h.done, "Run to return"); err != nil {
		t.Errorf("Run = %v", err)
	}
	h.done <- nil
	if st := h.g.Status(); st.State != StateStopped || st.DelayLockHeld {
		t.Errorf("Status = %+v, want stopped without the lock", st)
	}
}

// recv waits for a value on ch; the test's own deadline bounds the wait.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timeout := time.After(testWait(t))
	select {
	case v := <-ch:
		return v
	case <-timeout:
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// eventually polls cond until it holds; the test's own deadline bounds it.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(testWait(t))
	for !cond() {
		select {
		case <-timeout:
			t.Fatalf("gave up waiting for %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// testWait is how long a helper waits for something that should happen
// promptly before declaring a hang: a guard against deadlock, not a
// performance bound.
func testWait(t *testing.T) time.Duration {
	if d, ok := t.Deadline(); ok {
		return max(time.Until(d)-5*time.Second, time.Second)
	}
	return time.Minute
}

func gatherValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s%v not registered", name, labels)
	return 0
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
