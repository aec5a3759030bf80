package integration

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestSilenceWhileDrained is issue 33's acceptance for silences: a real
// Prometheus fires an alert about node-1 into a real Alertmanager; while
// node-1 is drained for maintenance the agent keeps a silence that
// suppresses it, and once the maintenance ends the silence is expired and
// the alert is active again. An alert about another node is never
// silenced, nor one the admin's matcher leaves out.
func TestSilenceWhileDrained(t *testing.T) {
	promBin := toolBinary(t, testenv.DefaultOptions(), testenv.BinPrometheus)
	amBin := toolBinary(t, testenv.DefaultOptions(), testenv.BinAlertmanager)
	ctx := t.Context()
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	am, err := testenv.StartAlertmanager(startCtx, filepath.Dir(amBin), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("alertmanager log:\n%s", am.LogTail(30))
		}
		_ = am.Stop()
	})
	amAddr := strings.TrimPrefix(am.URL, "http://")
	rules := "groups:\n  - name: nodes\n    rules:\n" +
		"      - alert: NodeDown\n        expr: vector(1)\n        labels: {node: node-1, severity: warning}\n" +
		"      - alert: NodeOnFire\n        expr: vector(1)\n        labels: {node: node-1, severity: critical}\n" +
		"      - alert: NodeDown\n        expr: vector(2)\n        labels: {node: node-2, severity: warning}\n"
	prom, err := testenv.StartPrometheus(startCtx, filepath.Dir(promBin), t.TempDir(), map[string][]byte{
		"prometheus.yml": []byte(fmt.Sprintf("global:\n  evaluation_interval: 1s\nrule_files:\n  - rules.yaml\n"+
			"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [%q]\n", amAddr)),
		"rules.yaml": []byte(rules),
		// Alerts go to Alertmanager at every evaluation, not once a
		// minute: the first send can come before Prometheus has found its
		// Alertmanager.
	}, "--rules.alert.resend-delay=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", prom.LogTail(30))
		}
		_ = prom.Stop()
	})

	// state returns each alert's state in Alertmanager, by alertname/node/severity.
	state := func() map[string]string {
		t.Helper()
		alerts, err := am.Alerts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, a := range alerts {
			out[a.Labels["alertname"]+"/"+a.Labels["node"]+"/"+a.Labels["severity"]] = a.Status.State
		}
		return out
	}
	all := []string{"NodeDown/node-1/warning", "NodeOnFire/node-1/critical", "NodeDown/node-2/warning"}
	want := func(what string, states map[string]string) {
		t.Helper()
		testenv.WaitFor(t, time.Minute, what, func() (bool, error) {
			got := state()
			for k, v := range states {
				if got[k] != v {
					return false, nil
				}
			}
			return true, nil
		})
		t.Logf("%s: %v", what, state())
	}
	want("every alert active in Alertmanager", map[string]string{all[0]: "active", all[1]: "active", all[2]: "active"})

	b := newDrainBed(t)
	c := b.env.Client()
	testenv.CreateDeployment(ctx, t, c, b.ns, "web", 4, "node-1")
	testenv.WaitRunningOn(ctx, t, c, b.ns, "node-1", 4)
	b.addTargets(t)
	// A silence an earlier agent of node-1 left (it died during a
	// maintenance that has ended since): the new agent expires it at start.
	left := fmt.Sprintf(`{"matchers":[{"name":"node","value":"node-1","isRegex":false,"isEqual":true}],"startsAt":%q,"endsAt":%q,"createdBy":"node-agent/node-1","comment":"left behind"}`,
		time.Now().UTC().Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	resp, err := http.Post(am.URL+"/api/v2/silences", "application/json", strings.NewReader(left))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("posting the left-behind silence: %v %v", resp, err)
	}
	resp.Body.Close()
	want("node-1's warning silenced by the left-behind silence", map[string]string{all[0]: "suppressed"})

	// Critical alerts keep paging: the admin's matcher leaves them out.
	agent := startAgent(t, b.env, "node-1", "--silences-alertmanager-url="+am.URL,
		`--silences-matchers=[{"name":"severity","value":"critical","negate":true}]`, "--silences-duration=2m")
	agent.WaitReady(t)
	want("the left-behind silence expired by the new agent", map[string]string{all[0]: "active", all[1]: "active", all[2]: "active"})
	if s, err := am.Silences(ctx); err != nil || len(s) != 1 || s[0].Status.State != "expired" {
		t.Fatalf("silences before any maintenance: %+v (%v), want the left-behind one, expired", s, err)
	}

	if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "firmware"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "phase Succeeded", func() (bool, error) {
		st, err := selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
	})
	want("node-1's warning suppressed while it is drained", map[string]string{all[0]: "suppressed", all[1]: "active", all[2]: "active"})
	silences, err := am.Silences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ours []testenv.AMSilence
	for _, s := range silences {
		if s.Status.State == "active" && s.Comment != "left behind" {
			ours = append(ours, s)
		}
	}
	if len(ours) != 1 || ours[0].CreatedBy != "node-agent/node-1" || !strings.Contains(ours[0].Comment, "maintenance of node-1 (firmware") {
		t.Errorf("active silences %+v: want one, by node-agent/node-1, saying why", ours)
	} else {
		t.Logf("silence %s by %s: %s; matchers %+v", ours[0].ID, ours[0].CreatedBy, ours[0].Comment, ours[0].Matchers)
	}

	if _, err := maintenance.EndMaintenance(ctx, kubetest.Wrap(c), "node-1"); err != nil {
		t.Fatal(err)
	}
	want("node-1's warning active again once the maintenance ended", map[string]string{all[0]: "active", all[1]: "active", all[2]: "active"})
	silences, err = am.Silences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range silences {
		if s.Status.State != "expired" {
			t.Errorf("silence %s is %s after the maintenance ended, want expired", s.ID, s.Status.State)
		}
	}
}
