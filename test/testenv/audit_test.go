package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAuditReaderReadsGrowingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	lines := []string{
		`{"kind":"Event","auditID":"a","stage":"RequestReceived","verb":"create","requestURI":"/api/v1/namespaces/bench/pods/web-1/eviction","userAgent":"node-agent/node-1","user":{"username":"testenv-admin"},"objectRef":{"resource":"pods","namespace":"bench","name":"web-1","subresource":"eviction"},"requestReceivedTimestamp":"2026-01-02T03:04:05.100000Z"}`,
		`{"kind":"Event","auditID":"b","stage":"RequestReceived","verb":"get","requestURI":"/api?timeout=32s","userAgent":"kubectl/v1.36.3 (linux/amd64) kubernetes/abc","user":{"username":"testenv-admin"},"requestReceivedTimestamp":"2026-01-02T03:04:05.300000Z"}`,
		`{"kind":"Event","auditID":"b","stage":"Panic","verb":"get","userAgent":"kubectl/v1.36.3","user":{"username":"testenv-admin"},"requestReceivedTimestamp":"2026-01-02T03:04:05.300000Z"}`,
		`{"kind":"Event","auditID":"c","stage":"RequestReceived","verb":"delete","requestURI":"/api/v1/namespaces/bench/pods/web-1","userAgent":"kwok/v0.8.0","user":{"username":"testenv-kwok"},"objectRef":{"resource":"pods","namespace":"bench","name":"web-1"},"requestReceivedTimestamp":"2026-01-02T03:04:05.200000Z"}`,
	}
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(evs []AuditEvent) string {
		var s []string
		for _, e := range evs {
			s = append(s, e.AuditID+":"+e.Stage)
		}
		return strings.Join(s, " ")
	}

	a := NewAuditReader(path, AuditStageRequestReceived)
	if err := a.Read(); err != nil || len(a.Events()) != 0 {
		t.Fatalf("before the log exists: events %q, error %v; want none and no error", ids(a.Events()), err)
	}
	// The last line is still being written: no newline yet.
	write(lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n" + lines[3][:40])
	if err := a.Read(); err != nil {
		t.Fatal(err)
	}
	if got := ids(a.Events()); got != "a:RequestReceived b:RequestReceived" {
		t.Fatalf("after the first read: %q, want a and b received (not the Panic stage, not the partial line)", got)
	}
	write(lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n" + lines[3] + "\n")
	if err := a.Read(); err != nil {
		t.Fatal(err)
	}
	if got := ids(a.Events()); got != "a:RequestReceived b:RequestReceived c:RequestReceived" {
		t.Fatalf("after the second read: %q, want c added once, a and b not read again", got)
	}

	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// c was logged after b but received before it.
	if got := ids(a.Between(base.Add(200*time.Millisecond), base.Add(300*time.Millisecond))); got != "c:RequestReceived b:RequestReceived" {
		t.Errorf("Between(.200, .300) = %q, want c then b (bounds included, oldest first)", got)
	}
	if got := ids(a.Between(base.Add(101*time.Millisecond), base.Add(199*time.Millisecond))); got != "" {
		t.Errorf("Between(.101, .199) = %q, want nothing", got)
	}

	all := NewAuditReader(path, "")
	if err := all.Read(); err != nil {
		t.Fatal(err)
	}
	if got := ids(all.Events()); got != "a:RequestReceived b:RequestReceived b:Panic c:RequestReceived" {
		t.Errorf("every stage: %q", got)
	}

	write(lines[0] + "\n" + "{not json\n")
	bad := NewAuditReader(path, "")
	if err := bad.Read(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at byte %d:", len(lines[0])+1)) {
		t.Errorf("a line that is not JSON: error %v, want one naming byte %d", err, len(lines[0])+1)
	}
}

func TestAuditEventResource(t *testing.T) {
	tests := []struct{ event, want string }{
		{`{"requestURI":"/api"}`, ""},
		{`{"objectRef":{"resource":"nodes","name":"node-1"}}`, "nodes"},
		{`{"objectRef":{"resource":"pods","subresource":"eviction","apiGroup":""}}`, "pods/eviction"},
		{`{"objectRef":{"resource":"leases","apiGroup":"coordination.k8s.io"}}`, "leases"},
	}
	for _, tt := range tests {
		var e AuditEvent
		if err := json.Unmarshal([]byte(tt.event), &e); err != nil {
			t.Fatal(err)
		}
		if got := e.Resource(); got != tt.want {
			t.Errorf("%s: Resource() = %q, want %q", tt.event, got, tt.want)
		}
	}
}

func TestPodTimelines(t *testing.T) {
	at := func(s string) metav1.MicroTime {
		tm, err := time.Parse(time.RFC3339Nano, "2026-01-02T03:04:"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return metav1.NewMicroTime(tm)
	}
	ev := func(verb, ns, name, sub string, code int, received string) AuditEvent {
		var e AuditEvent
		e.Stage, e.Verb, e.Received = AuditStageResponseComplete, verb, at(received)
		e.ObjectRef = &struct {
			Resource    string `json:"resource"`
			Subresource string `json:"subresource"`
			Namespace   string `json:"namespace"`
			Name        string `json:"name"`
			APIGroup    string `json:"apiGroup"`
		}{Resource: "pods", Subresource: sub, Namespace: ns, Name: name}
		e.ResponseStatus = &struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}{Code: code}
		return e
	}
	events := []AuditEvent{
		ev("delete", "work", "a", "", 200, "09.000"),
		ev("create", "work", "a", "eviction", 429, "05.000"),
		ev("create", "work", "a", "eviction", 201, "06.000"),
		ev("create", "work", "b", "", 201, "01.000"),          // a pod created: not a removal
		ev("delete", "work", "b", "", 404, "07.000"),          // not found: removed nothing
		ev("create", "other", "a", "eviction", 201, "02.000"), // another namespace
	}
	got := PodTimelines(events, "work")
	a := got["a"]
	if a == nil || a.Refused != 1 || len(a.Evicted) != 1 || !a.FirstEvicted().Equal(at("06.000").Time) || !a.Deleted.Equal(at("09.000").Time) {
		t.Errorf("timeline of a = %+v, want refused once, evicted at 06, deleted at 09", a)
	}
	if b := got["b"]; b != nil {
		t.Errorf("timeline of b = %+v, want none: it was neither evicted nor deleted", b)
	}
	if len(got) != 1 {
		t.Errorf("timelines %v, want a only", got)
	}
}
