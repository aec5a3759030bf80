package integration

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/node-agent/node-agent/test/testenv"
)

// The monitoring component, deploy/components/monitoring: these tests check
// its rules with promtool, render it, and dry-run it against the Prometheus
// Operator's CRDs. monitoring_prometheus_test.go runs it in a real Prometheus.

const runbookBase = "https://github.com/node-agent/node-agent/blob/main/docs/alerts.md#"

// prometheusRule is the part of the PrometheusRule the tests read. It is
// decoded strictly, so a field the tests would drop fails them instead.
type prometheusRule struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       ruleFile       `json:"spec"`
}

// ruleFile is a Prometheus rule file, which is also a PrometheusRule's spec.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func monitoringDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(testenv.DeployDir(t), "components", "monitoring")
}

// shippedRules reads the PrometheusRule of the component.
func shippedRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(monitoringDir(t), "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(data, &pr); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("prometheusrule.yaml: kind %q with %d groups", pr.Kind, len(pr.Spec.Groups))
	}
	return pr.Spec
}

func (f ruleFile) alerts() []rule {
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// writeRuleFile writes f as a Prometheus rule file.
func writeRuleFile(t *testing.T, path string, f ruleFile) {
	t.Helper()
	data, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// promtoolTests is the part of a `promtool test rules` file the coverage
// check reads.
type promtoolTests struct {
	Tests []struct {
		Name       string `json:"name"`
		AlertTests []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlertRules checks the shipped rules with `promtool check rules` and
// runs the unit tests of testdata/alerts-test.yaml on them with `promtool test
// rules`. It also holds the unit tests to their purpose: every alert must be
// expected to fire in one case and to stay silent in another.
func TestAlertRules(t *testing.T) {
	promtool := toolBinary(t, testenv.Options{}, testenv.BinPromtool)
	rules := shippedRules(t)
	dir := t.TempDir()
	writeRuleFile(t, filepath.Join(dir, "rules.yaml"), rules)
	unit, err := os.ReadFile(filepath.Join("testdata", "alerts-test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts-test.yaml"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts-test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Errorf("promtool %s: %v", strings.Join(args, " "), err)
		}
	}

	var tests promtoolTests
	if err := yaml.Unmarshal(unit, &tests); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertTests {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			} else {
				silent[at.Alertname] = true
			}
		}
	}
	for _, a := range rules.alerts() {
		if !fires[a.Alert] {
			t.Errorf("alert %s: no unit test expects it to fire", a.Alert)
		}
		if !silent[a.Alert] {
			t.Errorf("alert %s: no unit test expects it to stay silent", a.Alert)
		}
	}
}

// TestAlertRunbooks checks that every alert links its own section of
// docs/alerts.md, and that the section says how to confirm and how to fix.
func TestAlertRunbooks(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{} // GitHub anchor of a "## " heading -> its text
	for _, part := range strings.Split("\n"+string(doc), "\n## ")[1:] {
		heading, body, _ := strings.Cut(part, "\n")
		sections[strings.ToLower(strings.TrimSpace(heading))] = body
	}
	for _, a := range shippedRules(t).alerts() {
		anchor := strings.ToLower(a.Alert)
		if got, want := a.Annotations["runbook_url"], runbookBase+anchor; got != want {
			t.Errorf("alert %s: runbook_url %q, want %q", a.Alert, got, want)
		}
		body, ok := sections[anchor]
		if !ok {
			t.Errorf("alert %s: docs/alerts.md has no section \"## %s\"", a.Alert, a.Alert)
			continue
		}
		for _, part := range []string{"Meaning", "Confirm", "Fix"} {
			if !regexp.MustCompile(`(?m)^\*\*` + part + ``).MatchString(body) {
				t.Errorf("docs/alerts.md, section %s: no **%s** paragraph", a.Alert, part)
			}
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if a.Annotations[k] == "" {
				t.Errorf("alert %s: no %s annotation", a.Alert, k)
			}
		}
		if a.Labels["severity"] == "" {
			t.Errorf("alert %s: no severity label", a.Alert)
		}
	}
}

// TestMonitoringComponentDryRun renders the component on its own and as a
// component of deploy/, and dry-runs the result on a real apiserver that has
// the Prometheus Operator's CRDs, with kubectl's strict field validation.
func TestMonitoringComponentDryRun(t *testing.T) {
	opts := testenv.Options{}
	kubectl := kubectlBinary(t, opts)
	crdDir := filepath.Join(filepath.Dir(kubectl), "prometheus-operator-crd")
	crds, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(crds) == 0 {
		msg := fmt.Sprintf("no Prometheus Operator CRDs in %s (%v); run hack/build-tools.sh prometheus-operator-crd", crdDir, err)
		if os.Getenv(testenv.IntegrationEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	env := testenv.StartForTest(t, opts)
	b := &deployBed{env: env, c: env.Client(), kubectl: kubectl}

	component, err := b.run(t, nil, "kustomize", monitoringDir(t))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range testenv.DecodeObjects(t, component) {
		kinds[o.GetKind()]++
		if o.GetKind() == "ConfigMap" {
			if o.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap labels %v: want grafana_dashboard: \"1\" for the Grafana sidecar", o.GetLabels())
			}
		}
	}
	if want := map[string]int{"PodMonitor": 2, "PrometheusRule": 1, "ConfigMap": 1}; !maps.Equal(kinds, want) {
		t.Errorf("component renders %v, want %v", kinds, want)
	}

	// deploy/ with the component, as the README says to enable it.
	wrapper := t.TempDir()
	rel, err := filepath.Rel(wrapper, testenv.DeployDir(t))
	if err != nil {
		t.Fatal(err)
	}
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n",
		rel, filepath.Join(rel, "components", "monitoring"))
	if err := os.WriteFile(filepath.Join(wrapper, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := b.run(t, nil, "kustomize", wrapper)
	if err != nil {
		t.Fatal(err)
	}

	for _, crd := range crds {
		if _, err := b.run(t, nil, "apply", "--server-side", "-f", crd); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.run(t, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"); err != nil {
		t.Fatal(err)
	}
	var namespace []byte
	for _, o := range testenv.DecodeObjects(t, all) {
		if o.GetKind() == "Namespace" {
			namespace = asList(t, []*unstructured.Unstructured{o})
		}
	}
	// A dry run in a namespace that does not exist is refused, so the
	// namespace is created for real first.
	if _, err := b.run(t, namespace, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	out, err := b.run(t, all, "apply", "--server-side", "--dry-run=server", "-f", "-")
	t.Logf("server-side dry run:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"podmonitor.monitoring.coreos.com/node-agent", "podmonitor.monitoring.coreos.com/node-agent-coordinator", "prometheusrule.monitoring.coreos.com/node-agent", "configmap/node-agent-dashboard"} {
		if !bytes.Contains(out, []byte(want+" serverside-applied (server dry run)")) {
			t.Errorf("dry run output lacks %q", want)
		}
	}

	// The same dry run refuses a field the CRD does not know: it does check
	// the objects against the schema, not only parse them.
	bad := bytes.Replace(component, []byte("podMetricsEndpoints:"), []byte("podMetricEndpoints:"), 1)
	if bytes.Equal(bad, component) {
		t.Fatal("rendered component has no podMetricsEndpoints")
	}
	if out, err := b.run(t, bad, "apply", "--server-side", "--dry-run=server", "-f", "-"); err == nil {
		t.Errorf("dry run accepted a PodMonitor with an unknown field:\n%s", out)
	} else if !strings.Contains(err.Error(), "podMetricEndpoints") {
		t.Errorf("dry run of an unknown field failed for another reason: %v", err)
	}
}
