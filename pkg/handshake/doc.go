// Package handshake owns the rules that the reboot coordinator
// (pkg/reboot), the drain (pkg/selfdrain) and the shutdown guard
// (pkg/shutdown) share. None of those packages imports another: each takes
// plain functions or small interfaces in its options, as the kubelet's
// nodeshutdown takes KillPodFunc, and this package supplies them, so that
// the wiring (internal/runagent) only connects and every rule is tested
// here.
//
// The rules, one per seam:
//
//   - DrainRequest (reboot → selfdrain): the coordinator asks for its drain
//     through its record on the Node (reboot.Record.Drain), which survives
//     the reboot; selfdrain reads it as a maintenance request with the
//     trigger reboot, and takes no drain slot for it: it drains only while
//     the node holds the one the coordinator took, which outlives neither
//     a revocation nor the coordinator's release as the record does
//     (selfdrain.ControllerOptions.RebootSlot, wired to
//     slots.Requester.Await).
//   - Maintenance (selfdrain → reboot): what selfdrain's record on the Node
//     says to the coordinator: another maintenance in force (the reboot
//     waits), its own drain under way, finished, or past drain.timeout.
//   - OwnReboot (reboot → shutdown): a shutdown the coordinator asked for
//     is let go by the shutdown guard at once, since the node was drained
//     before the coordinator asked, and the guard's own delay lock must not
//     hold up the agent's own reboot.
package handshake
