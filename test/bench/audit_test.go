package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

// auditPolicy makes kube-apiserver log one event per request, when the request
// is received (stage RequestReceived), for every client the benchmark
// measures. Counting one stage only counts each request once, and counting at
// receipt counts a watch when it is opened, however long it then stays open.
//
// The rest of the control plane is left out: its requests are not what is
// measured, and writing them would add the audit log's own cost to both
// tools' drains. The one exception is kwok's deletion of pods, which marks
// when a drained pod is really gone.
var auditPolicy = fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete"]
rules:
- level: Metadata
  users: [%[1]q]
  verbs: ["delete"]
  resources: [{group: "", resources: ["pods"]}]
- level: None
  users: [%[1]q, "system:kube-scheduler", "system:kube-controller-manager", "system:apiserver"]
- level: None
  userGroups: ["system:serviceaccounts", "system:nodes"]
- level: Metadata
`, testenv.KwokUser)

const stageRequestReceived = "RequestReceived"

// auditEvent is an audit Event with the benchmark's readings of it.
type auditEvent struct{ testenv.AuditEvent }

// kind names what a request did, for the breakdown: "create pods/eviction",
// "get nodes", "get /api" for a path without an object.
func (e auditEvent) kind() string {
	if e.ObjectRef == nil || e.ObjectRef.Resource == "" {
		path, _, _ := strings.Cut(e.RequestURI, "?")
		return e.Verb + " " + path
	}
	res := e.ObjectRef.Resource
	if e.ObjectRef.Subresource != "" {
		res += "/" + e.ObjectRef.Subresource
	}
	return e.Verb + " " + res
}

func (e auditEvent) isEviction() bool {
	return e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "pods" && e.ObjectRef.Subresource == "eviction"
}

// isPodGone reports a pod deletion by kwok, the fake kubelet: with the
// pod/fast stages it deletes a terminating pod at once, so this is when an
// evicted pod disappears.
func (e auditEvent) isPodGone(namespace string) bool {
	return e.User.Username == testenv.KwokUser && e.Verb == "delete" && e.ObjectRef != nil &&
		e.ObjectRef.Resource == "pods" && e.ObjectRef.Subresource == "" && e.ObjectRef.Namespace == namespace
}

// The user agents of the measured clients. node-agent's run command sets
// "node-agent/<node>" and its maintenance CLI "node-agent-maintenance"
// (cmd/node-agent); kubectl sends "kubectl/<version> (<os>/<arch>) ...".
const (
	agentUserAgentPrefix = "node-agent/"
	cliUserAgent         = "node-agent-maintenance"
	kubectlUserAgent     = "kubectl"
)

func isAgent(ua string) bool     { return strings.HasPrefix(ua, agentUserAgentPrefix) }
func isCLI(ua string) bool       { return ua == cliUserAgent }
func isNodeAgent(ua string) bool { return isAgent(ua) || isCLI(ua) }
func isKubectl(ua string) bool   { return strings.HasPrefix(ua, kubectlUserAgent) }

// auditLog reads kube-apiserver's JSON audit log as it grows.
type auditLog struct {
	path   string
	offset int64
	events []auditEvent // RequestReceived only, in file order
}

// read appends the events written since the last read. A line still being
// written (no newline yet) is left for the next read.
func (a *auditLog) read() error {
	f, err := os.Open(a.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing logged yet
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		a.offset += int64(len(line))
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("audit log %s at byte %d: %w", a.path, a.offset-int64(len(line)), err)
		}
		if ev.Stage == stageRequestReceived {
			a.events = append(a.events, ev)
		}
	}
}

// between returns the requests received in [from, to], oldest first.
func (a *auditLog) between(from, to time.Time) []auditEvent {
	var out []auditEvent
	for _, ev := range a.events {
		t := ev.Received.Time
		if !t.Before(from) && !t.After(to) {
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Received.Before(&out[j].Received) })
	return out
}

// filter returns the events whose user agent keep accepts.
func filter(events []auditEvent, keep func(userAgent string) bool) []auditEvent {
	var out []auditEvent
	for _, ev := range events {
		if keep(ev.UserAgent) {
			out = append(out, ev)
		}
	}
	return out
}
