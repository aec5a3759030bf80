package reboot

import "github.com/node-agent/node-agent/pkg/reboot/policy"

// Window is when a reboot may start (reboot.window); see policy.Window.
type Window = policy.Window

// ParseWindow builds a Window from the reboot.window keys; see
// policy.ParseWindow.
func ParseWindow(days []string, start, end, timeZone string) (Window, error) {
	return policy.ParseWindow(days, start, end, timeZone)
}
