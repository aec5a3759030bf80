// Package maintenance owns the maintenance lifecycle of the agent's own
// Node, from the request to the undo. A newcomer asking "why does this node
// not drain yet?" reads it here. A maintenance goes request, pre-drain
// hooks, gates, slot, drain, post-drain hooks, (timeout,) end and undo:
//
//   - Requests, from every trigger: the node-agent.io/maintenance
//     annotation, the owners' annotations maintenance.node-agent.io/<owner>,
//     NodeMaintenance objects that name the node (NodeMaintenanceSource),
//     the reboot controller's drain request (its record on the Node,
//     DrainRequest), and the host's shutdown (DrainForShutdown, which takes
//     the engine for as long as it lasts). All but the shutdown are
//     requesters of one maintenance, which ends when the last ends; the
//     agent lists them beside the record (requesters.go).
//     The calls behind `node-agent maintenance` that write a request are
//     here too (RequestMaintenance, EndMaintenance, RequestNodeMaintenance).
//   - The decision: Decide, a pure function of what asks, the drain record
//     on the Node and the drain running, with table tests. Controller
//     gathers its Input and carries out its Decision.
//   - Gates: the maintenance gates (PromQL) and the VM gate hold a drain
//     before it asks for its slot (Gates, GatesFor, VMGate), each wait bounded
//     (GateBound).
//   - Hooks: annotations an outside controller puts on the Node
//     (pkg/hooks) hold a drain before the cordon and a drained maintenance
//     before it is reported done, each phase bounded by
//     maintenance.hookBound (Hooks, hooks.go).
//   - The slot: a drain waits for a cluster-wide drain slot (Slots,
//     the Node says why it waits meanwhile) and ends when the slot is taken
//     back; a reboot's drain follows the slot the reboot controller holds.
//   - Timeout and undo: what follows drain.timeout (timeout.go) and the end
//     of a maintenance, which undoes only what the agent did.
//   - The hand-offs between the reboot controller (pkg/reboot), the drain
//     engine (pkg/selfdrain) and the shutdown guard (pkg/shutdown): none of
//     those imports another or this package (TestSidesDoNotImportEachOther);
//     this package supplies each the functions it takes (Maintenance,
//     DrainRequest, OwnReboot, ShutdownDrainer, Disrupted).
//
// The drain itself, cordon, taint, evictions and the record on the Node, is
// pkg/selfdrain's: it records the trigger it is given and never acts on
// which one it is. The words used here are defined in docs/glossary.md.
package maintenance
