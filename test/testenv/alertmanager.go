package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// BinAlertmanager is the Alertmanager of the silence tests, built by
// hack/build-tools.sh from github.com/prometheus/alertmanager.
const BinAlertmanager = "alertmanager"

// Alertmanager is an Alertmanager run from the bin directory, listening on
// loopback, alone (no cluster), with its data in a directory of its own.
type Alertmanager struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL  string
	proc *process
}

// alertmanagerConfig routes every alert to a receiver that sends nothing.
const alertmanagerConfig = "route:\n  receiver: none\n  group_wait: 1s\n  group_interval: 1s\nreceivers:\n  - name: none\n"

// StartAlertmanager runs binDir/alertmanager with a configuration that
// sends nothing, on a free loopback port. It returns when the server
// reports ready, or an error with the tail of its log.
func StartAlertmanager(ctx context.Context, binDir, dir string) (*Alertmanager, error) {
	cfg := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfg, []byte(alertmanagerConfig), 0o644); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	a := &Alertmanager{URL: "http://" + addr, proc: &process{
		name: BinAlertmanager,
		path: filepath.Join(binDir, BinAlertmanager),
		args: []string{
			"--config.file=" + cfg,
			"--storage.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr,
			// Alone: no gossip port, nothing off loopback.
			"--cluster.listen-address=",
			"--log.level=info",
		},
		logPath: filepath.Join(dir, "alertmanager.log"),
	}}
	if err := a.proc.startReady(ctx, a.URL+"/-/ready"); err != nil {
		return nil, err
	}
	return a, nil
}

// Stop stops the server.
func (a *Alertmanager) Stop() error { return a.proc.stop(10 * time.Second) }

// LogTail returns the last n lines of the server's log.
func (a *Alertmanager) LogTail(n int) string { return a.proc.tail(n) }

// AMAlert is one alert of GET /api/v2/alerts.
type AMAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State      string   `json:"state"`
		SilencedBy []string `json:"silencedBy"`
	} `json:"status"`
}

// AMSilence is one silence of GET /api/v2/silences.
type AMSilence struct {
	ID        string `json:"id"`
	CreatedBy string `json:"createdBy"`
	Comment   string `json:"comment"`
	Status    struct {
		State string `json:"state"`
	} `json:"status"`
	Matchers []struct {
		Name    string `json:"name"`
		Value   string `json:"value"`
		IsRegex bool   `json:"isRegex"`
		IsEqual bool   `json:"isEqual"`
	} `json:"matchers"`
}

// Alerts returns the server's alerts, silenced ones included.
func (a *Alertmanager) Alerts(ctx context.Context) ([]AMAlert, error) {
	var out []AMAlert
	return out, a.get(ctx, "/api/v2/alerts", &out)
}

// Silences returns the server's silences, expired ones included.
func (a *Alertmanager) Silences(ctx context.Context) ([]AMSilence, error) {
	var out []AMSilence
	return out, a.get(ctx, "/api/v2/silences", &out)
}

func (a *Alertmanager) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}
