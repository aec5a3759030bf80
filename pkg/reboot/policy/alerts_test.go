package policy

import "testing"

func TestCompileAlertRegexp(t *testing.T) {
	re, err := CompileAlertRegexp("a|b")
	if err != nil {
		t.Fatal(err)
	}
	// Anchoring must wrap the whole alternation, not its ends only.
	for name, want := range map[string]bool{"a": true, "b": true, "ab": false, "xa": false, "bx": false} {
		if re.MatchString(name) != want {
			t.Errorf("%q matches %q = %v, want %v", re, name, !want, want)
		}
	}
	if re, err := CompileAlertRegexp(""); re != nil || err != nil {
		t.Errorf(`"" = %v, %v; want nil, nil (every alert)`, re, err)
	}
}

func TestAlertsQuery(t *testing.T) {
	for expr, want := range map[string]string{
		"":               `ALERTS{alertstate="firing"}`,
		"Etcd.*|KubePod": `ALERTS{alertstate="firing",alertname=~"Etcd.*|KubePod"}`,
		`Node\d+Down`:    `ALERTS{alertstate="firing",alertname=~"Node\\d+Down"}`,
		`Say "hi"`:       `ALERTS{alertstate="firing",alertname=~"Say \"hi\""}`,
		"Line\nBreak":    `ALERTS{alertstate="firing",alertname=~"Line\nBreak"}`,
	} {
		if got := AlertsQuery(expr); got != want {
			t.Errorf("AlertsQuery(%q) = %s, want %s", expr, got, want)
		}
	}
}
