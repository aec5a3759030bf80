// Package gates asks the outside checks a maintenance or a reboot waits
// for: PromQL queries to Prometheus (Gate, AlertGate), each answer read as
// a stream with a bound on its size, and every failure to ask reported as
// a Blocker, so that a check that cannot be made holds (fails closed).
// pkg/maintenance (maintenance.gates) and pkg/reboot (reboot.gates,
// reboot.blockingAlertRegexp) both ask through Prometheus.
package gates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/reboot/policy"
)

// Gate is one PromQL query of maintenance.gates or reboot.gates: the
// maintenance or reboot waits while the query's answer, an instant vector,
// has a series.
type Gate struct {
	Name  string
	Query string
	// Alerts marks the alert gate (AlertGate): its blockers are the names
	// of the firing alerts, one each, of kind BlockerAlert.
	Alerts bool
	// BeforeReboot asks the gate again once the node is drained: while it
	// holds, the reboot waits (Blocker.BeforeReboot).
	BeforeReboot bool
}

// AlertGate is the gate of reboot.blockingAlertRegexp: the firing alerts
// it selects (policy.AlertsQuery) hold the reboot, each named.
func AlertGate(expr string) Gate {
	return Gate{Name: "alerts", Query: policy.AlertsQuery(expr), Alerts: true}
}

// maxAlertNames bounds the distinct alert names kept of the alert gate's
// answer; the condition's message names fewer anyway.
const maxAlertNames = 64

// Prometheus asks Prometheus each gate's query (GET /api/v1/query) and
// reports a Blocker for each gate whose answer holds a series, or that
// could not be asked (fail closed, as the alert check does).
type Prometheus struct {
	// URL is maintenance.prometheusURL or reboot.prometheusURL; the API
	// path is appended to it.
	URL   string
	Gates []Gate
	// Client makes the requests; nil means one with a 10s timeout.
	Client *http.Client
}

// gateSeriesShown is how many series of a gate's answer its blocker names.
const gateSeriesShown = 3

// maxGateBlocker bounds the text of one gate's blocker: it goes into the
// RebootRequired condition's message with the others.
const maxGateBlocker = 512

// Blockers asks every gate, in order, and returns one Blocker per gate
// that holds.
func (g Prometheus) Blockers(ctx context.Context) []Blocker {
	var out []Blocker
	for _, gate := range g.Gates {
		answer, err := g.ask(ctx, gate.Query)
		if gate.Alerts {
			out = append(out, alertBlockers(answer, err)...)
			continue
		}
		var text string
		switch {
		case err != nil:
			text = fmt.Sprintf("%s (%s) could not be asked: %v", gate.Name, gate.Query, err)
		case answer.series == 0:
			continue
		default:
			text = fmt.Sprintf("%s (%s) has %d series: %s", gate.Name, gate.Query, answer.series, strings.Join(answer.shown, ", "))
			if answer.series > len(answer.shown) {
				text += fmt.Sprintf(" and %d more", answer.series-len(answer.shown))
			}
		}
		out = append(out, Blocker{Kind: BlockerGate, Name: reasontext.ForNode(text, maxGateBlocker), BeforeReboot: gate.BeforeReboot})
	}
	return out
}

// alertBlockers are the alert gate's blockers: one per firing alert's
// name, sorted; or, when Prometheus could not be asked, one that says why
// (fail closed).
func alertBlockers(answer gateAnswer, err error) []Blocker {
	if err != nil {
		return []Blocker{{Kind: BlockerAlert, Name: reasontext.ForNode("the firing alerts could not be asked: "+err.Error(), maxGateBlocker)}}
	}
	names := slices.Sorted(slices.Values(answer.alertNames))
	var out []Blocker
	for _, n := range names {
		out = append(out, Blocker{Kind: BlockerAlert, Name: reasontext.ForNode(n, maxGateBlocker)})
	}
	if answer.series > 0 && len(out) == 0 {
		// ALERTS series always carry alertname; a query answered by
		// something else still holds the reboot.
		out = append(out, Blocker{Kind: BlockerAlert, Name: fmt.Sprintf("%d firing series without an alertname", answer.series)})
	}
	return out
}

// gateAnswer is what is kept of a query's answer.
type gateAnswer struct {
	series int
	shown  []string // the first series, as {labels} value
	// alertNames are the distinct values of the alertname label, at most
	// maxAlertNames.
	alertNames []string
}

func (g Prometheus) ask(ctx context.Context, query string) (gateAnswer, error) {
	u, err := url.Parse(g.URL)
	if err != nil {
		return gateAnswer{}, errors.New("reboot.prometheusURL is not a URL")
	}
	u = u.JoinPath("api", "v1", "query")
	u.RawQuery = url.Values{"query": {query}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return gateAnswer{}, err
	}
	req.Header.Set("Accept", "application/json")
	client := g.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		// The URL in a client error holds the query and maybe a password.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return gateAnswer{}, fmt.Errorf("prometheus unreachable: %v", uerr.Err)
		}
		return gateAnswer{}, fmt.Errorf("prometheus unreachable: %v", err)
	}
	defer resp.Body.Close()
	body := &cappedReader{r: resp.Body, left: maxAnswerBody}
	answer, err := decodeGateAnswer(body)
	if body.over {
		return gateAnswer{}, fmt.Errorf("the answer is larger than %d bytes", maxAnswerBody)
	}
	if err != nil {
		return gateAnswer{}, fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return gateAnswer{}, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return answer, nil
}

// gateSample is one series of an instant vector.
type gateSample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

// decodeGateAnswer reads an /api/v1/query answer as a stream:
// {"status": ..., "error": ..., "data": {"resultType": "vector", "result":
// [sample, ...]}}. Another result type is an error: a gate's query must
// give an instant vector, whose series are what holds the reboot.
func decodeGateAnswer(r io.Reader) (gateAnswer, error) {
	var answer gateAnswer
	var resultType string
	if err := decodeAnswer(r, func(dec *json.Decoder) (err error) {
		resultType, err = decodeGateData(dec, &answer)
		return err
	}); err != nil {
		return gateAnswer{}, err
	}
	if resultType != "vector" {
		return gateAnswer{}, fmt.Errorf("the answer is a %q, want an instant vector (a query such as up == 0)", resultType)
	}
	return answer, nil
}

// decodeGateData reads the value of "data", counting the vector's series
// and keeping the first few. The result type may come before or after the
// result: each series is counted as it comes, and the type checked at the
// end.
func decodeGateData(dec *json.Decoder, answer *gateAnswer) (resultType string, err error) {
	if null, err := openOrNull(dec, '{'); err != nil || null {
		return "", err
	}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return "", err
		}
		switch key {
		case "resultType":
			if err := dec.Decode(&resultType); err != nil {
				return "", err
			}
		case "result":
			tok, err := dec.Token()
			if err != nil {
				return "", err
			}
			if d, ok := tok.(json.Delim); !ok || d != '[' {
				// A scalar or string result is [time, "value"]; a null is
				// no series. Either way, skip what is left of it.
				if d, ok := tok.(json.Delim); ok && d == '{' {
					return "", errors.New("result is an object")
				}
				continue
			}
			for dec.More() {
				if resultType != "" && resultType != "vector" {
					if err := dec.Decode(&json.RawMessage{}); err != nil {
						return "", err
					}
					continue
				}
				// The first few series are read whole, to be shown; of the
				// rest only the alert name, so a long answer costs little.
				var name string
				if len(answer.shown) < gateSeriesShown {
					var s gateSample
					if err := dec.Decode(&s); err != nil {
						return "", err
					}
					answer.shown = append(answer.shown, describeSample(s))
					name = s.Metric["alertname"]
				} else {
					var s struct {
						Metric struct {
							Alertname string `json:"alertname"`
						} `json:"metric"`
					}
					if err := dec.Decode(&s); err != nil {
						return "", err
					}
					name = s.Metric.Alertname
				}
				answer.series++
				if name != "" && len(answer.alertNames) < maxAlertNames && !slices.Contains(answer.alertNames, name) {
					answer.alertNames = append(answer.alertNames, name)
				}
			}
			if err := expectDelim(dec, ']'); err != nil {
				return "", err
			}
		default:
			if err := dec.Decode(&json.RawMessage{}); err != nil {
				return "", err
			}
		}
	}
	return resultType, expectDelim(dec, '}')
}

// describeSample shows a series as PromQL does: {a="1", b="2"} value.
func describeSample(s gateSample) string {
	keys := make([]string, 0, len(s.Metric))
	for k := range s.Metric {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, s.Metric[k])
	}
	value := "?"
	if len(s.Value) == 2 {
		if v, ok := s.Value[1].(string); ok {
			value = v
		}
	}
	return "{" + strings.Join(parts, ", ") + "} " + value
}

// Timeout bounds one query of a gate to Prometheus.
const Timeout = 10 * time.Second
