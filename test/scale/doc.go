// Package scale measures what a fleet of node-agents costs one control plane:
// `make scale` runs BenchmarkScale, which starts N agents (1,000 by default)
// against N kwok nodes of the test bed's real kube-apiserver, etcd,
// controller-manager and scheduler, and measures four phases: a joint start,
// a stretch of idleness, rolling maintenances of a pool of nodes at several
// drain slot limits (twice: with pods that kwok deletes as soon as they are
// evicted, and with pods that take 20 to 60 s to terminate), and a restart
// of kube-apiserver under all of them. It
// compares, in the same run, the lock pattern kured uses (every node reading
// one shared object on a period), and writes a table and two pictures.
//
// The drain slot coordinator runs through every phase: two replicas of
// internal/runcoordinator (the code node-agent-coordinator runs) in the same
// process, one leading, restarted with each rolling maintenance's
// slots.limit. Each rolling maintenance reports how many nodes
// drained, and held a slot, on average while at least the limit's number of
// nodes still waited (the slots' use), and the requests on Nodes and Leases
// per drained node, the agents' and the coordinator's apart.
//
// The fast drains (SCALE_POOL nodes, 100 by default, at SCALE_LIMITS) last
// well under a second each, so the hand-over of a slot from one node to the
// next weighs most in them. The realistic drains (SCALE_SLOW_POOL nodes, 60
// by default, at SCALE_SLOW_LIMITS, 5 and 20) evict pods that stay
// Terminating 20, 30, 40, 50 or 60 s (kwok's pod-delete Stage, delayed per
// Deployment by testenv.PodDeleteDelayAnnotation), as pods that shut down
// within their grace period do; the agent's drain waits until they are gone.
// There the share of the limit's slots held while nodes waited says how
// much the hand-over costs a real maintenance. At limit L the realistic run
// takes about ⌈pool ÷ L⌉ minutes: a pool of 60 is three rounds at limit 20
// and twelve at limit 5.
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
