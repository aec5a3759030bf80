package notify

import (
	"fmt"
	"os"
	"strings"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/notify/spec"
)

// WebhooksFrom reads notifications.webhooks. A webhook's urlFile (a
// DaemonSet-only key: the URL holds a secret) is read here, once, at start:
// a file that cannot be read, or that holds a URL spec.CheckURL refuses,
// stops the start with an error that names the webhook and the file.
func WebhooksFrom(nc config.NotificationsConfig) ([]Webhook, error) {
	hooks := make([]Webhook, len(nc.Webhooks))
	for i, h := range nc.Webhooks {
		u := h.URL
		if h.URLFile != "" {
			b, err := os.ReadFile(h.URLFile)
			if err != nil {
				return nil, fmt.Errorf("notifications.webhooks %s: reading urlFile: %w", h.Name, err)
			}
			u = strings.TrimSpace(string(b))
			if err := spec.CheckURL(u); err != nil {
				return nil, fmt.Errorf("notifications.webhooks %s: the URL in %s: %w", h.Name, h.URLFile, err)
			}
		}
		events := make([]Event, len(h.Events))
		for j, e := range h.Events {
			events[j] = Event(e)
		}
		hooks[i] = Webhook{Name: h.Name, URL: u, Preset: h.Preset, Template: h.Template, Events: events}
	}
	return hooks, nil
}
