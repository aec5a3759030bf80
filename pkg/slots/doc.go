// Package slots owns the cluster's drain slots: who may drain now, in what
// order, and what happens to a holder whose heartbeat stops or that holds
// too long.
//
// One accountable place decides. The agents never hold a slot themselves:
//
//   - An agent asks for a slot by writing a Request on its own Node (the
//     annotation node-agent.io/drain-slot-request). The Node admission
//     policy lets an agent write that annotation only on the Node its pod
//     runs on, so a node's token can ask only for its own node, and one
//     annotation means one request, and so at most one slot, per node.
//   - The coordinator (`node-agent-coordinator`, a Deployment with leader
//     election; Coordinator) alone holds the slot Leases
//     (node-agent-drain-slot-<node> in slots.namespace) and answers each
//     request with a Grant on the Node (the annotation node-agent.io/drain-slot),
//     which the admission policy refuses to every agent. The agents have no
//     right on Leases at all.
//   - Decide is the whole rule, a pure function: requests are served first
//     come, first served within every pool's limit (slots.limit for the whole
//     cluster, slots.pools for groups of nodes, whose limits may also bound
//     the failure domains in maintenance, maxDomains, and stop new grants
//     while too many nodes are unhealthy, maxUnhealthy); a holder whose heartbeat
//     has not changed for longer than slots.heartbeatBound (or, while
//     its host reboots, reboot.slotHoldBound), whose Node is gone, or that has
//     held its slot past its purpose's bound loses it, and the next node goes
//     on without an admin.
//   - Requester is the agent's side: it writes the request, waits for the
//     grant through the agent's watch of its own Node, keeps the request alive
//     with a heartbeat while it holds the slot, and removes it to release the
//     slot. Each purpose (a maintenance drain, a reboot) asks under its own
//     name, so one never adopts the other's slot. Await lets another part
//     of the agent follow a slot without asking for one: the reboot's drain
//     runs only while the reboot controller holds its slot.
//
// Nothing an agent writes can make another node wait longer: the coordinator
// judges liveness by when it saw a heartbeat change on its own clock, never by
// a time written into an object, and every bound is its own configuration.
// The queue's order is the coordinators' too: when one first saw each request,
// stamped into its Queued answer (Grant.Time) so that a new leader keeps it; the
// time an agent writes into its request is never read for it. A purpose the
// coordinator's configuration turns off (reboot.enabled false) is refused.
//
// A Queued answer says why the request waits in terms a person can act on:
// the pool that is full and, for the head of its queue, the nodes holding
// its slots since when and the request's place (explain.go, which also says
// how that text is kept from rewriting every waiting Node at each grant).
// The agent shows it on its Node (QueueWait): its token reads neither the
// Leases nor other Nodes, so the coordinator, which knows the queue, tells
// it.
//
// # Words
//
// One concept, one word (docs/glossary.md has the whole glossary):
//
//   - slot: one node's right to drain now. At most slots.limit nodes hold
//     one, and at most each pool's limit. Not "lease", "lock" or "grant".
//   - slot Lease: how the coordinator stores a slot it granted
//     (node-agent-drain-slot-<node> in slots.namespace); storage only.
//   - request: an agent's ask for a slot (Request, on its own Node).
//   - grant: the coordinator's answer to a request (Grant: Queued, Granted
//     or Revoked), and the act of answering Granted.
//   - revoke: the coordinator takes a slot back; release: the holder gives
//     it back; hand-over: a freed slot goes to the next request.
//   - pool: a group of nodes with a limit of its own (slots.pools).
//   - failure domain (domain): a value of a pool's topologyKey label (the
//     zone); maxDomains bounds how many hold the pool's slots at once.
//   - safety stop: a pool grants no new slot while more of its nodes than
//     maxUnhealthy are unhealthy: not Ready, or cordoned other than by
//     node-agent's own maintenance; holders never count.
//   - heartbeat: what an agent bumps while it holds a slot; one whose
//     heartbeat stops for slots.heartbeatBound loses its slot. "Silence"
//     means only an Alertmanager silence (pkg/silence).
//   - coordinator: node-agent-coordinator (Coordinator) alone; the per-node
//     part of pkg/reboot is the reboot controller.
package slots
