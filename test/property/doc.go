// Package property checks the drain slots' promises (pkg/slots,
// node-agent-coordinator) and the drains that use them (pkg/selfdrain,
// pkg/reboot) on the test bed's real control plane, against a seeded random
// sequence of what happens to a cluster: maintenance requests made and
// withdrawn (the annotation, NodeMaintenance objects), reboots asked for,
// agents killed and restarted, and the leading coordinator killed.
//
// It owns TestDrainSlotProperties and its harness: kwok nodes with a
// workload each, one agent per node and two coordinator replicas, all in
// the test's process and built by internal/runagent and
// internal/runcoordinator exactly as their commands build them, each with
// its own client; a stand-in for each node's logind on a private dbus-daemon
// that plays the host's reboot; and a checker that follows Nodes, Leases and
// pods through watches and checks every property on every change it sees.
//
// The control plane comes from test/testenv: the test skips when its
// binaries are missing, and fails instead under NODE_AGENT_INTEGRATION=1.
// PROPERTY_SEED replays a sequence (every run prints its seed, and a failure
// names it); PROPERTY_DURATION sets how long events come (3m by default).
package property
