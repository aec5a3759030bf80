package shutdown

import (
	"context"
	"errors"
	"os"
	"time"
)

// D-Bus names of systemd-logind's manager object (org.freedesktop.login1(5)).
const (
	LogindBusName   = "org.freedesktop.login1"
	LogindPath      = "/org/freedesktop/login1"
	LogindInterface = "org.freedesktop.login1.Manager"
)

// DefaultSystemBusAddress is the usual address of the system bus; the config
// key shutdown.systemBusAddress overrides it.
const DefaultSystemBusAddress = "unix:path=/run/dbus/system_bus_socket"

// Who is the "who" of node-agent's delay lock, shown by `systemd-inhibit --list`.
const Who = "node-agent"

// Unavailability. Connect wraps one of these when there is nothing to talk
// to, as opposed to a failure worth retrying; errors.Is tells them apart.
var (
	// ErrNotSupported: this platform has no logind.
	ErrNotSupported = errors.New("systemd-logind shutdown delay locks are not supported on this platform")
	// ErrNoSystemBus: nothing listens at the system bus address.
	ErrNoSystemBus = errors.New("no D-Bus system bus")
	// ErrNoLogind: the bus is there but org.freedesktop.login1 has no owner
	// and cannot be activated, as on a host without systemd.
	ErrNoLogind = errors.New("systemd-logind is not on the system bus")
)

// IsUnavailable reports whether err means that there is no logind to talk to
// at all, rather than a transient failure.
func IsUnavailable(err error) bool {
	return errors.Is(err, ErrNotSupported) || errors.Is(err, ErrNoSystemBus) || errors.Is(err, ErrNoLogind)
}

// Logind is one connection to systemd-logind. It is the seam between the
// Guard and D-Bus: Connect returns the real one, tests use fakes.
//
// A Logind is subscribed to PrepareForShutdown before it is returned, so a
// lock taken on it cannot miss the announcement of the shutdown it delays.
type Logind interface {
	// InhibitDelayMax reads the Manager's InhibitDelayMaxUSec property: the
	// longest logind waits for delay locks once a shutdown has started.
	InhibitDelayMax(ctx context.Context) (time.Duration, error)
	// InhibitShutdown takes a "shutdown" delay lock with who = Who. The lock
	// is held while the returned file is open; closing it releases the lock.
	InhibitShutdown(ctx context.Context, why string) (*os.File, error)
	// PreparingForShutdown reads the Manager's PreparingForShutdown property:
	// true between PrepareForShutdown(true) and the end or cancellation of
	// that shutdown.
	PreparingForShutdown(ctx context.Context) (bool, error)
	// ReloadConfig makes logind read logind.conf and its drop-ins again.
	ReloadConfig(ctx context.Context) error
	// Reboot asks logind to reboot the host now, without interactive
	// authorization. logind announces it with PrepareForShutdown(true) and
	// waits for delay locks, this connection's own included, as it does for
	// `systemctl reboot`. An error means logind refused or was not reached;
	// no reboot was started.
	Reboot(ctx context.Context) error
	// PrepareForShutdown delivers logind's PrepareForShutdown signals in
	// order: true when a shutdown or reboot starts, false when it is
	// cancelled.
	PrepareForShutdown() <-chan bool
	// Lost is closed when this connection can no longer hold a lock: the bus
	// connection closed, or org.freedesktop.login1 changed owner (logind
	// restarted or exited). Locks taken on it are gone; connect again.
	Lost() <-chan struct{}
	// Err says why Lost was closed; nil before.
	Err() error
	// Close ends the connection. Locks taken on it stay held until their
	// files are closed.
	Close() error
}
