// Package maintenancecli is the client side of the maintenance APIs that
// pkg/selfdrain serves, as `node-agent maintenance` uses them. It requests
// and ends the maintenance of a node (the node-agent.io/maintenance
// annotation or a NodeMaintenance object), follows the drain that the agent
// on that node reports until it ends, and prints for a person the status of
// nodes and NodeMaintenance objects and the plan of a dry run, every text
// from the cluster escaped for the terminal (printable). For one node it
// explains what the maintenance waits for (explain.go), adding to the
// agent's record what only an admin reads: the drain slot Leases of
// pkg/slots and the other nodes' queued requests.
//
// It is also the client side of the reboot controller (pkg/reboot), as
// `node-agent reboot` uses it: the reboot state of nodes, and requests for
// a node's reboot (reboot.go).
//
// It reads the types and helpers pkg/selfdrain, pkg/slots and pkg/reboot export and
// nothing of their internals: the agent's side stays there.
package maintenancecli
