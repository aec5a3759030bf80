package maintenancecli

import "github.com/node-agent/node-agent/pkg/reasontext"

// printable returns s as the CLI may print it: every text it prints that
// comes from the cluster (a reason, lastError, a condition's message, an
// alert or pod name, a NodeMaintenance object's fields) goes through it,
// because whoever may write those can write anything. The rule is
// pkg/reasontext's, the one the agent applies before it writes onto a Node
// (ForNode); the CLI also doubles backslashes (ForTerminal), so that what it
// shows reads one way only.
func printable(s string) string { return reasontext.ForTerminal(s) }
