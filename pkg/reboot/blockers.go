package reboot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/reboot/policy"
)

// Every check below fails closed: when it cannot be made, it reports a
// blocker that says why, and the reboot waits. A node that reboots because
// Prometheus was down, or the apiserver did not answer, is the outage the
// check was configured to prevent (kured fails closed the same way).

// PodLister lists the pods on this node that match a selector.
type PodLister interface {
	ListPods(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error)
}

// NodePods lists a node's pods through the apiserver with a spec.nodeName
// field selector, through the client pkg/podaccess chose: as the node itself
// (ModeNode: the Node authorizer lets the node's identity list its pods only
// with that selector), or with the ServiceAccount's own grant where the
// cluster refuses the impersonation (ModeClusterWide), as the drain does.
type NodePods struct {
	// Access says how the node's pods are reached; it is asked before
	// every list, as the drain asks before it begins. The wiring hands it
	// podaccess.Reporter.Check, shared with the drain.
	Access func(ctx context.Context) (podaccess.Access, error)
	Node   string
}

// ListPods implements PodLister; the label selector is applied by the
// apiserver. With no way to the pods (ModeNone), or when the way cannot be
// found out, it fails, and PodBlockers reports that as a blocker.
func (n NodePods) ListPods(ctx context.Context, selector labels.Selector) ([]*corev1.Pod, error) {
	acc, err := n.Access(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding out how node %s's pods are reached: %w", n.Node, err)
	}
	if acc.Client == nil {
		return nil, fmt.Errorf("%w: %s; %s", podaccess.ErrNoAccess, acc.Why, podaccess.Fix)
	}
	list, err := acc.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Node).String(),
		LabelSelector: selector.String(),
	})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// PodBlockers finds the pods that block a reboot: those on this node that
// match reboot.blockingPodSelector and have not finished.
type PodBlockers struct {
	Lister PodLister
	// Selector is the parsed reboot.blockingPodSelector; nil or empty
	// means no pod blocks (labels.Parse("") would select every pod).
	Selector labels.Selector
}

// Blockers returns one Blocker per blocking pod, namespace/name, sorted; a
// failed list is itself a blocker.
func (p PodBlockers) Blockers(ctx context.Context) []Blocker {
	if p.Selector == nil || p.Selector.Empty() {
		return nil
	}
	pods, err := p.Lister.ListPods(ctx, p.Selector)
	if err != nil {
		return []Blocker{{Kind: BlockerPod, Name: "pods not listed: " + err.Error()}}
	}
	var out []Blocker
	for _, pod := range pods {
		// A pod that finished holds nothing a reboot could break; kured
		// leaves out the same phases.
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if !p.Selector.Matches(labels.Set(pod.Labels)) {
			continue // the lister may be a store that does not filter
		}
		out = append(out, Blocker{Kind: BlockerPod, Name: pod.Namespace + "/" + pod.Name})
	}
	slices.SortFunc(out, func(a, b Blocker) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// AlertBlockers finds the firing Prometheus alerts that block a reboot.
type AlertBlockers struct {
	// URL is reboot.prometheusURL; the API path is appended to it, so a
	// Prometheus served under a path prefix works.
	URL string
	// Match selects alert names; nil means every alert. See
	// CompileAlertRegexp.
	Match *regexp.Regexp
	// Client makes the request; nil means one with a 10s timeout.
	Client *http.Client
}

// CompileAlertRegexp compiles reboot.blockingAlertRegexp anchored at both
// ends (policy.CompileAlertRegexp); "" gives nil: every alert.
func CompileAlertRegexp(expr string) (*regexp.Regexp, error) {
	return policy.CompileAlertRegexp(expr)
}

// maxAlertsBody bounds the answer read from Prometheus; a cluster in
// trouble can have many alerts, but not this many bytes of them.
const maxAlertsBody = 16 << 20

// Blockers asks Prometheus for its alerts (GET /api/v1/alerts) and returns
// one Blocker per name of a firing alert that matches, sorted. Pending
// alerts do not block: they have not fired yet. When the query fails the
// one Blocker says why ("prometheus unreachable: ...").
func (a AlertBlockers) Blockers(ctx context.Context) []Blocker {
	if a.URL == "" {
		return nil
	}
	names, err := a.firing(ctx)
	if err != nil {
		return []Blocker{{Kind: BlockerAlert, Name: "prometheus unreachable: " + err.Error()}}
	}
	var out []Blocker
	for _, n := range names {
		if a.Match == nil || a.Match.MatchString(n) {
			out = append(out, Blocker{Kind: BlockerAlert, Name: n})
		}
	}
	return out
}

func (a AlertBlockers) firing(ctx context.Context) ([]string, error) {
	u, err := url.Parse(a.URL)
	if err != nil {
		// Not err: it quotes the URL with its password, and the
		// blocker's text goes onto the Node.
		return nil, errors.New("reboot.prometheusURL is not a URL")
	}
	u = u.JoinPath("api", "v1", "alerts")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	client := a.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// Streamed: the answer is decoded alert by alert, keeping only the
	// names of firing ones, so a large answer costs its names in memory,
	// not its size several times over as a whole decode would.
	body := &cappedReader{r: resp.Body, left: maxAlertsBody}
	names, err := decodeFiringAlerts(body)
	if body.over {
		return nil, fmt.Errorf("answer of %s is larger than %d bytes", u.Redacted(), maxAlertsBody)
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s: HTTP %d: %w", u.Redacted(), resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", u.Redacted(), resp.StatusCode)
	}
	return names, nil
}

// cappedReader reads at most left bytes of r, and says when r had more.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer one.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			c.over = true
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// parseFiringAlerts is decodeFiringAlerts of a whole answer.
func parseFiringAlerts(body []byte) ([]string, error) {
	return decodeFiringAlerts(bytes.NewReader(body))
}

// firingAlert is what is read of one alert: its name and state, every
// other label skipped without being kept.
type firingAlert struct {
	Labels struct {
		Alertname string `json:"alertname"`
	} `json:"labels"`
	State string `json:"state"`
}

// decodeFiringAlerts returns the distinct alertnames of the firing alerts in
// an /api/v1/alerts answer, sorted. It reads the answer as a stream:
// {"status": ..., "error": ..., "data": {"alerts": [alert, ...]}}, keys in
// any order, other keys skipped.
func decodeFiringAlerts(r io.Reader) ([]string, error) {
	var alerts []firingAlert
	if err := decodeAnswer(r, func(dec *json.Decoder) (err error) {
		alerts, err = decodeAlertsData(dec)
		return err
	}); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var names []string
	for _, al := range alerts {
		if al.State != "firing" {
			continue
		}
		n := al.Labels.Alertname
		if n == "" {
			return nil, errors.New("a firing alert has no alertname label")
		}
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

// decodeAnswer reads a Prometheus API answer as a stream:
// {"status": ..., "error": ..., "data": ...}, keys in any order, other keys
// skipped; data reads the value of "data". An answer whose status is not
// success is an error that quotes Prometheus's.
func decodeAnswer(r io.Reader, data func(*json.Decoder) error) error {
	dec := json.NewDecoder(r)
	bad := func(err error) error { return fmt.Errorf("not a Prometheus API answer: %w", err) }
	var status, apiErr string
	if err := expectDelim(dec, '{'); err != nil {
		return bad(err)
	}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return bad(err)
		}
		switch key {
		case "status":
			err = dec.Decode(&status)
		case "error":
			err = dec.Decode(&apiErr)
		case "data":
			err = data(dec)
		default:
			err = dec.Decode(&json.RawMessage{})
		}
		if err != nil {
			return bad(err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return bad(err)
	}
	if status != "success" {
		if apiErr != "" {
			return fmt.Errorf("status %q: %s", status, apiErr)
		}
		return fmt.Errorf("status %q, want \"success\"", status)
	}
	return nil
}

// decodeAlertsData reads the value of "data": an object whose "alerts" is
// a list of alerts; only firing ones are kept.
func decodeAlertsData(dec *json.Decoder) ([]firingAlert, error) {
	if null, err := openOrNull(dec, '{'); err != nil || null {
		return nil, err
	}
	var out []firingAlert
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return nil, err
		}
		if key != "alerts" {
			if err := dec.Decode(&json.RawMessage{}); err != nil {
				return nil, err
			}
			continue
		}
		if null, err := openOrNull(dec, '['); err != nil {
			return nil, err
		} else if null {
			continue
		}
		for dec.More() {
			var al firingAlert
			if err := dec.Decode(&al); err != nil {
				return nil, err
			}
			if al.State == "firing" {
				out = append(out, al)
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return nil, err
		}
	}
	return out, expectDelim(dec, '}')
}

// openOrNull reads the opening delimiter want, or a null in its place
// (reported true).
func openOrNull(dec *json.Decoder, want json.Delim) (null bool, err error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	if tok == nil {
		return true, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return false, fmt.Errorf("found %v where %q was expected", tok, string(want))
	}
	return false, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("found %v where %q was expected", tok, string(want))
	}
	return nil
}

func objectKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	key, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("found %v where an object key was expected", tok)
	}
	return key, nil
}
