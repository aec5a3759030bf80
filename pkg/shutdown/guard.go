package shutdown

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Drainer is what the Guard hands a shutdown to: the agent wires it to the
// self-drain engine, so that the Guard knows nothing about Kubernetes.
type Drainer interface {
	// Drain moves the workloads off the node because the host is going down.
	// It returns when the node is drained or when ctx is cancelled. The Guard
	// cancels ctx at deadline, measured on its own clock (ctx carries no
	// deadline of its own, so that a fake clock drives it in tests), then
	// releases the lock without waiting for Drain to return: logind would not
	// wait either. Anything Drain wants recorded must be written before
	// deadline.
	Drain(ctx context.Context, deadline time.Time) (Result, error)
	// Undo reverses what Drain did after logind cancelled the shutdown
	// (PrepareForShutdown(false)): stop evicting, uncordon what Drain
	// cordoned. The Guard calls it after cancelling Drain's context and
	// waiting, for at most GuardOptions.UndoWait, for Drain to return.
	Undo(ctx context.Context) error
}

// DrainerFuncs is a Drainer made of plain functions, so that the wiring
// can hand the Guard another package's methods without either package
// importing the other (the kubelet's nodeshutdown takes KillPodFunc the same
// way).
type DrainerFuncs struct {
	DrainFunc func(ctx context.Context, deadline time.Time) (Result, error)
	UndoFunc  func(ctx context.Context) error
}

// Drain implements Drainer.
func (f DrainerFuncs) Drain(ctx context.Context, deadline time.Time) (Result, error) {
	return f.DrainFunc(ctx, deadline)
}

// Undo implements Drainer.
func (f DrainerFuncs) Undo(ctx context.Context) error { return f.UndoFunc(ctx) }

// Result is what a Drain achieved.
type Result struct {
	// Complete is true when everything that had to leave the node has left.
	Complete bool
	// Message says what is left or what happened, for the log.
	Message string
}

// Outcome is the result label of node_agent_shutdown_drains_total.
type Outcome string

const (
	// OutcomeDrained: Drain returned Complete before the deadline.
	OutcomeDrained Outcome = "drained"
	// OutcomeIncomplete: Drain returned before the deadline without
	// finishing, for example because it gave up on a blocked eviction.
	OutcomeIncomplete Outcome = "incomplete"
	// OutcomeTimeout: the deadline came first; the lock was released anyway.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeFailed: Drain returned an error.
	OutcomeFailed Outcome = "failed"
	// OutcomeCancelled: logind cancelled the shutdown during the drain.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeSkipped: logind's delay minus the safety margin left no time,
	// so the lock was released at once without draining.
	OutcomeSkipped Outcome = "skipped"
)

// State is where the Guard is, for /readyz details and the
// node_agent_shutdown_guard_state metric.
type State string

const (
	// StateConnecting: connecting to logind for the first time.
	StateConnecting State = "connecting"
	// StateHolding: the delay lock is held; waiting for a shutdown.
	StateHolding State = "holding"
	// StateDraining: a shutdown started; Drain runs while the lock is held.
	StateDraining State = "draining"
	// StateReleased: the lock was released for a shutdown in progress;
	// waiting for the host to go down, or for a cancellation.
	StateReleased State = "released"
	// StateReconnecting: the bus or logind went away, or a connection
	// attempt failed; retrying with backoff. No lock is held.
	StateReconnecting State = "reconnecting"
	// StateUnavailable: there is no system bus or no logind on this host.
	// The Guard has stopped; the rest of the agent runs on.
	StateUnavailable State = "unavailable"
	// StateStopped: Run returned because its context ended.
	StateStopped State = "stopped"
)

// Status is a snapshot of the Guard.
type Status struct {
	State State
	// Message explains State, e.g. the error behind StateUnavailable.
	Message string
	// DelayLockHeld is true while the delay lock is held.
	DelayLockHeld bool
	// InhibitDelay is logind's InhibitDelayMaxUSec in force; zero until read.
	InhibitDelay time.Duration
	// DrainWindow is how long a drain may run: min(InhibitDelay,
	// DrainBudget) - SafetyMargin.
	DrainWindow time.Duration
}

// GuardOptions configures a Guard. Connect and Drainer are required.
type GuardOptions struct {
	// Connect opens a connection to logind; the Guard calls it again after
	// the connection is lost. Usually
	// func(ctx) { return shutdown.Connect(ctx, cfg.Shutdown.SystemBusAddress) }.
	Connect func(ctx context.Context) (Logind, error)
	// Drainer drains the node when the host shuts down.
	Drainer Drainer
	// DrainBudget (shutdown.drainBudget) is the time wanted to drain.
	DrainBudget time.Duration
	// SafetyMargin (shutdown.safetyMargin) ends the drain this long before
	// logind's delay expires, so the lock is released by node-agent and not
	// by logind's timeout.
	SafetyMargin time.Duration
	// ManageLogindConfig (shutdown.manageLogindConfig) allows writing a
	// drop-in into LogindDropInDir that raises InhibitDelayMaxSec to
	// DrainBudget, and asking logind to reload.
	ManageLogindConfig bool
	// LogindDropInDir (shutdown.logindDropInDir) is where that drop-in goes.
	LogindDropInDir string
	// Why is the reason shown by `systemd-inhibit --list`.
	Why string
	// Clock drives deadlines and backoff; default the real clock.
	Clock clock.Clock
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Metrics, from NewMetrics, receive the Guard's state; nil keeps a set
	// that no registry serves.
	Metrics *Metrics
	// ReconnectInitial and ReconnectMax bound the jittered exponential
	// backoff between connection attempts; defaults 1s and 1m.
	ReconnectInitial, ReconnectMax time.Duration
	// UndoWait bounds how long a cancelled Drain may take to return before
	// Undo runs anyway; default 10s.
	UndoWait time.Duration
	// Rand returns a number in [0,1) for jitter; default math/rand/v2.
	Rand func() float64
	// OnStatus, if set, is called with every change of Status, in order,
	// from Run's goroutine; it must return quickly. Use it to mirror the
	// Guard into conditions or events without polling.
	OnStatus func(Status)
}

// Guard holds a logind delay lock and turns a host shutdown into a drain
// bounded by logind's delay. Build it with NewGuard and call Run once.
type Guard struct {
	opts      GuardOptions
	log       *slog.Logger
	metrics   *Metrics
	toldLimit bool // logged once that logind caps the budget

	mu     sync.Mutex
	status Status
}

// NewGuard checks opts and fills in defaults.
func NewGuard(opts GuardOptions) (*Guard, error) {
	var errs []error
	if opts.Connect == nil {
		errs = append(errs, errors.New("shutdown guard: Connect is nil; pass a function that calls shutdown.Connect"))
	}
	if opts.Drainer == nil {
		errs = append(errs, errors.New("shutdown guard: Drainer is nil"))
	}
	if opts.DrainBudget <= 0 {
		errs = append(errs, fmt.Errorf("shutdown guard: shutdown.drainBudget %s must be positive", opts.DrainBudget))
	}
	if opts.SafetyMargin < 0 {
		errs = append(errs, fmt.Errorf("shutdown guard: shutdown.safetyMargin %s must not be negative", opts.SafetyMargin))
	}
	if opts.ManageLogindConfig && opts.LogindDropInDir == "" {
		errs = append(errs, errors.New("shutdown guard: shutdown.manageLogindConfig is set but shutdown.logindDropInDir is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Why == "" {
		opts.Why = "Draining the node (moving VMs and pods off) before the host shuts down"
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReconnectInitial <= 0 {
		opts.ReconnectInitial = time.Second
	}
	if opts.ReconnectMax < opts.ReconnectInitial {
		opts.ReconnectMax = max(time.Minute, opts.ReconnectInitial)
	}
	if opts.UndoWait <= 0 {
		opts.UndoWait = 10 * time.Second
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	g := &Guard{
		opts:    opts,
		log:     opts.Logger.With("component", "shutdown"),
		metrics: opts.Metrics,
	}
	// Set before Run, so OnStatus is not called from NewGuard.
	g.status.State = StateConnecting
	g.metrics.setState(StateConnecting)
	return g, nil
}

// Detail is s in one line, for the agent's /readyz details: the state,
// and what explains it.
func (s Status) Detail() string {
	if s.Message == "" {
		return string(s.State)
	}
	return string(s.State) + ": " + s.Message
}

// Status returns a snapshot for /readyz details.
func (g *Guard) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status
}

// update applies change to the status and reports the result.
func (g *Guard) update(change func(*Status)) {
	g.mu.Lock()
	before := g.status
	change(&g.status)
	after := g.status
	g.mu.Unlock()
	if after != before && g.opts.OnStatus != nil {
		g.opts.OnStatus(after)
	}
}

func (g *Guard) setState(s State, msg string) {
	g.update(func(st *Status) {
		st.State = s
		st.Message = msg
	})
	g.metrics.setState(s)
}

func (g *Guard) setHeld(h bool) {
	g.update(func(st *Status) { st.DelayLockHeld = h })
	g.metrics.setHeld(h)
}

func (g *Guard) setDelay(d time.Duration) {
	g.update(func(st *Status) {
		st.InhibitDelay = d
		st.DrainWindow = drainWindow(d, g.opts.DrainBudget, g.opts.SafetyMargin)
	})
	g.metrics.setDelay(d)
}

// drainWindow is how long a drain may run once logind announced a shutdown:
// never past logind's delay (it would cut the drain off anyway, and the lock
// would be released by its timeout rather than by us), never past the budget,
// and a safety margin before the earlier of the two.
func drainWindow(delay, budget, margin time.Duration) time.Duration {
	return min(delay, budget) - margin
}

// Run holds the lock until ctx ends, reconnecting whenever the bus or logind
// goes away. Where there is no system bus or no logind at the first attempt,
// it logs that once, sets StateUnavailable and returns nil: the guard is off
// but the agent runs on. It returns nil when ctx ends.
func (g *Guard) Run(ctx context.Context) error {
	connectedOnce := false
	// failures counts attempts in a row that did not get as far as holding
	// the lock; each one backs off longer.
	failures := 0
	for {
		l, err := g.opts.Connect(ctx)
		if err == nil {
			if connectedOnce {
				g.log.Info("Connected to systemd-logind again")
			}
			connectedOnce = true
			var established bool
			established, err = g.session(ctx, l)
			l.Close()
			if ctx.Err() != nil {
				g.setState(StateStopped, "")
				return nil
			}
			if err == nil {
				err = errors.New("connection to systemd-logind lost")
			}
			if established {
				// A working connection was lost. Reconnect at once: bus
				// activation usually brings logind straight back, and every
				// moment without the lock is a moment a reboot would not
				// wait for us. Failures from here on back off.
				failures = 0
				g.setState(StateReconnecting, err.Error())
				g.log.Warn("Lost the connection to systemd-logind and with it the shutdown delay lock; reconnecting", "err", err)
				continue
			}
		} else {
			if ctx.Err() != nil {
				g.setState(StateStopped, "")
				return nil
			}
			if !connectedOnce && IsUnavailable(err) {
				g.setState(StateUnavailable, err.Error())
				g.log.Warn("Shutdown guard is off: no systemd-logind to take a delay lock from, so the node will not be drained before this host shuts down; check shutdown.systemBusAddress and the mounted bus socket",
					"err", err)
				return nil
			}
		}
		failures++
		wait := g.backoff(failures)
		g.setState(StateReconnecting, err.Error())
		if failures == 1 {
			g.log.Warn("Cannot take the shutdown delay lock from systemd-logind; retrying with backoff", "err", err, "retryIn", wait)
		} else {
			g.log.Debug("Cannot take the shutdown delay lock from systemd-logind; retrying with backoff", "err", err, "retryIn", wait, "attempt", failures)
		}
		if !g.sleep(ctx, wait) {
			g.setState(StateStopped, "")
			return nil
		}
	}
}

// backoff is a capped exponential delay with "equal jitter": between half
// and all of min(max, initial·2^(n-1)), so many agents restarted with the
// same bus do not retry in step, and the wait never exceeds the cap.
func (g *Guard) backoff(n int) time.Duration {
	d := g.opts.ReconnectInitial
	for i := 1; i < n && d < g.opts.ReconnectMax; i++ {
		d *= 2
	}
	d = min(d, g.opts.ReconnectMax)
	return d/2 + time.Duration(g.opts.Rand()*float64(d/2))
}

// sleep waits d on the Guard's clock; false when ctx ended first.
func (g *Guard) sleep(ctx context.Context, d time.Duration) bool {
	t := g.opts.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// session runs on one connection until it is lost or ctx ends. established
// is true once the connection worked: the lock was taken (or deliberately
// not, during a shutdown) and the delay read.
func (g *Guard) session(ctx context.Context, l Logind) (established bool, _ error) {
	var held *os.File
	defer func() { g.release(held) }()

	// drained is true once a drain ran and released the lock, so a later
	// cancellation knows there is something to undo.
	drained := false
	preparing, err := l.PreparingForShutdown(ctx)
	if err != nil {
		return false, err
	}
	if preparing {
		// A shutdown is already past its announcement (we are a restarted
		// agent, or logind came back mid-shutdown). A new lock would only
		// hold up a host that is going down; wait for a cancellation.
		g.log.Warn("A shutdown is already in progress; not taking the delay lock until it is cancelled")
		g.setState(StateReleased, "shutdown already in progress when connecting to logind")
	} else {
		held, err = g.inhibit(ctx, l)
		if err != nil {
			return false, err
		}
	}
	if err := g.configureDelay(ctx, l); err != nil {
		return false, err
	}
	if held != nil {
		g.setState(StateHolding, "")
	}
	for {
		select {
		case <-ctx.Done():
			// Closing the lock (deferred) lets a shutdown that is waiting on
			// a stopped agent go ahead rather than wait out logind's delay.
			return true, nil
		case <-l.Lost():
			return true, l.Err()
		case active := <-l.PrepareForShutdown():
			if active {
				if held == nil {
					g.log.Info("Shutdown announced while the delay lock is not held; nothing to drain under it")
					continue
				}
				var ran bool
				held, ran = g.handleShutdown(ctx, l, held)
				drained = drained || ran
				continue
			}
			g.log.Info("Shutdown cancelled by logind")
			if drained {
				g.undo(ctx)
				drained = false
			}
			if held == nil {
				held, err = g.inhibit(ctx, l)
				if err != nil {
					return true, err
				}
			}
			g.setState(StateHolding, "")
		}
	}
}

func (g *Guard) inhibit(ctx context.Context, l Logind) (*os.File, error) {
	f, err := l.InhibitShutdown(ctx, g.opts.Why)
	if err != nil {
		return nil, err
	}
	g.setHeld(true)
	g.log.Info("Holding the systemd-logind shutdown delay lock", "who", Who)
	return f, nil
}

// release closes the lock, which tells logind it may go ahead.
func (g *Guard) release(f *os.File) {
	if f == nil {
		return
	}
	if err := f.Close(); err != nil {
		// The descriptor is gone either way; logind sees the release.
		g.log.Warn("Closing the shutdown delay lock", "err", err)
	}
	g.setHeld(false)
	g.log.Info("Released the systemd-logind shutdown delay lock", "event", "DelayLockReleased")
}

// configureDelay reads the delay in force and, when allowed and needed,
// raises it to the drain budget with a drop-in and a reload. Only a failure
// to talk to logind is an error; failing to raise the delay is logged and the
// Guard drains within what logind allows.
func (g *Guard) configureDelay(ctx context.Context, l Logind) error {
	delay, err := l.InhibitDelayMax(ctx)
	if err != nil {
		return err
	}
	budget := g.opts.DrainBudget
	if delay < budget {
		if g.opts.ManageLogindConfig {
			delay, err = g.raiseDelay(ctx, l, delay)
			if err != nil {
				return err
			}
		} else if !g.toldLimit {
			g.toldLimit = true
			g.log.Info("logind's InhibitDelayMaxSec is shorter than the drain budget and caps it; set shutdown.manageLogindConfig to let node-agent raise it",
				"inhibitDelay", delay, "drainBudget", budget)
		}
	}
	g.setDelay(delay)
	window := drainWindow(delay, budget, g.opts.SafetyMargin)
	if window <= 0 {
		g.log.Warn("No time to drain on shutdown: logind's delay minus the safety margin is not positive; lower shutdown.safetyMargin or raise InhibitDelayMaxSec",
			"inhibitDelay", delay, "drainBudget", budget, "safetyMargin", g.opts.SafetyMargin)
	} else {
		g.log.Info("Shutdown delay in force", "inhibitDelay", delay, "drainBudget", budget, "safetyMargin", g.opts.SafetyMargin, "drainWindow", window)
	}
	return nil
}

type drainReturn struct {
	res Result
	err error
}

// handleShutdown drains while holding the lock. It returns the lock if it is
// still held (the shutdown was cancelled mid-drain and the drain undone), or
// nil once released; ran is true when a drain ran and was not undone.
func (g *Guard) handleShutdown(ctx context.Context, l Logind, held *os.File) (_ *os.File, ran bool) {
	delay := g.Status().InhibitDelay
	window := drainWindow(delay, g.opts.DrainBudget, g.opts.SafetyMargin)
	if window <= 0 {
		g.log.Warn("Host is shutting down with no time to drain; releasing the delay lock at once",
			"inhibitDelay", delay, "drainBudget", g.opts.DrainBudget, "safetyMargin", g.opts.SafetyMargin)
		g.count(OutcomeSkipped)
		g.release(held)
		g.setState(StateReleased, "shutdown in progress; no time to drain")
		return nil, false
	}
	deadline := g.opts.Clock.Now().Add(window)
	g.setState(StateDraining, "shutdown in progress; draining until "+deadline.UTC().Format(time.RFC3339))
	g.log.Info("Host is shutting down; draining the node before releasing the delay lock",
		"event", "ShutdownDrainStarted", "deadline", deadline, "drainWindow", window, "inhibitDelay", delay)

	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan drainReturn, 1)
	go func() {
		res, err := g.opts.Drainer.Drain(dctx, deadline)
		done <- drainReturn{res, err}
	}()
	timer := g.opts.Clock.NewTimer(window)
	defer timer.Stop()
	lost := l.Lost()
	for {
		select {
		case r := <-done:
			outcome := OutcomeDrained
			switch {
			case r.err != nil:
				outcome = OutcomeFailed
				g.log.Error("Shutdown drain failed; releasing the delay lock", "event", "ShutdownDrainEnded", "outcome", outcome, "err", r.err)
			case !r.res.Complete:
				outcome = OutcomeIncomplete
				g.log.Warn("Shutdown drain ended incomplete; releasing the delay lock", "event", "ShutdownDrainEnded", "outcome", outcome, "detail", r.res.Message)
			default:
				g.log.Info("Node drained for shutdown; releasing the delay lock", "event", "ShutdownDrainEnded", "outcome", outcome, "detail", r.res.Message,
					"left", deadline.Sub(g.opts.Clock.Now()))
			}
			g.count(outcome)
			g.release(held)
			g.setState(StateReleased, "shutdown in progress; drain "+string(outcome))
			return nil, true
		case <-timer.C():
			cancel()
			g.log.Warn("Shutdown drain deadline reached; releasing the delay lock so the host can go down", "event", "ShutdownDrainEnded", "outcome", OutcomeTimeout, "deadline", deadline)
			g.count(OutcomeTimeout)
			g.release(held)
			g.setState(StateReleased, "shutdown in progress; drain timed out")
			return nil, true
		case active := <-l.PrepareForShutdown():
			if active {
				continue
			}
			g.log.Info("Shutdown cancelled by logind during the drain; stopping it")
			cancel()
			g.waitDrain(ctx, done)
			g.count(OutcomeCancelled)
			g.undo(ctx)
			g.setState(StateHolding, "")
			return held, false
		case <-lost:
			// The lock died with the connection, but the host may still be
			// going down: keep draining to the deadline. The session notices
			// the loss afterwards and reconnects.
			g.log.Warn("Lost systemd-logind during a shutdown drain; draining on until the deadline", "err", l.Err(), "deadline", deadline)
			lost = nil
		case <-ctx.Done():
			g.log.Warn("Agent stopping during a shutdown drain; releasing the delay lock")
			g.release(held)
			return nil, true
		}
	}
}

// waitDrain gives a cancelled Drain UndoWait to return, so Undo does not
// race an eviction loop that is still running.
func (g *Guard) waitDrain(ctx context.Context, done <-chan drainReturn) {
	t := g.opts.Clock.NewTimer(g.opts.UndoWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
		g.log.Warn("Cancelled drain did not return in time; undoing anyway", "undoWait", g.opts.UndoWait)
	case <-ctx.Done():
	}
}

// undo runs Drainer.Undo (after a cancelled shutdown, whether or not the
// drain was still running); a failure is logged, not fatal.
func (g *Guard) undo(ctx context.Context) {
	if err := g.opts.Drainer.Undo(ctx); err != nil {
		g.log.Error("Undoing the shutdown drain failed; the node may stay cordoned until the next maintenance run", "err", err)
		return
	}
	g.log.Info("Undid the shutdown drain")
}

// count is called before the release, so that whoever sees the lock go also
// sees the result counted.
func (g *Guard) count(o Outcome) {
	g.metrics.count(o)
}
