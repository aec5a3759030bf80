// Package policy parses the two reboot keys that have a syntax of their own:
// reboot.window, when a reboot may start (Window, ParseWindow), and
// reboot.blockingAlertRegexp, which firing alerts block one
// (CompileAlertRegexp).
//
// It imports nothing of Kubernetes and nothing of node-agent, so that
// pkg/config validates these keys with the very code the reboot controller
// runs on them, without importing the controller (pkg/reboot), which
// re-exports both.
package policy
