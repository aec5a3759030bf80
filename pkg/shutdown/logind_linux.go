//go:build linux

package shutdown

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

const (
	busDaemonName      = "org.freedesktop.DBus"
	errNameHasNoOwner  = "org.freedesktop.DBus.Error.NameHasNoOwner"
	errServiceUnknown  = "org.freedesktop.DBus.Error.ServiceUnknown"
	systemdBusName     = "org.freedesktop.systemd1"
	systemdPath        = "/org/freedesktop/systemd1"
	systemdInterface   = "org.freedesktop.systemd1.Manager"
	logindUnit         = "systemd-logind.service"
	signalNameChanged  = busDaemonName + ".NameOwnerChanged"
	signalPrepare      = LogindInterface + ".PrepareForShutdown"
	prepareChannelSize = 8
)

// dbusLogind is Logind over one private godbus connection to the system bus
// at the configured address (shutdown.systemBusAddress).
//
// The delay lock is the Manager's Inhibit, one method call on that
// connection whose reply carries the lock's file descriptor, as the
// kubelet's nodeshutdown/systemd takes it. go-systemd's login1 is not used:
// login1.New (v22.7.0) takes no address and no connection, and dials
// whatever DBUS_SYSTEM_BUS_ADDRESS says (godbus's SystemBusPrivate), so it
// could reach the configured bus only by setting that variable in the
// process, which every other dial in the process would then see. Nor does
// login1 have a call for the rest:
//   - it reads no property of the Manager (its property getters are fixed to
//     the Session and User interfaces), so InhibitDelayMaxUSec and
//     PreparingForShutdown are read here;
//   - its Subscribe matches on interface and member only, ignores the error
//     of AddMatch, takes no context, and delivers through godbus's default
//     signal handler, which hands a signal to a goroutine when the channel
//     is full, so a true and a false can arrive swapped; and a lock needs
//     NameOwnerChanged as well, to notice that logind restarted;
//   - its Reboot drops logind's reply, so a refused reboot would look like
//     one that started;
//   - it cannot find logind's owner or start logind by bus activation.
//
// systemd's own Manager (the reload) is reached through go-systemd's dbus
// package.
type dbusLogind struct {
	address string
	conn    *dbus.Conn
	logind  dbus.BusObject
	// owner is logind's unique bus name when we connected. Any other owner
	// later, or none, means the logind that holds our lock is gone.
	owner string

	signals chan *dbus.Signal
	prepare chan bool
	lost    chan struct{}
	closed  chan struct{}

	mu        sync.Mutex
	err       error
	closeOnce sync.Once
}

// Connect opens a private connection to the system bus at address (a D-Bus
// address such as DefaultSystemBusAddress; DBUS_SYSTEM_BUS_ADDRESS is
// neither read nor set), subscribes to logind's PrepareForShutdown and to
// changes of org.freedesktop.login1's owner, and makes sure logind is there,
// starting it by bus activation if the bus can.
//
// ctx bounds the connection's whole life, not only the connecting: when it
// ends, the connection is closed and Lost fires. Pass the context of the
// component that holds the lock.
//
// It wraps ErrNoSystemBus when nothing listens at address and ErrNoLogind
// when logind is not on the bus; other errors are worth a retry.
func Connect(ctx context.Context, address string) (Logind, error) {
	// The sequential handler keeps signals in the order the bus sent them;
	// the default one may reorder a true and a false that arrive together.
	conn, err := dbus.Connect(address, dbus.WithContext(ctx), dbus.WithSignalHandler(dbus.NewSequentialSignalHandler()))
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("connecting to the system bus at %s: %w: %w", address, ErrNoSystemBus, err)
		}
		return nil, fmt.Errorf("connecting to the system bus at %s: %w", address, err)
	}
	l := &dbusLogind{
		address: address,
		conn:    conn,
		logind:  conn.Object(LogindBusName, LogindPath),
		signals: make(chan *dbus.Signal, 16),
		prepare: make(chan bool, prepareChannelSize),
		lost:    make(chan struct{}),
		closed:  make(chan struct{}),
	}
	if err := l.subscribe(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	owner, err := l.findOwner(ctx)
	if err != nil {
		conn.Close()
		return nil, err
	}
	l.owner = owner
	go l.watch()
	return l, nil
}

func (l *dbusLogind) subscribe(ctx context.Context) error {
	l.conn.Signal(l.signals)
	// Subscribe before reading the owner, so that a change between the two is
	// not missed; watch compares against the owner read afterwards.
	if err := l.conn.AddMatchSignalContext(ctx,
		dbus.WithMatchSender(busDaemonName),
		dbus.WithMatchInterface(busDaemonName),
		dbus.WithMatchMember("NameOwnerChanged"),
		dbus.WithMatchArg(0, LogindBusName),
	); err != nil {
		return fmt.Errorf("system bus at %s: subscribing to NameOwnerChanged of %s: %w", l.address, LogindBusName, err)
	}
	if err := l.conn.AddMatchSignalContext(ctx,
		dbus.WithMatchSender(LogindBusName),
		dbus.WithMatchObjectPath(LogindPath),
		dbus.WithMatchInterface(LogindInterface),
		dbus.WithMatchMember("PrepareForShutdown"),
	); err != nil {
		return fmt.Errorf("system bus at %s: subscribing to PrepareForShutdown: %w", l.address, err)
	}
	return nil
}

// findOwner returns logind's unique name, activating logind if it is not
// running but the bus knows how to start it (systemd hosts ship
// dbus-org.freedesktop.login1.service).
func (l *dbusLogind) findOwner(ctx context.Context) (string, error) {
	bus := l.conn.BusObject()
	var owner string
	err := bus.CallWithContext(ctx, busDaemonName+".GetNameOwner", 0, LogindBusName).Store(&owner)
	if err == nil {
		return owner, nil
	}
	if !isDBusError(err, errNameHasNoOwner) {
		return "", fmt.Errorf("system bus at %s: asking for the owner of %s: %w", l.address, LogindBusName, err)
	}
	var reply uint32
	err = bus.CallWithContext(ctx, busDaemonName+".StartServiceByName", 0, LogindBusName, uint32(0)).Store(&reply)
	if isDBusError(err, errServiceUnknown) {
		return "", fmt.Errorf("system bus at %s: %w (%s has no owner and is not activatable; is this host running systemd?)", l.address, ErrNoLogind, LogindBusName)
	}
	if err != nil {
		return "", fmt.Errorf("system bus at %s: starting %s: %w", l.address, LogindBusName, err)
	}
	if err := bus.CallWithContext(ctx, busDaemonName+".GetNameOwner", 0, LogindBusName).Store(&owner); err != nil {
		if isDBusError(err, errNameHasNoOwner) {
			return "", fmt.Errorf("system bus at %s: %w (activated, but it left the bus again; see its journal)", l.address, ErrNoLogind)
		}
		return "", fmt.Errorf("system bus at %s: asking for the owner of %s: %w", l.address, LogindBusName, err)
	}
	return owner, nil
}

func isDBusError(err error, name string) bool {
	var de dbus.Error
	if errors.As(err, &de) {
		return de.Name == name
	}
	var dep *dbus.Error
	if errors.As(err, &dep) {
		return dep.Name == name
	}
	return false
}

// watch turns bus signals into PrepareForShutdown values and into Lost.
func (l *dbusLogind) watch() {
	for {
		var sig *dbus.Signal
		var ok bool
		select {
		case sig, ok = <-l.signals:
		case <-l.closed:
			return
		}
		if !ok {
			// godbus closes signal channels when the connection ends: the bus
			// went away (dbus-daemon restarted or the socket broke).
			l.lose(fmt.Errorf("connection to the system bus at %s closed", l.address))
			return
		}
		switch sig.Name {
		case signalNameChanged:
			var name, oldOwner, newOwner string
			if err := dbus.Store(sig.Body, &name, &oldOwner, &newOwner); err != nil || name != LogindBusName {
				continue
			}
			if newOwner == l.owner {
				// Logind appearing as the owner we already know: the
				// activation we asked for in Connect.
				continue
			}
			if newOwner == "" {
				l.lose(fmt.Errorf("%s (%s) left the system bus: logind stopped or restarted, and its locks with it", LogindBusName, l.owner))
			} else {
				l.lose(fmt.Errorf("%s changed owner from %s to %s: logind restarted, and its locks are gone", LogindBusName, l.owner, newOwner))
			}
			return
		case signalPrepare:
			// The match rule already names logind as sender; checking the
			// unique name as well ignores a stale logind's last words.
			if sig.Sender != l.owner || sig.Path != LogindPath {
				continue
			}
			var active bool
			if err := dbus.Store(sig.Body, &active); err != nil {
				continue
			}
			select {
			case l.prepare <- active:
			case <-l.closed:
				return
			}
		}
	}
}

func (l *dbusLogind) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	close(l.lost)
}

func (l *dbusLogind) property(ctx context.Context, name string) (dbus.Variant, error) {
	var v dbus.Variant
	err := l.logind.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, LogindInterface, name).Store(&v)
	if err != nil {
		return v, fmt.Errorf("reading logind's %s: %w", name, err)
	}
	return v, nil
}

func (l *dbusLogind) InhibitDelayMax(ctx context.Context) (time.Duration, error) {
	v, err := l.property(ctx, "InhibitDelayMaxUSec")
	if err != nil {
		return 0, err
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("reading logind's InhibitDelayMaxUSec: got %s, want a uint64 (t)", v.Signature())
	}
	return time.Duration(usec) * time.Microsecond, nil
}

func (l *dbusLogind) PreparingForShutdown(ctx context.Context) (bool, error) {
	v, err := l.property(ctx, "PreparingForShutdown")
	if err != nil {
		return false, err
	}
	b, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("reading logind's PreparingForShutdown: got %s, want a boolean (b)", v.Signature())
	}
	return b, nil
}

func (l *dbusLogind) InhibitShutdown(ctx context.Context, why string) (*os.File, error) {
	type taken struct {
		f   *os.File
		err error
	}
	// The call is waited for on ctx but not made with it: godbus forgets a
	// call whose context ended, and drops its reply when it comes, with the
	// descriptor in it left open, so a lock that logind hands out late
	// would delay every shutdown until this process exits. Made without a
	// context, the call ends with logind's reply (or the connection), and a
	// lock that arrives after ctx ended is released here, so that it
	// cannot delay a shutdown nobody drains for.
	done := make(chan taken, 1)
	go func() {
		var fd dbus.UnixFD
		if err := l.logind.Call(LogindInterface+".Inhibit", 0, "shutdown", Who, why, "delay").Store(&fd); err != nil {
			done <- taken{err: err}
			return
		}
		done <- taken{f: os.NewFile(uintptr(fd), "logind-delay-lock")}
	}()
	var t taken
	select {
	case t = <-done:
	case <-ctx.Done():
		go func() {
			if t := <-done; t.f != nil {
				t.f.Close()
			}
		}()
		return nil, fmt.Errorf("taking a logind shutdown delay lock: %w", ctx.Err())
	}
	if t.err != nil {
		return nil, fmt.Errorf("taking a logind shutdown delay lock: %w", t.err)
	}
	// Go receives descriptors with MSG_CMSG_CLOEXEC already; this is cheap
	// insurance that a child process never inherits the lock and holds it
	// past our release.
	syscall.CloseOnExec(int(t.f.Fd()))
	return t.f, nil
}

// Reboot calls the Manager's Reboot(false): no interactive authorization,
// so a caller that polkit does not allow gets an error instead of a prompt.
// logind then announces the shutdown and waits for delay locks, as for
// `systemctl reboot`. It goes over godbus because login1's Reboot discards
// logind's reply (see dbusLogind).
func (l *dbusLogind) Reboot(ctx context.Context) error {
	if err := l.logind.CallWithContext(ctx, LogindInterface+".Reboot", 0, false).Err; err != nil {
		return fmt.Errorf("asking logind to reboot the host: %w", err)
	}
	return nil
}

// ReloadConfig sends SIGHUP to logind's main process through systemd
// (Manager.KillUnit), which is what `systemctl kill -s HUP
// systemd-logind.service` does. org.freedesktop.login1.Manager has no reload
// method; logind re-reads logind.conf and its drop-ins on SIGHUP and keeps its
// sessions and inhibitors (verified on systemd 252: "Config file reloaded.",
// same PID, new InhibitDelayMaxUSec).
//
// It opens a go-systemd dbus connection for the call and closes it after: a
// reload happens at most once per connection to logind.
func (l *dbusLogind) ReloadConfig(ctx context.Context) error {
	systemd, err := sddbus.NewConnection(func() (*dbus.Conn, error) {
		return dbus.Connect(l.address, dbus.WithContext(ctx))
	})
	if err != nil {
		return fmt.Errorf("connecting to systemd on the system bus at %s to reload %s: %w", l.address, logindUnit, err)
	}
	defer systemd.Close()
	if err := systemd.KillUnitWithTarget(ctx, logindUnit, sddbus.Main, int32(syscall.SIGHUP)); err != nil {
		return fmt.Errorf("asking systemd to send SIGHUP to %s so it reloads its configuration: %w", logindUnit, err)
	}
	return nil
}

func (l *dbusLogind) PrepareForShutdown() <-chan bool { return l.prepare }
func (l *dbusLogind) Lost() <-chan struct{}           { return l.lost }

func (l *dbusLogind) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *dbusLogind) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.closed)
		l.lose(errors.New("connection to logind closed by node-agent"))
		err = l.conn.Close()
	})
	return err
}
