// Package notify owns node-agent's notifications: webhooks told of what
// maintenance and reboots do on this node (started, drained, failed, ended;
// rebooting, back, failed), each body made from a template that places fields or a preset
// (Slack-compatible, or generic JSON).
//
// A notification never holds anything up. The agent's components record
// Events as they always do; Recorder passes the Events whose reasons name a
// notification event on to the Notifier, which queues them and returns at
// once. Each webhook has its own queue and sender, so a receiver that fails,
// hangs or answers slowly delays only its own notifications: each attempt is
// bounded by a timeout, failures are retried with a doubling backoff, a
// notification is given up after a bound, and one that finds its queue full
// is dropped and counted. None of it can slow a drain or a reboot.
package notify

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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/node-agent/node-agent/pkg/metrics"
	"github.com/node-agent/node-agent/pkg/notify/spec"
)

// Event is what a notification tells of (spec.Event).
type Event = spec.Event

// The events, as spec names them.
const (
	MaintenanceStarted = spec.MaintenanceStarted
	MaintenanceDrained = spec.MaintenanceDrained
	MaintenanceFailed  = spec.MaintenanceFailed
	MaintenanceEnded   = spec.MaintenanceEnded
	RebootRebooting    = spec.RebootRebooting
	RebootBack         = spec.RebootBack
	RebootFailed       = spec.RebootFailed
)

// eventOfReason maps the reasons of the Events node-agent records on its
// Node to notification events: the Event is what happened, the notification
// says so elsewhere.
var eventOfReason = map[string]Event{
	"MaintenanceStarted":     MaintenanceStarted,
	"DrainSucceeded":         MaintenanceDrained,
	"DrainFailed":            MaintenanceFailed,
	"DrainTimedOut":          MaintenanceFailed,
	"MaintenanceStartFailed": MaintenanceFailed,
	"DrainRefused":           MaintenanceFailed,
	"MaintenanceEnded":       MaintenanceEnded,
	"Rebooting":              RebootRebooting,
	"RebootDone":             RebootBack,
	"RebootDrainFailed":      RebootFailed,
	"RebootRefused":          RebootFailed,
	"RebootRebootLoop":       RebootFailed,
}

// EventOfReason is the notification event an Event reason stands for.
func EventOfReason(reason string) (Event, bool) {
	e, ok := eventOfReason[reason]
	return e, ok
}

// The presets, as spec names them.
const (
	PresetJSON  = spec.PresetJSON
	PresetSlack = spec.PresetSlack
)

// Notification is the data of one notification: the json preset's object,
// and the fields a template places (spec.Fields).
type Notification struct {
	Event   Event     `json:"event"`
	Node    string    `json:"node"`
	Reason  string    `json:"reason"`
	Type    string    `json:"type"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

// field is the text of one of spec.Fields, for a template.
func (nt Notification) field(name string) string {
	switch name {
	case "Event":
		return string(nt.Event)
	case "Node":
		return nt.Node
	case "Reason":
		return nt.Reason
	case "Type":
		return nt.Type
	case "Message":
		return nt.Message
	case "Time":
		return nt.Time.UTC().Format(time.RFC3339)
	}
	return ""
}

// Webhook is one receiver.
type Webhook struct {
	Name string
	URL  string
	// Preset is PresetJSON or PresetSlack; ignored when Template is set.
	Preset string
	// Template, when set, makes the body: text with placeholders of a
	// Notification's fields, {{.Node}} or {{json .Node}} (spec.Template).
	Template string
	// Events it is told of; empty: all.
	Events []Event
}

// Options configure a Notifier.
type Options struct {
	Webhooks []Webhook
	// Timeout bounds one attempt (the request and its answer).
	Timeout time.Duration
	// GiveUpAfter bounds the attempts at one notification, from when it
	// was queued.
	GiveUpAfter time.Duration
	// QueueSize is how many notifications wait per webhook; more are
	// dropped. Zero means 64.
	QueueSize int
	Logger    *slog.Logger
	Metrics   *Metrics
	// Client sends; nil means a plain http.Client (Timeout bounds each
	// attempt).
	Client *http.Client
	// Backoff is the wait after the first failed attempt, doubled after
	// each; zero means a second.
	Backoff time.Duration
}

// Notifier queues notifications and sends them, one sender per webhook.
type Notifier struct {
	o     Options
	hooks []*hook
}

type hook struct {
	Webhook
	tmpl  *spec.Template
	queue chan Notification
}

// New returns a Notifier; Run sends what it queues.
func New(o Options) (*Notifier, error) {
	if o.QueueSize == 0 {
		o.QueueSize = 64
	}
	if o.Backoff == 0 {
		o.Backoff = time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{o: o}
	for _, w := range o.Webhooks {
		h := &hook{Webhook: w, queue: make(chan Notification, o.QueueSize)}
		if w.Template != "" {
			t, err := spec.ParseTemplate(w.Name, w.Template)
			if err != nil {
				return nil, fmt.Errorf("webhook %s: template: %w", w.Name, err)
			}
			h.tmpl = t
		}
		n.hooks = append(n.hooks, h)
	}
	return n, nil
}

// Notify queues nt for every webhook told of its event. It never blocks: a
// full queue drops nt for that webhook, and counts it.
func (n *Notifier) Notify(nt Notification) {
	for _, h := range n.hooks {
		if len(h.Events) > 0 && !slices.Contains(h.Events, nt.Event) {
			continue
		}
		select {
		case h.queue <- nt:
		default:
			n.o.Metrics.count(h.Name, "dropped")
			n.o.Logger.Warn("Notification dropped: the webhook's queue is full", "webhook", h.Name, "event", nt.Event)
		}
	}
}

// Name is the component's name.
func (n *Notifier) Name() string { return "notify" }

// Run sends queued notifications until ctx ends; what is still queued then
// is not sent.
func (n *Notifier) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, h := range n.hooks {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case nt := <-h.queue:
					n.deliver(ctx, h, nt)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// deliver tries nt until it is accepted, GiveUpAfter passes, or ctx ends.
func (n *Notifier) deliver(ctx context.Context, h *hook, nt Notification) {
	body, err := h.body(nt)
	if err != nil {
		n.o.Metrics.count(h.Name, "failed")
		n.o.Logger.Warn("Notification not sent: its body could not be made", "webhook", h.Name, "event", nt.Event, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, n.o.GiveUpAfter)
	defer cancel()
	wait := n.o.Backoff
	for attempt := 1; ; attempt++ {
		err := n.send(ctx, h, body)
		if err == nil {
			n.o.Metrics.count(h.Name, "sent")
			return
		}
		n.o.Logger.Debug("Notification attempt failed", "webhook", h.Name, "event", nt.Event, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			n.o.Metrics.count(h.Name, "failed")
			n.o.Logger.Warn("Notification given up", "webhook", h.Name, "event", nt.Event, "attempts", attempt, "giveUpAfter", n.o.GiveUpAfter, "err", err)
			return
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func (n *Notifier) send(ctx context.Context, h *hook, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, n.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "node-agent")
	resp, err := n.o.Client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return uerr.Err // not the URL, which may hold a token
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// body renders nt for h.
func (h *hook) body(nt Notification) ([]byte, error) {
	if h.tmpl != nil {
		return h.tmpl.Render(nt.field), nil
	}
	if h.Preset == PresetSlack {
		return json.Marshal(map[string]string{"text": SlackText(nt)})
	}
	return json.Marshal(nt)
}

// SlackText is the Slack preset's text: one line that says what happened
// where, then the message.
func SlackText(nt Notification) string {
	what := strings.ReplaceAll(string(nt.Event), "-", " ")
	return fmt.Sprintf("node-agent: %s on %s (%s)\n%s", what, nt.Node, nt.Reason, nt.Message)
}

// Metrics counts notifications by webhook and result.
type Metrics struct{ results *prometheus.CounterVec }

// NewMetrics registers node_agent_notifications_total on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{results: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "notifications_total",
		Help: "Notifications by webhook and result: sent (a 2xx answer), failed (given up after notifications.giveUpAfter, or its body could not be made), dropped (its queue was full).",
	}, []string{"webhook", "result"})}
	reg.MustRegister(m.results)
	return m
}

func (m *Metrics) count(webhook, result string) {
	if m != nil {
		m.results.WithLabelValues(webhook, result).Inc()
	}
}
