package gates

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPrometheus(t *testing.T) {
	answers := map[string]string{
		"held":    `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"ceph_health_status","instance":"a"},"value":[1700000000,"2"]},{"metric":{"instance":"b"},"value":[1700000000,"1"]}]}}`,
		"open":    `{"status":"success","data":{"resultType":"vector","result":[]}}`,
		"many":    `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"i":"1"},"value":[1,"1"]},{"metric":{"i":"2"},"value":[1,"1"]},{"metric":{"i":"3"},"value":[1,"1"]},{"metric":{"i":"4"},"value":[1,"1"]},{"metric":{"i":"5"},"value":[1,"1"]}]}}`,
		"scalar":  `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}`,
		"badexpr": `{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:1: parse error"}`,
		"garbage": `<html>`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/prom/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		body, ok := answers[r.URL.Query().Get("query")]
		if !ok {
			http.Error(w, "unknown", http.StatusBadRequest)
			return
		}
		if strings.Contains(body, `"status":"error"`) {
			w.WriteHeader(http.StatusBadRequest)
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()

	tests := []struct {
		query string
		want  string // "" for no blocker
	}{
		{"open", ""},
		{"held", `g (held) has 2 series: {__name__="ceph_health_status", instance="a"} 2, {instance="b"} 1`},
		{"many", `g (many) has 5 series: {i="1"} 1, {i="2"} 1, {i="3"} 1 and 2 more`},
		{"scalar", `g (scalar) could not be asked: HTTP 200: the answer is a "scalar", want an instant vector`},
		{"badexpr", `g (badexpr) could not be asked: HTTP 400: status "error": invalid parameter`},
		{"garbage", `g (garbage) could not be asked: HTTP 200: not a Prometheus API answer`},
	}
	for _, tt := range tests {
		got := Prometheus{URL: srv.URL + "/prom", Gates: []Gate{{Name: "g", Query: tt.query}}}.Blockers(t.Context())
		switch {
		case tt.want == "" && len(got) != 0:
			t.Errorf("%s: blockers %+v, want none", tt.query, got)
		case tt.want != "" && (len(got) != 1 || got[0].Kind != BlockerGate || !strings.HasPrefix(got[0].Name, tt.want)):
			t.Errorf("%s: blockers %+v, want one gate blocker starting %q", tt.query, got, tt.want)
		}
	}

	srv.Close()
	got := Prometheus{URL: srv.URL, Gates: []Gate{{Name: "a", Query: "up == 0"}, {Name: "b", Query: "x"}}}.Blockers(t.Context())
	if len(got) != 2 || !strings.Contains(got[0].Name, "a (up == 0) could not be asked: prometheus unreachable") {
		t.Errorf("Prometheus gone: %+v, want both gates to hold, saying why", got)
	}
}

// FuzzDecodeGateAnswer: whatever answers, the decoder does not panic, and
// an answer it accepts has as many series shown as it counts, at most
// gateSeriesShown.
func FuzzDecodeGateAnswer(f *testing.F) {
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[1,"1"]}]}}`))
	f.Add([]byte(`{"status":"success","data":{"result":[],"resultType":"vector"}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}`))
	f.Add([]byte(`{"status":"success","data":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := decodeGateAnswer(strings.NewReader(string(body)))
		if err != nil {
			return
		}
		if len(a.shown) > gateSeriesShown || len(a.shown) > a.series || (a.series > 0 && len(a.shown) == 0) {
			t.Errorf("series %d, shown %q", a.series, a.shown)
		}
	})
}
