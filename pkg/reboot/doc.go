// Package reboot owns the reboot coordinator: it decides whether and when
// this node reboots. It finds the need (a sentinel file, or a sentinel
// command run on the host as a transient systemd unit), the window (days and
// times of day in a time zone), the blockers (pods on this node matching a
// selector, firing Prometheus alerts) and the loop guard (no second reboot
// within a bound when the sentinel survives a reboot), and turns them, with
// the drain slot and how far a reboot has gone, into one State with a reason
// for the Node condition.
//
// The coordinator is off by default (reboot.enabled). The decision (Decide)
// is a pure function; everything that touches the world comes in through
// small interfaces (the host's systemd, the pod lister, the Prometheus HTTP
// client), so that the wiring adapts other packages to it and neither side
// imports the other. Taking the drain slot, draining and the reboot itself
// belong to the callers of Decide.
package reboot
