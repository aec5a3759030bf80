package reboot

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// FuzzParseFiringAlerts feeds parseFiringAlerts what a Prometheus, or
// whatever answers at reboot.prometheusURL, may send. It must not panic, and
// what it returns must be sorted, distinct and named.
func FuzzParseFiringAlerts(f *testing.F) {
	f.Add([]byte(alertsJSON))
	f.Add([]byte(`{"status":"error","errorType":"execution","error":"x"}`))
	f.Add([]byte(`{"status":"success","data":{"alerts":[{"labels":{"alertname":"A"},"state":"firing"},{"labels":{"alertname":"A"},"state":"firing"}]}}`))
	f.Add([]byte(`{"status":"success","data":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		names, err := parseFiringAlerts(body)
		if err != nil {
			if names != nil {
				t.Errorf("names %q with error %v", names, err)
			}
			return
		}
		if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Errorf("names %q: want sorted and distinct", names)
		}
		if slices.Contains(names, "") {
			t.Errorf("names %q: an empty name", names)
		}
	})
}

// TestAlertsAnswerLimits: an answer over maxAlertsBody is refused by size,
// whatever it holds, and one just under it is decoded as a stream, alert by
// alert: memory for the firing names, not for the answer.
func TestAlertsAnswerLimits(t *testing.T) {
	alert := `{"labels":{"alertname":"Pending","instance":"node-1:9100","job":"node","severity":"warning","team":"x"},"annotations":{"summary":"s"},"state":"pending","activeAt":"2026-11-26T00:00:00Z","value":"1e+00"},`
	build := func(size int) []byte {
		var b strings.Builder
		b.WriteString(`{"status":"success","data":{"alerts":[`)
		for b.Len()+len(alert)+200 < size {
			b.WriteString(alert)
		}
		b.WriteString(`{"labels":{"alertname":"Firing"},"state":"firing"}]}}`)
		return []byte(b.String())
	}
	under := build(maxAlertsBody)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	names, err := decodeFiringAlerts(&cappedReader{r: bytes.NewReader(under), left: maxAlertsBody})
	runtime.ReadMemStats(&after)
	if err != nil || !slices.Equal(names, []string{"Firing"}) {
		t.Fatalf("answer of %d bytes: names %q, err %v; want [Firing]", len(under), names, err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("decoding an answer of %d bytes allocated %d bytes", len(under), allocated)
	if allocated > uint64(len(under))/2 { // reading it whole alone would take more than its size
		t.Errorf("decoding an answer of %d bytes allocated %d bytes; a stream decode needs a small part of it", len(under), allocated)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(build(maxAlertsBody + 4096))
	}))
	defer srv.Close()
	got := AlertBlockers{URL: srv.URL}.Blockers(t.Context())
	if len(got) != 1 || !strings.Contains(got[0].Name, fmt.Sprintf("is larger than %d bytes", maxAlertsBody)) {
		t.Errorf("an answer over the bound: %+v, want one blocker saying it is too large", got)
	}
}
