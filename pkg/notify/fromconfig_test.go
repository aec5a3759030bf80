package notify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/config"
)

// A urlFile is read once and its URL checked; a file that is missing or
// holds a refused URL is an error that names the webhook and the file.
func TestWebhooksFrom(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("https://hooks.example/T0/B0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("file:///etc/shadow"), 0o600); err != nil {
		t.Fatal(err)
	}
	hooks, err := WebhooksFrom(config.NotificationsConfig{Webhooks: []config.WebhookConfig{
		{Name: "inline", URL: "https://chat.example/hook", Events: []string{"DrainSucceeded"}},
		{Name: "secret", URLFile: good},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(hooks) != 2 || hooks[0].URL != "https://chat.example/hook" || len(hooks[0].Events) != 1 || hooks[1].URL != "https://hooks.example/T0/B0" {
		t.Errorf("webhooks %+v", hooks)
	}
	for _, tt := range []struct{ file, want string }{
		{filepath.Join(dir, "missing"), "secret: reading urlFile"},
		{bad, "secret: the URL in " + bad},
	} {
		_, err := WebhooksFrom(config.NotificationsConfig{Webhooks: []config.WebhookConfig{{Name: "secret", URLFile: tt.file}}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("urlFile %s: %v, want an error with %q", tt.file, err, tt.want)
		}
	}
}
