package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Binaries of the monitoring tests, built by hack/build-tools.sh from
// github.com/prometheus/prometheus.
const (
	BinPrometheus = "prometheus"
	BinPromtool   = "promtool"
)

// Prometheus is a Prometheus server run from the bin directory, listening on
// loopback, with its data in a directory of its own.
type Prometheus struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL  string
	proc *process
}

// StartPrometheus writes files (prometheus.yml and the rule files it names)
// into dir and runs binDir/prometheus on a free loopback port with that
// configuration, and args added to its own. It returns when the server
// reports ready, or an error with the tail of its log.
func StartPrometheus(ctx context.Context, binDir, dir string, files map[string][]byte, args ...string) (*Prometheus, error) {
	if _, ok := files["prometheus.yml"]; !ok {
		return nil, fmt.Errorf("StartPrometheus: files must hold prometheus.yml")
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	p := &Prometheus{URL: "http://" + addr, proc: &process{
		name: BinPrometheus,
		path: filepath.Join(binDir, BinPrometheus),
		args: []string{
			"--config.file=" + filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr,
			"--log.level=info",
		},
		logPath: filepath.Join(dir, "prometheus.log"),
	}}
	p.proc.args = append(p.proc.args, args...)
	if err := p.proc.startReady(ctx, p.URL+"/-/ready"); err != nil {
		return nil, err
	}
	return p, nil
}

// startReady starts the server and waits until GET readyURL answers 200,
// or it exits, or ctx ends (then it is stopped); the error carries the tail
// of its log.
func (p *process) startReady(ctx context.Context, readyURL string) error {
	if err := p.start(); err != nil {
		return err
	}
	for {
		if err := p.exitError(); err != nil {
			return fmt.Errorf("%w\n%s", err, p.tail(30))
		}
		resp, err := http.Get(readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			_ = p.stop(10 * time.Second)
			return fmt.Errorf("%s not ready: %w\n%s", p.name, ctx.Err(), p.tail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops the server.
func (p *Prometheus) Stop() error { return p.proc.stop(10 * time.Second) }

// Err reports the server's unexpected exit, if any.
func (p *Prometheus) Err() error { return p.proc.exitError() }

// LogTail returns the last n lines of the server's log.
func (p *Prometheus) LogTail(n int) string { return p.proc.tail(n) }

// Alert is one alert of GET /api/v1/alerts.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"` // pending or firing
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// Alerts returns the pending and firing alerts.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	err := p.get(ctx, "/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

// RuleGroup is one group of GET /api/v1/rules, with what a test checks.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Name      string  `json:"name"`
		Query     string  `json:"query"`
		Duration  float64 `json:"duration"`
		Health    string  `json:"health"`
		LastError string  `json:"lastError"`
		Type      string  `json:"type"`
	} `json:"rules"`
}

// Rules returns the loaded rule groups.
func (p *Prometheus) Rules(ctx context.Context) ([]RuleGroup, error) {
	var data struct {
		Groups []RuleGroup `json:"groups"`
	}
	err := p.get(ctx, "/api/v1/rules", nil, &data)
	return data.Groups, err
}

// Series is one series of a query result: its labels and how many samples
// it holds (1 for an instant vector).
type Series struct {
	Metric  map[string]string `json:"metric"`
	Values  [][2]any          `json:"values"`
	Value   [2]any            `json:"value"`
	Samples int               `json:"-"`
}

// QueryRange evaluates expr from start to end at step, as a Grafana panel
// does, and returns the series. A PromQL error is returned as an error.
func (p *Prometheus) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	q := url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	var data struct {
		Result []Series `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query_range", q, &data); err != nil {
		return nil, err
	}
	for i := range data.Result {
		data.Result[i].Samples = len(data.Result[i].Values)
	}
	return data.Result, nil
}

// Query evaluates expr now and returns the series of an instant vector.
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Series, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %s, want vector", expr, data.ResultType)
	}
	var out []Series
	if err := json.Unmarshal(data.Result, &out); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Samples = 1
	}
	return out, nil
}

// LabelValues returns the values of label on the series matching match, as
// Grafana's label_values(match, label) does.
func (p *Prometheus) LabelValues(ctx context.Context, label, match string) ([]string, error) {
	var data []string
	err := p.get(ctx, "/api/v1/label/"+url.PathEscape(label)+"/values", url.Values{"match[]": {match}}, &data)
	return data, err
}

// get calls the HTTP API and decodes the data field of a success.
func (p *Prometheus) get(ctx context.Context, path string, q url.Values, data any) error {
	u := p.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s: %s", path, resp.Status, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}
