package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// These cover the benchmark's bookkeeping; they are cheap and run with
// `go test ./...`, unlike the benchmark.

func TestAuditLogReadsGrowingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	lines := []string{
		`{"kind":"Event","stage":"RequestReceived","verb":"create","requestURI":"/api/v1/namespaces/bench/pods/web-1/eviction","userAgent":"node-agent/node-1","user":{"username":"testenv-admin"},"objectRef":{"resource":"pods","namespace":"bench","name":"web-1","subresource":"eviction"},"requestReceivedTimestamp":"2026-01-02T03:04:05.100000Z"}`,
		`{"kind":"Event","stage":"RequestReceived","verb":"get","requestURI":"/api?timeout=32s","userAgent":"kubectl/v1.36.3 (linux/amd64) kubernetes/abc","user":{"username":"testenv-admin"},"requestReceivedTimestamp":"2026-01-02T03:04:05.200000Z"}`,
		`{"kind":"Event","stage":"Panic","verb":"get","userAgent":"kubectl/v1.36.3","user":{"username":"testenv-admin"},"requestReceivedTimestamp":"2026-01-02T03:04:05.200000Z"}`,
		`{"kind":"Event","stage":"RequestReceived","verb":"delete","requestURI":"/api/v1/namespaces/bench/pods/web-1","userAgent":"kwok/v0.8.0","user":{"username":"testenv-kwok"},"objectRef":{"resource":"pods","namespace":"bench","name":"web-1"},"requestReceivedTimestamp":"2026-01-02T03:04:05.300000Z"}`,
	}
	// The last line is still being written: no newline yet.
	write(t, path, lines[0]+"\n"+lines[1]+"\n"+lines[2]+"\n"+lines[3][:40])
	a := &auditLog{path: path}
	if err := a.read(); err != nil {
		t.Fatal(err)
	}
	if len(a.events) != 2 {
		t.Fatalf("%d RequestReceived events after the first read, want 2 (the Panic stage and the partial line are not counted)", len(a.events))
	}
	write(t, path, lines[0]+"\n"+lines[1]+"\n"+lines[2]+"\n"+lines[3]+"\n")
	if err := a.read(); err != nil {
		t.Fatal(err)
	}
	if len(a.events) != 3 {
		t.Fatalf("%d events after the second read, want 3", len(a.events))
	}

	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	window := a.between(base.Add(150*time.Millisecond), base.Add(300*time.Millisecond))
	if len(window) != 2 {
		t.Fatalf("%d events in [.150, .300], want 2 (bounds included)", len(window))
	}
	if got := filter(window, isKubectl); len(got) != 1 || got[0].kind() != "get /api" {
		t.Errorf("kubectl's requests = %+v, want one get /api", got)
	}
	if !window[1].isPodGone("bench") || window[1].isPodGone("other") {
		t.Errorf("kwok's pod deletion not recognised by namespace")
	}
	ev := a.events[0]
	if !ev.isEviction() || ev.kind() != "create pods/eviction" || !isNodeAgent(ev.UserAgent) || !isAgent(ev.UserAgent) {
		t.Errorf("eviction event misread: kind %q", ev.kind())
	}
}

func TestUserAgents(t *testing.T) {
	tests := []struct {
		ua                      string
		nodeAgent, cli, kubectl bool
	}{
		{ua: "node-agent/node-1", nodeAgent: true},
		{ua: "node-agent-maintenance", nodeAgent: true, cli: true},
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

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
