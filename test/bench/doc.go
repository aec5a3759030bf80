// Package bench measures node-agent against its peers on a real control plane
// (test/testenv), in the same run, and prints the comparison.
//
// BenchmarkDrain drains one node of 110 Deployment pods with node-agent's
// self-drain and with `kubectl drain --ignore-daemonsets
// --delete-emptydir-data --force`, alternating, and reports both tools' wall
// time, their ratio and the API requests each made, counted in the
// kube-apiserver audit log. node-agent's drain includes the drain slot
// node-agent-coordinator grants it, and its requests. The agent runs as
// shipped: deploy/ is installed, and the agent has a token bound to its
// DaemonSet pod on the drained node, so it reaches the pods as its node and
// the admission policy holds it to its own Node. `make bench` runs it; `go
// test ./...` runs only the cheap unit tests of its helpers, never the
// benchmark.
//
// Speed is measured, never asserted: the benchmark fails only when a drain
// does not complete.
package bench
