package bench

import (
	"encoding/json"
	"testing"

	"github.com/node-agent/node-agent/test/testenv"
)

// These cover the benchmark's bookkeeping; they are cheap and run with
// `go test ./...`, unlike the benchmark.

// testenv.AuditReader's own test covers reading the log; these are the
// benchmark's readings of its events.
func TestAuditReadings(t *testing.T) {
	tests := []struct {
		event     string
		kind      string
		eviction  bool
		goneIn    string // the namespace isPodGone accepts, if any
		nodeAgent bool
		kubectl   bool
	}{
		{
			event:     `{"verb":"create","requestURI":"/api/v1/namespaces/bench/pods/web-1/eviction","userAgent":"node-agent/node-1","objectRef":{"resource":"pods","namespace":"bench","name":"web-1","subresource":"eviction"}}`,
			kind:      "create pods/eviction",
			eviction:  true,
			nodeAgent: true,
		},
		{
			event:   `{"verb":"get","requestURI":"/api?timeout=32s","userAgent":"kubectl/v1.36.3 (linux/amd64) kubernetes/abc"}`,
			kind:    "get /api",
			kubectl: true,
		},
		{
			event:  `{"verb":"delete","requestURI":"/api/v1/namespaces/bench/pods/web-1","userAgent":"kwok/v0.8.0","user":{"username":"testenv-kwok"},"objectRef":{"resource":"pods","namespace":"bench","name":"web-1"}}`,
			kind:   "delete pods",
			goneIn: "bench",
		},
		{
			// The same deletion by anyone but kwok is not a pod gone.
			event:   `{"verb":"delete","requestURI":"/api/v1/namespaces/bench/pods/web-1","userAgent":"kubectl/v1.36.3","user":{"username":"testenv-admin"},"objectRef":{"resource":"pods","namespace":"bench","name":"web-1"}}`,
			kind:    "delete pods",
			kubectl: true,
		},
	}
	for _, tt := range tests {
		var ev testenv.AuditEvent
		if err := json.Unmarshal([]byte(tt.event), &ev); err != nil {
			t.Fatal(err)
		}
		if got := requestKind(ev); got != tt.kind {
			t.Errorf("%s: kind %q, want %q", tt.event, got, tt.kind)
		}
		if got := isEviction(ev); got != tt.eviction {
			t.Errorf("%s: eviction %t, want %t", tt.event, got, tt.eviction)
		}
		for _, ns := range []string{"bench", "other"} {
			if got, want := isPodGone(ev, ns), ns == tt.goneIn; got != want {
				t.Errorf("%s: pod gone in %s %t, want %t", tt.event, ns, got, want)
			}
		}
		if isNodeAgent(ev.UserAgent) != tt.nodeAgent || isKubectl(ev.UserAgent) != tt.kubectl {
			t.Errorf("%s: node-agent %t, kubectl %t; want %t, %t", tt.event, isNodeAgent(ev.UserAgent), isKubectl(ev.UserAgent), tt.nodeAgent, tt.kubectl)
		}
	}
}

func TestUserAgents(t *testing.T) {
	tests := []struct {
		ua                      string
		nodeAgent, cli, kubectl bool
	}{
		{ua: "node-agent/node-1", nodeAgent: true},
		{ua: "node-agent-maintenance", nodeAgent: true, cli: true},
		{ua: "node-agent-coordinator/" + coordinatorIdentity, nodeAgent: true},
		{ua: "node-agent-coordinator/v0.0.0 (linux/amd64) kubernetes/$Format/node-agent-coordinator/leader-election"},
		{ua: "kubectl/v1.36.3 (linux/amd64) kubernetes/abcdef", kubectl: true},
		{ua: "bench.test/v0.0.0 (linux/amd64) kubernetes/$Format"},
		{ua: "kwok/v0.8.0"},
	}
	for _, tt := range tests {
		if isNodeAgent(tt.ua) != tt.nodeAgent || isCLI(tt.ua) != tt.cli || isKubectl(tt.ua) != tt.kubectl {
			t.Errorf("%q: node-agent %t, CLI %t, kubectl %t; want %t, %t, %t", tt.ua,
				isNodeAgent(tt.ua), isCLI(tt.ua), isKubectl(tt.ua), tt.nodeAgent, tt.cli, tt.kubectl)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestDrainSecondsFrom(t *testing.T) {
	exp := `# HELP node_agent_drain_duration_seconds Time from the start of a drain to its end.
# TYPE node_agent_drain_duration_seconds histogram
node_agent_drain_duration_seconds_bucket{result="succeeded",trigger="annotation",le="1"} 1
node_agent_drain_duration_seconds_sum{result="failed",trigger="annotation"} 20
node_agent_drain_duration_seconds_sum{result="succeeded",trigger="annotation"} 1.25
node_agent_drain_duration_seconds_count{result="succeeded",trigger="annotation"} 1
`
	if got, err := drainSecondsFrom(exp); err != nil || got != 1.25 {
		t.Errorf("drainSecondsFrom = %v, %v; want 1.25", got, err)
	}
	if got, err := drainSecondsFrom("go_goroutines 10\n"); err != nil || got != 0 {
		t.Errorf("before any drain: %v, %v; want 0", got, err)
	}
}
