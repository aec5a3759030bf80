// Package silence owns the Alertmanager silence node-agent keeps for its
// node while the node is drained or rebooting (maintenance.Disrupted): the
// node's alerts are expected then, and paging someone for a maintenance
// they asked for teaches them to ignore pages.
//
// The silence is made through Alertmanager's v2 API with the matchers the
// admin sets plus <nodeLabel>="<node>", created by "node-agent/<node>". It
// lasts silences.duration and is extended while the maintenance lasts, so
// an agent that dies leaves it to run out on its own; it is expired as soon
// as the node is no longer disrupted. At every start the agent looks for
// the silences it made and expires those it no longer needs, so none is left
// behind after a restart.
package silence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/metrics"
)

// Matcher is one Alertmanager matcher.
type Matcher struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	IsRegex bool   `json:"isRegex"`
	IsEqual bool   `json:"isEqual"`
}

// Keeper keeps the node's silence.
type Keeper struct {
	// URL is Alertmanager's base URL; the API path is appended.
	URL string
	// Node is this node; NodeLabel the alert label that carries it.
	Node      string
	NodeLabel string
	// Matchers are the admin's, added to the node's.
	Matchers []Matcher
	// Duration is how long the silence lasts past each extension; it is
	// extended once a third of it has passed.
	Duration time.Duration
	// Disrupted says whether the node is drained or rebooting, and why.
	Disrupted func(*corev1.Node) (bool, string)
	Client    *http.Client
	Clock     clock.WithTicker
	Logger    *slog.Logger
	Metrics   *Metrics
}

// Name is the component's name.
func (k *Keeper) Name() string { return "silence" }

// Run keeps the silence until ctx ends: at once, every third of Duration,
// and on a change of the Node that changes whether it is disrupted. Other
// changes of the Node (the kubelet's status, labels) ask Alertmanager
// nothing: the silence's state cannot have changed with them.
func (k *Keeper) Run(ctx context.Context, view agent.NodeView) error {
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if err := view.AddHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(_, _ any) { poke() },
	}); err != nil {
		return err
	}
	tick := k.Clock.NewTicker(k.Duration / 3)
	defer tick.Stop()
	// settled is the disruption the last reconcile that succeeded was
	// for; nil before one, and after one failed.
	var settled *bool
	due := true
	for {
		if node, err := view.Get(); err == nil {
			want, _ := k.Disrupted(node)
			if due || settled == nil || *settled != want {
				if err := k.Reconcile(ctx, node); err != nil {
					settled = nil
					if ctx.Err() == nil {
						k.Metrics.failed()
						k.Logger.Warn("Could not keep the node's Alertmanager silence; trying again", "err", err)
					}
				} else {
					settled = &want
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			due = false
		case <-tick.C():
			due = true
		}
	}
}

// createdBy marks the silences this node's agent made.
func (k *Keeper) createdBy() string { return "node-agent/" + k.Node }

// Reconcile makes Alertmanager's silences of this node's agent what node
// needs: one in force while it is disrupted, none otherwise.
func (k *Keeper) Reconcile(ctx context.Context, node *corev1.Node) error {
	want, why := k.Disrupted(node)
	ours, err := k.ours(ctx)
	if err != nil {
		return err
	}
	now := k.Clock.Now()
	if !want {
		k.Metrics.set(false)
		var errs []error
		for _, s := range ours {
			if err := k.expire(ctx, s.ID); err != nil {
				errs = append(errs, err)
				continue
			}
			k.Logger.Info("Expired the node's Alertmanager silence", "id", s.ID)
		}
		return errors.Join(errs...)
	}
	// Keep the newest, expire any other (two agents' overlap, a restart).
	sort.Slice(ours, func(i, j int) bool { return ours[i].EndsAt.After(ours[j].EndsAt) })
	var errs []error
	for _, s := range ours[min(1, len(ours)):] {
		errs = append(errs, k.expire(ctx, s.ID))
	}
	s := silence{
		Matchers: append([]Matcher{{Name: k.NodeLabel, Value: k.Node, IsEqual: true}}, k.Matchers...),
		StartsAt: now, EndsAt: now.Add(k.Duration), CreatedBy: k.createdBy(),
		Comment: "node-agent: " + why + "; expired when it ends",
	}
	switch {
	case len(ours) == 0:
	case ours[0].EndsAt.Sub(now) > k.Duration*2/3 && sameMatchers(ours[0].Matchers, s.Matchers):
		k.Metrics.set(true)
		return errors.Join(errs...) // in force, and not due for extension
	default:
		s.ID, s.StartsAt = ours[0].ID, ours[0].StartsAt
	}
	id, err := k.post(ctx, s)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	k.Metrics.set(true)
	k.Logger.Info("Silenced the node's alerts in Alertmanager", "id", id, "until", s.EndsAt.UTC().Format(time.RFC3339), "why", why)
	return errors.Join(errs...)
}

func sameMatchers(a, b []Matcher) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(m Matcher) string {
		return fmt.Sprintf("%s\x00%s\x00%t\x00%t", m.Name, m.Value, m.IsRegex, m.IsEqual)
	}
	seen := map[string]int{}
	for _, m := range a {
		seen[key(m)]++
	}
	for _, m := range b {
		seen[key(m)]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// silence is Alertmanager's postable and gettable silence, the fields used.
type silence struct {
	ID        string    `json:"id,omitempty"`
	Matchers  []Matcher `json:"matchers"`
	StartsAt  time.Time `json:"startsAt"`
	EndsAt    time.Time `json:"endsAt"`
	CreatedBy string    `json:"createdBy"`
	Comment   string    `json:"comment"`
	Status    *struct {
		State string `json:"state"`
	} `json:"status,omitempty"`
}

// maxSilencesAnswer bounds the list of silences read.
const maxSilencesAnswer = 16 << 20

// ours lists this node's agent's silences that are not expired.
func (k *Keeper) ours(ctx context.Context) ([]silence, error) {
	var all []silence
	if err := k.do(ctx, http.MethodGet, "silences", nil, &all); err != nil {
		return nil, err
	}
	var out []silence
	for _, s := range all {
		if s.CreatedBy == k.createdBy() && (s.Status == nil || s.Status.State != "expired") {
			out = append(out, s)
		}
	}
	return out, nil
}

func (k *Keeper) post(ctx context.Context, s silence) (string, error) {
	var answer struct {
		SilenceID string `json:"silenceID"`
	}
	if err := k.do(ctx, http.MethodPost, "silences", s, &answer); err != nil {
		return "", err
	}
	return answer.SilenceID, nil
}

func (k *Keeper) expire(ctx context.Context, id string) error {
	return k.do(ctx, http.MethodDelete, "silence/"+url.PathEscape(id), nil, nil)
}

// do calls the v2 API: path under /api/v2/, a JSON body in and out.
func (k *Keeper) do(ctx context.Context, method, path string, in, out any) error {
	u, err := url.Parse(k.URL)
	if err != nil {
		return errors.New("silences.alertmanagerURL is not a URL")
	}
	u = u.JoinPath("api", "v2", path)
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.Client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return fmt.Errorf("%s %s: %v", method, path, uerr.Err)
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxSilencesAnswer+1))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if len(data) > maxSilencesAnswer {
		return fmt.Errorf("%s %s: answer larger than %d bytes", method, path, maxSilencesAnswer)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: not an Alertmanager answer: %w", method, path, err)
	}
	return nil
}

// Metrics reports the silence.
type Metrics struct {
	active prometheus.Gauge
	errors prometheus.Counter
}

// NewMetrics registers node_agent_silence_active and
// node_agent_silence_errors_total on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "silence", Name: "active",
			Help: "1 while the agent keeps an Alertmanager silence of its node's alerts (the node is drained or rebooting), else 0.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "silence", Name: "errors_total",
			Help: "Attempts to keep the node's Alertmanager silence that failed (Alertmanager unreachable or refusing); each is tried again.",
		}),
	}
	reg.MustRegister(m.active, m.errors)
	return m
}

func (m *Metrics) set(active bool) {
	if m == nil {
		return
	}
	if active {
		m.active.Set(1)
	} else {
		m.active.Set(0)
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.errors.Inc()
	}
}
