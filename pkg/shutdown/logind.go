package shutdown

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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

// DropInName is the file the Guard writes into the logind drop-in directory.
// logind reads the drop-ins of /etc, /run and /usr/lib/systemd/logind.conf.d
// sorted by file name and the last one wins, so "99-" puts this one after
// those of packages and admins that use lower numbers.
const DropInName = "99-node-agent.conf"

// Who is the "who" of node-agent's inhibitor, shown by `systemd-inhibit --list`.
const Who = "node-agent"

// Unavailability. Connect wraps one of these when there is nothing to talk
// to, as opposed to a failure worth retrying; errors.Is tells them apart.
var (
	// ErrNotSupported: this platform has no logind.
	ErrNotSupported = errors.New("systemd-logind shutdown inhibitors are not supported on this platform")
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

// DropInContent is the logind drop-in that lets delay locks be held for
// delay, rounded up to whole seconds.
func DropInContent(delay time.Duration) []byte {
	secs := int64(math.Ceil(delay.Seconds()))
	// logind.conf(5): InhibitDelayMaxSec takes a time span; a bare number is
	// seconds.
	return fmt.Appendf(nil, `# Written by node-agent because shutdown.manageLogindConfig is true: it lets
# node-agent's shutdown delay lock be held for shutdown.drainBudget, so that
# the node can be drained before the host goes down. node-agent rewrites this
# file when the budget changes and never deletes it: after turning the
# setting off, delete the file and reload logind (systemctl kill -s HUP
# systemd-logind).
[Login]
InhibitDelayMaxSec=%d
`, secs)
}

// WriteDropIn writes DropInName with DropInContent(delay) into dir, creating
// dir if needed. It writes only when the content differs from what is there,
// and replaces the file atomically so logind never reads half of it. It
// reports whether it wrote. logind reads the file only when told to reload.
func WriteDropIn(dir string, delay time.Duration) (bool, error) {
	if delay <= 0 {
		return false, fmt.Errorf("logind drop-in: delay %s must be positive", delay)
	}
	path := filepath.Join(dir, DropInName)
	want := DropInContent(delay)
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("logind drop-in directory %s: %w; check shutdown.logindDropInDir and that the host path is mounted writable", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+DropInName+".*")
	if err != nil {
		return false, fmt.Errorf("logind drop-in %s: %w; check that the host path is mounted writable", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(want); err != nil {
		tmp.Close()
		return false, fmt.Errorf("logind drop-in %s: writing: %w", path, err)
	}
	// CreateTemp makes 0600 files; logind runs as root and would read it,
	// but admins expect the mode of the other drop-ins.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return false, fmt.Errorf("logind drop-in %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("logind drop-in %s: writing: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("logind drop-in %s: %w", path, err)
	}
	return true, nil
}
