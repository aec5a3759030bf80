package reboot

import (
	"slices"
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
