// Package reboot owns the reboot controller: it decides whether and when
// this node reboots. It finds the need (a sentinel file, or a sentinel
// command run on the host as a transient systemd unit), the window (days and
// times of day in a time zone), the blockers (pods on this node matching a
// selector, firing Prometheus alerts) and the loop guard (no second reboot
// within a bound when the sentinel survives a reboot), and turns them, with
// the drain slot and how far a reboot has gone, into one State with a reason
// for the Node condition. While a reboot is needed and not done it keeps the
// PreferNoSchedule taint PendingTaintKey on the Node (taint.go), written
// through pkg/ownnode, which the drain engine writes its cordon through too.
//
// The controller is off by default (reboot.enabled). Every decision is
// Decide's, a pure function with table tests; the Controller observes,
// gathers the Input, and applies the Action Decide returns (taking and
// releasing the drain slot, asking for the drain through its Record,
// asking logind to reboot), as a controller-runtime Reconcile returns a
// Result. Everything that touches the world comes in through small
// interfaces or functions (the drain slots, the host's systemd, the pod
// lister, the Prometheus HTTP client, the drain's record): pkg/maintenance
// supplies the ones that connect it to pkg/selfdrain and pkg/shutdown, so
// that none of them imports another.
//
// The words used here (slot, grant, gate, blocker, bound) are defined in
// docs/glossary.md.
package reboot
