package gates

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/reboot/policy"
)

// alertsVector is the /api/v1/query answer of the alert gate's query in the
// shape Prometheus 3 gives: two series of one firing alert, an
// always-firing Watchdog and a third alert.
const alertsVector = `{"status":"success","data":{"resultType":"vector","result":[
 {"metric":{"__name__":"ALERTS","alertname":"KubePodCrashLooping","alertstate":"firing","namespace":"db","pod":"pg-0","severity":"warning"},"value":[1764100000,"1"]},
 {"metric":{"__name__":"ALERTS","alertname":"KubePodCrashLooping","alertstate":"firing","namespace":"db","pod":"pg-1","severity":"warning"},"value":[1764100000,"1"]},
 {"metric":{"__name__":"ALERTS","alertname":"Watchdog","alertstate":"firing","severity":"none"},"value":[1764100000,"1"]},
 {"metric":{"__name__":"ALERTS","alertname":"EtcdHighFsyncDurations","alertstate":"firing","severity":"warning"},"value":[1764100000,"1"]}
]}}`

// prometheus answers /api/v1/query with status and body, and records the
// queries it was asked.
func prometheus(t *testing.T, status int, body string, asked *[]string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/api/v1/query") {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		if asked != nil {
			*asked = append(*asked, r.URL.Path+"?"+r.URL.Query().Get("query"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func alertNames(bs []Blocker) []string {
	var out []string
	for _, b := range bs {
		if b.Kind != BlockerAlert {
			out = append(out, "not an alert: "+b.Name)
			continue
		}
		out = append(out, b.Name)
	}
	return out
}

// TestAlertGate: reboot.blockingAlertRegexp is a gate whose query selects
// the firing alerts (Prometheus applies the regexp); its blockers name each
// firing alert once, sorted, and it fails closed.
func TestAlertGate(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		expr   string
		path   string // a path prefix on the URL
		want   []string
		prefix string // the one blocker begins with it
	}{
		{name: "every firing alert, once each, sorted", status: 200, body: alertsVector, want: []string{"EtcdHighFsyncDurations", "KubePodCrashLooping", "Watchdog"}},
		{name: "nothing firing", status: 200, body: `{"status":"success","data":{"resultType":"vector","result":[]}}`, expr: "Etcd.*", want: nil},
		{name: "path prefix kept", status: 200, body: alertsVector, expr: "Watchdog", path: "/prometheus", want: []string{"EtcdHighFsyncDurations", "KubePodCrashLooping", "Watchdog"}},
		{name: "series without an alertname still hold", status: 200, body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]}]}}`, want: []string{"1 firing series without an alertname"}},
		{name: "HTTP error", status: 503, body: "Service Unavailable", prefix: "the firing alerts could not be asked: HTTP 503"},
		{name: "API error", status: 422, body: `{"status":"error","errorType":"execution","error":"query timed out"}`, prefix: "the firing alerts could not be asked: HTTP 422: status \"error\": query timed out"},
		{name: "not JSON", status: 200, body: "<html>login</html>", prefix: "the firing alerts could not be asked: HTTP 200: not a Prometheus API answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []string
			s := prometheus(t, tt.status, tt.body, &asked)
			got := Prometheus{URL: s.URL + tt.path, Gates: []Gate{AlertGate(tt.expr)}, Client: s.Client()}.Blockers(context.Background())
			if want := tt.path + "/api/v1/query?" + policy.AlertsQuery(tt.expr); len(asked) != 1 || asked[0] != want {
				t.Errorf("asked %q, want %q", asked, want)
			}
			if tt.prefix != "" {
				if len(got) != 1 || got[0].Kind != BlockerAlert || !strings.HasPrefix(got[0].Name, tt.prefix) {
					t.Fatalf("blockers = %+v, want one alert blocker beginning %q (fail closed)", got, tt.prefix)
				}
				return
			}
			if names := alertNames(got); !reflect.DeepEqual(names, tt.want) {
				t.Errorf("blockers = %q, want %q", names, tt.want)
			}
		})
	}
}

func TestAlertGateUnreachable(t *testing.T) {
	s := prometheus(t, 200, alertsVector, nil)
	url := s.URL
	s.Close()
	ask := func(u string) []Blocker {
		return Prometheus{URL: u, Gates: []Gate{AlertGate("")}}.Blockers(context.Background())
	}
	if got := ask(url); len(got) != 1 || got[0].Kind != BlockerAlert || !strings.HasPrefix(got[0].Name, "the firing alerts could not be asked: prometheus unreachable: ") {
		t.Fatalf("blockers = %+v, want prometheus unreachable (fail closed)", got)
	}
	if got := ask("http://u:s3cret@[::1"); len(got) != 1 || strings.Contains(got[0].Name, "s3cret") {
		t.Errorf("blockers = %+v, want one, without the password (it goes onto the Node)", got)
	}
	// The HTTP client strips the password from its own errors.
	if got := ask("http://u:s3cret@" + strings.TrimPrefix(url, "http://")); len(got) != 1 || strings.Contains(got[0].Name, "s3cret") {
		t.Errorf("blockers = %+v, want one, without the password", got)
	}
}
