// Package shutdown owns node-agent's side of a host shutdown: the conversation
// with systemd-logind over D-Bus, and the Guard that turns logind's shutdown
// announcement into a bounded self-drain.
//
// The protocol is logind's inhibitor locks of mode "delay", which logind calls
// delay locks (https://systemd.io/INHIBITOR_LOCKS/ and org.freedesktop.login1(5)):
//
//   - Manager.Inhibit("shutdown", who, why, "delay") returns a file descriptor.
//     While any process holds such a descriptor open, logind delays a shutdown
//     or reboot, for at most InhibitDelayMaxUSec (logind.conf
//     InhibitDelayMaxSec, 5 s by default).
//   - When a shutdown is requested, logind emits PrepareForShutdown(true) and
//     waits until every delay lock is closed, or the delay expires.
//   - If the shutdown is cancelled, logind emits PrepareForShutdown(false);
//     delay locks that were released are not given back, so a client takes a
//     new one.
//   - A lock lives in logind's memory: if logind or the bus restarts, it is
//     gone, and the client must connect again and take a new one.
//
// The package has two layers, so that the Kubernetes side stays out of it:
//
//   - Logind is a small interface over the system bus (read the delay,
//     inhibit, watch for shutdown, notice loss, reload logind's
//     configuration, reboot). Connect implements it on Linux over a godbus
//     connection it dials itself to the configured address (the delay lock,
//     the signals, the Manager's properties, Reboot with logind's reply),
//     and logind's reload through systemd with go-systemd's dbus on a
//     connection dialed the same way; go-systemd's login1 dials only the bus
//     the process environment names (see dbusLogind). Elsewhere it returns
//     ErrNotSupported.
//   - Guard is the state machine on top: it holds the lock, hands the shutdown
//     to an injected Drainer with a deadline that ends before logind's delay,
//     releases the lock, takes it again after a cancelled shutdown, and
//     reconnects with backoff when the bus or logind goes away.
//
// LogindRebooter asks logind to reboot for the reboot controller; which
// shutdown is the coordinator's own, so that the Guard lets it go at once,
// is pkg/maintenance's rule (OwnReboot).
package shutdown
