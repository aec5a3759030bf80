// Package spec owns what a notification webhook may be configured with:
// the events, the presets, and the checks of a URL and a template. It
// imports nothing of node-agent's, so that pkg/config validates
// notifications.webhooks without linking the sender (pkg/notify).
package spec

import (
	"errors"
	"net/url"
)

// Event is what a notification tells of.
type Event string

// The events a webhook can be told of.
const (
	MaintenanceStarted Event = "maintenance-started"
	MaintenanceDrained Event = "maintenance-drained"
	MaintenanceFailed  Event = "maintenance-failed"
	MaintenanceEnded   Event = "maintenance-ended"
	RebootRebooting    Event = "reboot-rebooting"
	RebootBack         Event = "reboot-back"
	RebootFailed       Event = "reboot-failed"
)

// Events lists every event.
var Events = []Event{MaintenanceStarted, MaintenanceDrained, MaintenanceFailed, MaintenanceEnded, RebootRebooting, RebootBack, RebootFailed}

// Presets are the built-in bodies.
const (
	// PresetJSON is a JSON object: event, node, reason, type, message, time.
	PresetJSON = "json"
	// PresetSlack is a Slack incoming webhook's {"text": ...}; Mattermost,
	// Rocket.Chat and Teams' Slack-compatible endpoints take it too.
	PresetSlack = "slack"
)

// CheckURL accepts an absolute http or https URL: a webhook's, and the
// Prometheus and Alertmanager URLs of pkg/config.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an absolute http:// or https:// URL")
	}
	return nil
}
