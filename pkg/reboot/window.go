package reboot

import "github.com/node-agent/node-agent/pkg/reboot/policy"

// Window is when a reboot may start (reboot.window or reboot.windows, less
// reboot.exceptions); see policy.Schedule.
type Window = policy.Schedule

// ParseWindow builds a Window of one window from the reboot.window keys;
// see policy.ParseWindow.
func ParseWindow(days []string, start, end, timeZone string) (Window, error) {
	w, err := policy.ParseWindow(days, start, end, timeZone)
	if err != nil {
		return Window{}, err
	}
	return Window{Windows: []policy.Window{w}}, nil
}
