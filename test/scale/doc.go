// Package scale measures what a fleet of node-agents costs one control plane:
// `make scale` runs BenchmarkScale, which starts N agents (1,000 by default)
// against N kwok nodes of the test bed's real kube-apiserver, etcd,
// controller-manager and scheduler, and measures four phases: a joint start,
// a stretch of idleness, rolling maintenances of a pool of nodes at several
// drain slot limits, and a restart of kube-apiserver under all of them. It
// compares, in the same run, the lock pattern kured uses (every node reading
// one shared object on a period), and writes a table and two pictures.
//
// The drain slot coordinator runs through every phase: two replicas of
// internal/runcoordinator (the code node-agent-coordinator runs) in the same
// process, one leading, restarted with each rolling maintenance's
// slots.limit. Each rolling maintenance reports how many nodes
// drained, on average, while at least the limit's number of nodes still
// waited (the slots' use), and the requests on Nodes and Leases per drained
// node, the agents' and the coordinator's apart.
//
// The agents run in the benchmark's process, each built by internal/runagent
// exactly as `node-agent run` builds its one agent: its own clients (and TCP
// connections), informers, components and a ServiceAccount token bound to the
// DaemonSet pod on its node. Only the CPU discovery, which is local work that
// costs the control plane nothing, is done once and shared. The benchmark
// checks at small N that agents run as processes and agents run in-process
// make the same requests.
//
// Speed is measured, never asserted: the benchmark fails only when a phase
// cannot complete (a node never labelled, a maintenance never done).
package scale
