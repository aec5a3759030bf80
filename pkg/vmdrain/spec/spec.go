// Package spec is drain.vmWithoutTarget, the one setting of pkg/vmdrain
// that the configuration (pkg/config) validates: kept apart so that the
// configuration links none of the Kubernetes client.
package spec

import "github.com/node-agent/node-agent/pkg/enum"

// Mode is drain.vmWithoutTarget: what a maintenance does when a VM on the
// node cannot leave it by live migration (no target, not live-migratable,
// or strategy None).
type Mode string

// The modes.
const (
	// Wait holds the maintenance before the cordon, saying which VMs and
	// why, until each can leave: the default, which never stops a VM
	// without the admin saying so.
	Wait Mode = "wait"
	// Proceed drains anyway, after a Warning Event that names the VMs.
	Proceed Mode = "proceed"
)

// ParseMode reads drain.vmWithoutTarget; empty is Wait.
func ParseMode(s string) (Mode, error) {
	return enum.Parse(s, Wait, Wait, Proceed)
}
