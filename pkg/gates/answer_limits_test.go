package gates

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

// TestAnswerLimits: an answer over maxAnswerBody is refused by size,
// whatever it holds, and one just under it is decoded as a stream, series by
// series: memory for the few kept, not for the answer.
func TestAnswerLimits(t *testing.T) {
	series := `{"metric":{"__name__":"ALERTS","alertname":"Firing","alertstate":"firing","instance":"node-1:9100","job":"node","severity":"warning","team":"x"},"value":[1764100000,"1"]},`
	build := func(size int) []byte {
		var b strings.Builder
		b.WriteString(`{"status":"success","data":{"resultType":"vector","result":[`)
		for b.Len()+len(series)+200 < size {
			b.WriteString(series)
		}
		b.WriteString(`{"metric":{"alertname":"Last"},"value":[1764100000,"1"]}]}}`)
		return []byte(b.String())
	}
	under := build(maxAnswerBody)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	answer, err := decodeGateAnswer(&cappedReader{r: bytes.NewReader(under), left: maxAnswerBody})
	runtime.ReadMemStats(&after)
	if err != nil || !slices.Equal(answer.alertNames, []string{"Firing", "Last"}) || answer.series < 2 {
		t.Fatalf("answer of %d bytes: %d series, names %q, err %v; want [Firing Last]", len(under), answer.series, answer.alertNames, err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("decoding an answer of %d bytes (%d series) allocated %d bytes", len(under), answer.series, allocated)
	if allocated > uint64(len(under))/2 { // reading it whole alone would take more than its size
		t.Errorf("decoding an answer of %d bytes allocated %d bytes; a stream decode needs a small part of it", len(under), allocated)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(build(maxAnswerBody + 4096))
	}))
	defer srv.Close()
	got := Prometheus{URL: srv.URL, Gates: []Gate{AlertGate("")}}.Blockers(t.Context())
	if len(got) != 1 || !strings.Contains(got[0].Name, fmt.Sprintf("is larger than %d bytes", maxAnswerBody)) {
		t.Errorf("an answer over the bound: %+v, want one blocker saying it is too large", got)
	}
}
