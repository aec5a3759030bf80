// Package systemd runs a command on the host as a transient systemd service,
// through the host's system bus, and reads its exit status back. The reboot
// controller uses it for reboot.sentinelCommand: the agent reaches the
// host's programs without nsenter or a privileged container, with the bus
// connection it already has for logind.
//
// The command runs as root in the host's namespaces, as any service does.
// Whoever can change the agent's configuration can therefore run a command
// on every host; the agent's access to the system bus already allows that,
// and this package adds no other way in.
package systemd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Conn is the part of go-systemd's *dbus.Conn the runner calls; tests give a
// fake.
type Conn interface {
	StartTransientUnitContext(ctx context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error)
	GetServicePropertyContext(ctx context.Context, service, property string) (*sddbus.Property, error)
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
	Close()
}

// Dial connects go-systemd to the system bus at address, such as
// shutdown.systemBusAddress.
func Dial(address string) func(ctx context.Context) (Conn, error) {
	return func(ctx context.Context) (Conn, error) {
		c, err := sddbus.NewConnection(func() (*dbus.Conn, error) {
			return dbus.Connect(address, dbus.WithContext(ctx))
		})
		if err != nil {
			return nil, fmt.Errorf("connecting to systemd on the system bus at %s: %w", address, err)
		}
		return c, nil
	}
}

// DefaultTimeout bounds one command when Runner.Timeout is zero. A sentinel
// check reads a file or a package database; a minute is ample, and without a
// bound a oneshot service may run forever (systemd turns the start timeout
// off for Type=oneshot).
const DefaultTimeout = time.Minute

// Runner runs commands as transient services. It connects for each command
// and closes after: a sentinel check runs seldom, and a connection kept
// open would need its own loss handling.
type Runner struct {
	// Dial connects to systemd.
	Dial func(ctx context.Context) (Conn, error)
	// Timeout bounds one command; systemd kills it after that. 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// UnitName returns a new unit name; nil uses a random one.
	UnitName func() string
	Logger   *slog.Logger
}

// Run implements reboot.CommandRunner.
//
// The unit is Type=oneshot, so its start job ends when the command exits,
// with RemainAfterExit=yes, so that systemd keeps the unit, and with it
// ExecMainStatus and Result, until the runner has read them. The runner
// then stops the unit and resets its failed state, which lets systemd
// unload it.
func (r *Runner) Run(ctx context.Context, argv []string) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("empty command")
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	name := r.unitName()
	conn, err := r.Dial(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()

	props := []sddbus.Property{
		sddbus.PropDescription("node-agent: reboot sentinel command"),
		sddbus.PropType("oneshot"),
		sddbus.PropRemainAfterExit(true),
		// go-systemd calls the flag UncleanIsFailure; systemd reads it as
		// ExecStart's "-" prefix (ignore a failure), which would turn
		// every exit status into Result "success". So false.
		sddbus.PropExecStart(escapeDollars(argv), false),
		{Name: "TimeoutStartUSec", Value: dbus.MakeVariant(uint64(timeout / time.Microsecond))},
	}
	// Buffered: go-systemd sends the job's result once, and must not block
	// when this function has returned on a cancelled ctx.
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, name, "fail", props, done); err != nil {
		return 0, fmt.Errorf("starting transient unit %s: %w", name, err)
	}
	defer r.cleanUp(ctx, conn, name)

	// systemd ends the job by timeout; the extra margin bounds the wait
	// should the JobRemoved signal never reach this connection.
	wait, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	var job string
	select {
	case job = <-done:
	case <-wait.Done():
		return 0, fmt.Errorf("waiting for transient unit %s to finish: %w", name, wait.Err())
	}
	// The job is "done" when the command exited 0 and "failed" otherwise;
	// Result tells an exit status from a signal or a timeout.
	result, err := stringProperty(ctx, conn, name, "Result")
	if err != nil {
		return 0, err
	}
	switch result {
	case "success":
		return 0, nil
	case "exit-code":
		status, err := int32Property(ctx, conn, name, "ExecMainStatus")
		if err != nil {
			return 0, err
		}
		if status >= 200 && status <= 243 {
			// systemd's own codes for a service it could not set up:
			// 203 is a program that does not exist or cannot be run.
			// Read as the command's answer, a misspelt path would say
			// "no reboot needed" for ever.
			return 0, fmt.Errorf("transient unit %s: systemd could not run the command (exit status %d, see \"Process Exit Codes\" in systemd.exec(5)); see journalctl -u %s on the host", name, status, name)
		}
		return int(status), nil
	case "timeout":
		return 0, fmt.Errorf("transient unit %s: killed after %s", name, timeout)
	default:
		// signal, core-dump, resources (could not exec), ...: see
		// systemd.exec(5), $SERVICE_RESULT.
		return 0, fmt.Errorf("transient unit %s: job %s, result %s; see journalctl -u %s on the host", name, job, result, name)
	}
}

// cleanUp stops the unit and resets its failed state, even when ctx was
// cancelled, so that no unit is left behind on the host.
func (r *Runner) cleanUp(ctx context.Context, conn Conn, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	stopped := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, name, "replace", stopped); err != nil {
		r.logger().Warn("could not stop the transient unit of the sentinel command", "unit", name, "err", err)
	} else {
		select {
		case <-stopped:
		case <-ctx.Done():
		}
	}
	// A unit whose command failed stays loaded in the failed state until
	// reset; one that succeeded is unloaded by the stop, and then systemd
	// answers NoSuchUnit, which is what we want.
	if err := conn.ResetFailedUnitContext(ctx, name); err != nil && !noSuchUnit(err) {
		r.logger().Warn("could not reset the transient unit of the sentinel command", "unit", name, "err", err)
	}
}

// escapeDollars doubles every "$": systemd expands $VAR and ${VAR} in
// ExecStart's arguments, also those set over D-Bus, and turns "$$" into "$".
// The command must reach the host as configured: sh -c 'kill -9 $$' would
// otherwise become kill -9 $ (seen on systemd 252). ExecStartEx's
// no-env-expand flag would do the same, but needs systemd 243, which RHEL 8
// (239) lacks.
func escapeDollars(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return out
}

func noSuchUnit(err error) bool {
	var de dbus.Error
	return errors.As(err, &de) && de.Name == "org.freedesktop.systemd1.NoSuchUnit"
}

func (r *Runner) unitName() string {
	if r.UnitName != nil {
		return r.UnitName()
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return "node-agent-sentinel-" + hex.EncodeToString(b) + ".service"
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func stringProperty(ctx context.Context, conn Conn, unit, name string) (string, error) {
	p, err := conn.GetServicePropertyContext(ctx, unit, name)
	if err != nil {
		return "", fmt.Errorf("reading %s of transient unit %s: %w", name, unit, err)
	}
	s, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("reading %s of transient unit %s: got %s, want a string", name, unit, p.Value.Signature())
	}
	return s, nil
}

func int32Property(ctx context.Context, conn Conn, unit, name string) (int32, error) {
	p, err := conn.GetServicePropertyContext(ctx, unit, name)
	if err != nil {
		return 0, fmt.Errorf("reading %s of transient unit %s: %w", name, unit, err)
	}
	v, ok := p.Value.Value().(int32)
	if !ok {
		return 0, fmt.Errorf("reading %s of transient unit %s: got %s, want an int32", name, unit, p.Value.Signature())
	}
	return v, nil
}
