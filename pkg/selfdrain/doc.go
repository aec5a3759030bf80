// Package selfdrain is the drain engine of the agent's own Node. It knows no
// triggers and no slots: pkg/maintenance decides when a drain starts, what
// it waits for, and what follows it, and hands the engine a Request.
//
// It owns:
//
//   - cordon and the drain taint, and their undo, which reverses only what
//     the agent itself did (Engine.Begin, Engine.End, Engine.UndoAfterTimeout);
//   - pod selection (podfilter.go, Plan for a dry run), evictions through
//     the Eviction API or EvictionRequests (evictionrequests.go), with
//     PodDisruptionBudgets respected, and the blockers a drain that passed
//     its deadline names (timeout.go);
//   - the evictions in the order and by the behaviour pkg/selfdrain/podorder
//     gives each pod (order groups, Skip, WaitCompleted, opt-outs);
//   - the progress of the VMs that leave the node (vms.go);
//   - the drain record on the Node: the status annotation, from which a
//     restarted agent resumes, and the UnderMaintenance and
//     NodeShuttingDown conditions (Status, node.go, lifecycle.go);
//   - its metrics (NewMetrics), registered on the registry it is given.
//
// A Request's Trigger and Reason are recorded for people, Events and
// metrics; what differs between triggers (the timeout's policy, a
// hand-over, the shutdown's window) arrives as fields of the Request or as
// arguments, chosen by pkg/maintenance.
//
// The words used here (maintenance, trigger, drain, record, undo, timeout,
// slot) are defined in docs/glossary.md.
package selfdrain
