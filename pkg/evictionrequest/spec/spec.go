// Package spec is drain.evictionAPI, the one setting of pkg/evictionrequest
// that the configuration (pkg/config) validates: kept apart so that the
// configuration links none of the Kubernetes client.
package spec

import "github.com/node-agent/node-agent/pkg/enum"

// Mode is drain.evictionAPI.
type Mode string

// The modes.
const (
	// Eviction evicts through pods/eviction only, as before 1.37.
	Eviction Mode = "eviction"
	// Request evicts through EvictionRequests, and refuses to drain where
	// the apiserver does not serve them.
	Request Mode = "evictionRequest"
	// Auto uses EvictionRequests where the apiserver serves them and
	// node-agent may create them, pods/eviction elsewhere.
	Auto Mode = "auto"
)

// Modes lists every mode, for help texts and errors.
var Modes = []Mode{Eviction, Request, Auto}

// ParseMode reads drain.evictionAPI; empty is Eviction.
func ParseMode(s string) (Mode, error) {
	return enum.Parse(s, Eviction, Modes...)
}
