// Package spec is drain.nodeLifecycleConditions, the one setting of
// pkg/nodelifecycle that the configuration (pkg/config) validates: kept
// apart so that the configuration links none of the Kubernetes client.
package spec

import "github.com/node-agent/node-agent/pkg/enum"

// Mode says whether the agent writes the conditions.
type Mode string

// The modes.
const (
	// Auto writes them where the apiserver is Kubernetes 1.37 or later.
	Auto Mode = "auto"
	// On writes them on any release (the apiserver keeps them on 1.36 too).
	On Mode = "on"
	// Off never writes them, and removes none.
	Off Mode = "off"
)

// Modes lists every mode, for help texts and errors.
var Modes = []Mode{Auto, On, Off}

// ParseMode reads a mode; empty is Auto.
func ParseMode(s string) (Mode, error) {
	return enum.Parse(s, Auto, Modes...)
}
