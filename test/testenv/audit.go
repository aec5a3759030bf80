package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/node-agent/node-agent/pkg/confinement"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The stages of a request at which kube-apiserver writes an audit event
// (audit.k8s.io/v1 Stage) that the tests read.
const (
	// AuditStageRequestReceived: as soon as the request is received, once
	// per request, long-running or not.
	AuditStageRequestReceived = "RequestReceived"
	// AuditStageResponseComplete: once the response is sent; a watch gets it
	// only when it ends.
	AuditStageResponseComplete = "ResponseComplete"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event (one line of
// kube-apiserver's JSON audit log) that the tests and the benchmark read.
type AuditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	// ImpersonatedUser is set when the request impersonated someone, such
	// as the agent acting as its node (pkg/podaccess).
	ImpersonatedUser *struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"impersonatedUser"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	Received metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// Code is the response's HTTP status code, 0 when the event has none (stage
// RequestReceived).
func (e AuditEvent) Code() int {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// Resource is what the request was on, "pods" or "pods/eviction", without
// the API group; "" for a path that names no object, such as /api.
func (e AuditEvent) Resource() string {
	if e.ObjectRef == nil || e.ObjectRef.Resource == "" {
		return ""
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

// Kind names what the request did, for breakdowns: "create pods/eviction",
// "watch nodes", or "get /api" for a path that names no object.
func (e AuditEvent) Kind() string {
	if res := e.Resource(); res != "" {
		return e.Verb + " " + res
	}
	path, _, _ := strings.Cut(e.RequestURI, "?")
	return e.Verb + " " + path
}

// UserAuditPolicy is an audit policy that records every request of user at
// the Metadata level (with the user's extra info, such as the node name of a
// pod-bound token), once complete, and nothing else.
func UserAuditPolicy(user string) string {
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["` + user + `"]
  - level: None
`
}

// AuditLog writes policy into dir and returns the kube-apiserver arguments
// (for Options.APIServerArgs) that log by it, as JSON, to the returned file.
func AuditLog(dir, policy string) (args []string, logPath string, err error) {
	policyFile := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		return nil, "", err
	}
	logPath = filepath.Join(dir, "audit.log")
	return []string{"--audit-policy-file=" + policyFile, "--audit-log-path=" + logPath, "--audit-log-format=json"}, logPath, nil
}

// AuditReader reads kube-apiserver's JSON audit log (see AuditLog) as it
// grows: each Read adds what was written since the previous one, so a
// benchmark can read the log after every round without reading it all again.
type AuditReader struct {
	path   string
	stage  string
	offset int64
	events []AuditEvent
}

// NewAuditReader reads the audit log at path, keeping the events of stage
// only (AuditStageRequestReceived, say), or every event when stage is "".
// Nothing is read before Read.
func NewAuditReader(path, stage string) *AuditReader {
	return &AuditReader{path: path, stage: stage}
}

// Read adds the events written since the last Read. A line still being
// written (no newline yet) is left for the next Read; a log that does not
// exist yet reads as empty, as kube-apiserver creates it at its first event.
func (a *AuditReader) Read() error {
	f, err := os.Open(a.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return err
	}
	// An event's line has no length limit, so not bufio.Scanner.
	r := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		at := a.offset
		a.offset += int64(len(line))
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var ev AuditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("audit log %s at byte %d: %w", a.path, at, err)
		}
		if a.stage == "" || ev.Stage == a.stage {
			a.events = append(a.events, ev)
		}
	}
}

// Events returns the events read so far, in the log's order.
func (a *AuditReader) Events() []AuditEvent { return a.events }

// Between returns the events read so far of the requests received in
// [from, to], oldest first.
func (a *AuditReader) Between(from, to time.Time) []AuditEvent {
	var out []AuditEvent
	for _, ev := range a.events {
		if t := ev.Received.Time; !t.Before(from) && !t.After(to) {
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Received.Before(&out[j].Received) })
	return out
}

// CheckConfinementProbes checks the agent's start-check probes
// (pkg/confinement) among events, the latest stage of each request: at
// least one was refused (403: the policy holds the agent), and any allowed
// was made before the first refusal (the policy, applied with the agent,
// had not taken effect yet). It returns how many were allowed and refused.
func CheckConfinementProbes(events []AuditEvent) (allowed, refused int, err error) {
	var firstRefused, lastAllowed time.Time
	for _, e := range events {
		if !confinement.IsProbe(e.RequestURI) {
			continue
		}
		switch at := e.Received.Time; e.Code() {
		case 403:
			refused++
			if firstRefused.IsZero() || at.Before(firstRefused) {
				firstRefused = at
			}
		case 200, 201:
			allowed++
			if at.After(lastAllowed) {
				lastAllowed = at
			}
		default:
			return allowed, refused, fmt.Errorf("a confinement probe got %d, want 403 from the policy (or 200 before it took effect)", e.Code())
		}
	}
	switch {
	case refused == 0:
		return allowed, refused, fmt.Errorf("no confinement probe of the agent was refused (%d allowed): the policy does not hold it", allowed)
	case allowed > 0 && lastAllowed.After(firstRefused):
		return allowed, refused, fmt.Errorf("a confinement probe was allowed at %s, after one was refused at %s", lastAllowed, firstRefused)
	}
	return allowed, refused, nil
}

// PodsAuditPolicy records every eviction and deletion of a pod, at the
// Metadata level, once complete, and nothing else: what PodTimelines reads.
const PodsAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create", "delete"]
    resources:
      - group: ""
        resources: ["pods", "pods/eviction"]
  - level: None
`

// PodTimeline is what the audit log says of one pod's removal: when each
// eviction asked for it was received, accepted (201) or refused, and when
// the last deletion that succeeded (200) was received, the one that
// removed it (kwok's, as the kubelet's final deletion).
type PodTimeline struct {
	Evicted []time.Time
	Refused int
	Deleted time.Time
}

// FirstEvicted is when the pod's first accepted eviction was received;
// zero when it has none.
func (p *PodTimeline) FirstEvicted() time.Time {
	if p == nil || len(p.Evicted) == 0 {
		return time.Time{}
	}
	return p.Evicted[0]
}

// PodTimelines reads the evictions and deletions of the pods of namespace
// among events (ResponseComplete events, as PodsAuditPolicy logs them), by
// pod name, each list oldest first.
func PodTimelines(events []AuditEvent, namespace string) map[string]*PodTimeline {
	out := map[string]*PodTimeline{}
	sorted := append([]AuditEvent(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Received.Before(&sorted[j].Received) })
	for _, e := range sorted {
		if e.ObjectRef == nil || e.ObjectRef.Namespace != namespace || e.ObjectRef.APIGroup != "" || e.Stage != AuditStageResponseComplete {
			continue
		}
		tl := out[e.ObjectRef.Name]
		if tl == nil {
			tl = &PodTimeline{}
		}
		switch {
		case e.Verb == "create" && e.Resource() == "pods/eviction" && e.Code() == 201:
			tl.Evicted = append(tl.Evicted, e.Received.Time)
		case e.Verb == "create" && e.Resource() == "pods/eviction":
			tl.Refused++
		case e.Verb == "delete" && e.Resource() == "pods" && e.Code() == 200:
			tl.Deleted = e.Received.Time
		default:
			continue
		}
		out[e.ObjectRef.Name] = tl
	}
	return out
}
