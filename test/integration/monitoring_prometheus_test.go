package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// testFor replaces every alert's `for:` so that the live test sees pending
// and firing within seconds. Nothing else of the shipped rules changes: the
// expressions, labels and annotations are what is tested.
const testFor = "10s"

// prometheusConfig scrapes one agent every second and evaluates rules.yaml
// every second. The target gets the labels podmonitor.yaml gives an agent's
// pod (job node-agent, node, namespace, pod).
func prometheusConfig(agentAddr, node string) []byte {
	return fmt.Appendf(nil, `global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - rules.yaml
scrape_configs:
  - job_name: node-agent
    static_configs:
      - targets: [%q]
        labels:
          node: %q
          namespace: node-agent
          pod: node-agent-%s
`, agentAddr, node, node)
}

// withTestFor returns a copy of f with every `for:` set to testFor.
func withTestFor(f ruleFile) ruleFile {
	out := ruleFile{}
	for _, g := range f.Groups {
		g.Rules = slices.Clone(g.Rules)
		for i := range g.Rules {
			if g.Rules[i].For != "" {
				g.Rules[i].For = testFor
			}
		}
		out.Groups = append(out.Groups, g)
	}
	return out
}

// TestMonitoringStuckDrainAlert runs the shipped rules in a real Prometheus
// on loopback that scrapes a real agent, running as the shipped
// ServiceAccount, during a drain that a PodDisruptionBudget blocks. Through
// Prometheus's HTTP API: every rule evaluates without error; NodeDrainBlocked
// goes pending, then firing, naming the node and the budget; it clears once
// the budget is relaxed and the drain ends. Then every query of the
// dashboard is run as a Grafana panel runs it (a range query over the
// test's time) and must parse and return data.
func TestMonitoringStuckDrainAlert(t *testing.T) {
	promBin := toolBinary(t, testenv.DefaultOptions(), testenv.BinPrometheus)
	b := newDrainBed(t)
	c := b.env.Client()
	ctx := t.Context()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "db", 3, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 3)
	testenv.CreatePDB(t.Context(), t, c, b.ns, "db", testenv.MinAvailable(3), 3, 0) // allows no eviction
	b.addTargets(t)

	// The labeller runs, so its metrics have data; an unreachable libvirt
	// makes discovery fall back to cpuid at once.
	agent := startAgent(t, b.env, "node-1", "--libvirt-uri", "qemu:///system?socket=/nonexistent/libvirt-sock")
	agent.WaitReady(t)

	rules := shippedRules(t)
	rulesYAML, err := yaml.Marshal(withTestFor(rules))
	if err != nil {
		t.Fatal(err)
	}
	promStart := time.Now()
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	prom, err := testenv.StartPrometheus(startCtx, filepath.Dir(promBin), t.TempDir(), map[string][]byte{
		"prometheus.yml": prometheusConfig(agent.MetricsAddr, "node-1"),
		"rules.yaml":     rulesYAML,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := prom.Err(); err != nil {
			t.Errorf("prometheus: %v", err)
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", prom.LogTail(40))
		}
		_ = prom.Stop()
	})
	t.Logf("prometheus at %s scrapes node-agent at %s", prom.URL, agent.MetricsAddr)

	// Every rule, as loaded, has been evaluated without an error.
	testenv.WaitFor(t, time.Minute, "every rule evaluated without error", func() (bool, error) {
		groups, err := prom.Rules(ctx)
		if err != nil {
			return false, err
		}
		n := 0
		for _, g := range groups {
			for _, r := range g.Rules {
				if r.Health != "ok" {
					return false, fmt.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
				}
				n++
			}
		}
		if want := len(rules.alerts()); n != want {
			return false, fmt.Errorf("%d rules loaded, want %d", n, want)
		}
		return true, nil
	})

	// seen records every alert state Prometheus reported, by alert name.
	seen := map[string][]string{}
	blocked := func() (*testenv.Alert, error) {
		alerts, err := prom.Alerts(ctx)
		if err != nil {
			return nil, err
		}
		var found *testenv.Alert
		for i, a := range alerts {
			name := a.Labels["alertname"]
			if s := seen[name]; len(s) == 0 || s[len(s)-1] != a.State {
				seen[name] = append(seen[name], a.State)
			}
			if name == "NodeDrainBlocked" {
				found = &alerts[i]
			}
		}
		return found, nil
	}
	if a, err := blocked(); err != nil || a != nil {
		t.Fatalf("NodeDrainBlocked before any maintenance: %+v, %v", a, err)
	}

	if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "monitoring test"); err != nil {
		t.Fatal(err)
	}
	var firing *testenv.Alert
	testenv.WaitFor(t, 2*time.Minute, "NodeDrainBlocked firing", func() (bool, error) {
		a, err := blocked()
		if err != nil || a == nil || a.State != "firing" {
			return false, err
		}
		firing = a
		return true, nil
	})
	t.Logf("NodeDrainBlocked states seen: %v; firing: labels %v, value %s, summary %q",
		seen["NodeDrainBlocked"], firing.Labels, firing.Value, firing.Annotations["summary"])
	if got := seen["NodeDrainBlocked"]; len(got) < 2 || got[0] != "pending" {
		t.Errorf("NodeDrainBlocked states %v: want pending before firing", got)
	}
	if firing.Labels["node"] != "node-1" || firing.Labels["poddisruptionbudget"] != b.ns+"/db" {
		t.Errorf("firing alert labels %v: want node node-1 and poddisruptionbudget %s/db", firing.Labels, b.ns)
	}
	if v, err := strconv.ParseFloat(firing.Value, 64); err != nil || v != 3 {
		t.Errorf("firing alert value %s: want 3 blocked pods", firing.Value)
	}
	if got := firing.Annotations["runbook_url"]; got != runbookBase+"nodedrainblocked" {
		t.Errorf("runbook_url %q", got)
	}
	if st := nodeStatus(t, c, "node-1"); st.Phase != selfdrain.PhaseRunning {
		t.Errorf("phase %s while the alert fires, want Running", st.Phase)
	}

	// The host has no logind here, so the guard cannot hold its lock: the
	// guard alert must fire too, with the state the agent exports.
	states, err := prom.Query(ctx, `node_agent_shutdown_guard_state == 1`)
	if err != nil || len(states) != 1 {
		t.Fatalf("shutdown guard state: %v, %v", states, err)
	}
	if state := states[0].Metric["state"]; slices.Contains([]string{"connecting", "reconnecting", "unavailable"}, state) {
		testenv.WaitFor(t, time.Minute, "NodeShutdownGuardUnavailable firing (guard "+state+")", func() (bool, error) {
			_, err := blocked()
			s := seen["NodeShutdownGuardUnavailable"]
			return len(s) > 0 && s[len(s)-1] == "firing", err
		})
	} else {
		t.Logf("the shutdown guard is %s on this host; NodeShutdownGuardUnavailable is not expected", state)
	}

	// Relax the budget: one pod at a time may go.
	patch := []byte(`{"spec":{"minAvailable":2}}`)
	if _, err := c.PolicyV1().PodDisruptionBudgets(b.ns).Patch(ctx, "db", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 3*time.Minute, "NodeDrainBlocked cleared", func() (bool, error) {
		a, err := blocked()
		return err == nil && a == nil, err
	})
	// The alert clears once no pod is refused any more, which can be a
	// moment before the last pods have gone and the drain has ended.
	testenv.WaitFor(t, time.Minute, "phase Succeeded after NodeDrainBlocked cleared", func() (bool, error) {
		return nodeStatus(t, c, "node-1").Phase == selfdrain.PhaseSucceeded, nil
	})
	t.Logf("alert states seen: %v", seen)
	for _, name := range []string{"NodeAgentDown", "NodeAgentTargetAbsent", "NodeAgentMissing", "NodeMaintenanceFailed", "NodeMaintenanceRunningTooLong", "NodeLabellingFailing"} {
		s := seen[name]
		// Prometheus evaluates its rules before its first scrape, when
		// there is no up series yet: NodeAgentTargetAbsent is pending
		// then (for its 10m in production, 10s here) and must not fire.
		if name == "NodeAgentTargetAbsent" && slices.Equal(s, []string{"pending"}) {
			continue
		}
		if len(s) > 0 {
			t.Errorf("%s was %v for a healthy agent", name, s)
		}
	}

	// Let Prometheus scrape the end of the drain before the dashboard's
	// queries: a rate needs the histogram before and after.
	testenv.WaitFor(t, time.Minute, "the drain's duration scraped", func() (bool, error) {
		s, err := prom.Query(ctx, `increase(node_agent_drain_duration_seconds_count{result="succeeded"}[1m]) > 0`)
		return len(s) > 0, err
	})
	checkDashboard(t, prom, promStart, time.Now())
}

var metricName = regexp.MustCompile(`\b(node_agent_[a-z_]+|up)\b`)

// checkDashboard runs every query of the shipped dashboard as Grafana would
// over [start, end], with node "All" and a 1m rate interval.
func checkDashboard(t *testing.T, prom *testenv.Prometheus, start, end time.Time) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(monitoringDir(t), "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
				AllValue   string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	// The steps of a range query are start, start+step, ...: align them
	// on end, so the last one sees what the caller waited for at end.
	start = end.Add(-end.Sub(start).Truncate(time.Second))
	vars := strings.NewReplacer("$__rate_interval", "1m")
	for _, v := range dash.Templating.List {
		if v.Name != "node" {
			continue
		}
		// label_values(METRIC, LABEL) is Grafana's; the API call is the
		// series endpoint's label values.
		metric, label, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(v.Definition, "label_values("), ")"), ",")
		if !ok {
			t.Fatalf("node variable %q: not label_values(metric, label)", v.Definition)
		}
		nodes, err := prom.LabelValues(t.Context(), strings.TrimSpace(label), strings.TrimSpace(metric))
		if err != nil || !slices.Contains(nodes, "node-1") {
			t.Errorf("node variable %s: %v, %v; want node-1 among them", v.Definition, nodes, err)
		}
		vars = strings.NewReplacer("$__rate_interval", "1m", "$node", v.AllValue)
	}
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			expr := vars.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q: a Grafana variable the test does not know in %s", p.Title, tg.Expr)
				continue
			}
			series, err := prom.QueryRange(t.Context(), expr, start, end, time.Second)
			switch {
			case err != nil:
				t.Errorf("panel %q: %s: %v", p.Title, expr, err)
			case len(series) == 0:
				t.Errorf("panel %q: %s: no data", p.Title, expr)
				for _, m := range metricName.FindAllString(expr, -1) {
					s, err := prom.Query(t.Context(), m)
					t.Logf("  %s now: %v %v", m, s, err)
				}
			default:
				t.Logf("panel %q: %d series, %d samples in the first", p.Title, len(series), series[0].Samples)
			}
		}
	}
	if queries < 10 {
		t.Errorf("only %d dashboard queries found", queries)
	}
}
