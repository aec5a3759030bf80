// Package selfdrain owns the drain of the agent's own Node, from the request
// to the undo:
//
//   - the maintenance requests: the node-agent.io/maintenance annotation
//     (ParseMaintenanceRequest, which refuses a value such as "false" by
//     pkg/reasontext's rule) and NodeMaintenance objects that name the node
//     (Controller, NodeMaintenanceSource), and the calls behind the
//     maintenance commands
//     (RequestMaintenance, EndMaintenance, RequestNodeMaintenance, WatchNode,
//     and Plan for a dry run);
//   - the drain engine, which cordons, taints and evicts through the
//     Eviction API, and at the end of maintenance reverses only what the
//     agent itself did (Engine);
//   - the record of a maintenance on the Node: the status annotation, from
//     which a restarted agent resumes, and the UnderMaintenance and
//     NodeShuttingDown conditions (Status);
//   - what the Node shows while a drain waits for a cluster-wide drain slot
//     (slotWait), and a drain's end when its slot is taken back; the slots
//     themselves are pkg/slots', reached through the SlotSource the wiring
//     hands in;
//   - the hand-off to the shutdown guard: DrainForShutdown and
//     ShutdownCancelled, which pkg/handshake hands to pkg/shutdown, so this
//     package knows nothing of logind;
//   - its metrics (NewMetrics), registered on the registry it is given.
//
// One engine serves four triggers: the annotation, NodeMaintenance objects
// and the reboot coordinator's drain request (its record on the Node,
// ControllerOptions.RebootDrain) through the Controller, and the host's
// shutdown through DrainForShutdown. A drain for any of the first three
// stops at drain.timeout and gives its drain slot back (timeout.go).
//
// The words used here (maintenance, trigger, drain, record, undo, timeout,
// slot) are defined in docs/glossary.md.
package selfdrain
