package integration

import (
	"context"
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/baseline"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/test/testenv"
)

// kubevirtLabels labels a host described by KubeVirt's test files the way
// node-agent would with KubeVirt's settings.
func kubevirtLabels(t *testing.T, domcaps string) map[string]string {
	t.Helper()
	dir := filepath.Join("..", "..", "pkg", "labeller", "testdata", "kubevirt")
	d, err := hostcpu.NewDiscoverer(hostcpu.Options{
		DomainCapabilitiesFile: filepath.Join(dir, domcaps),
		SupportedFeaturesFile:  filepath.Join(dir, "supported_features.xml"),
		FallbackCPUMapDir:      filepath.Join(t.TempDir(), "absent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, err := labeller.Policy{}.Labels(h)
	if err != nil {
		t.Fatal(err)
	}
	return res.Labels
}

// TestCPUBaseline runs `node-agent cpu-baseline` against a real apiserver
// whose Nodes carry different CPU label sets: two Intel hosts of different
// generations, an AMD host (labelled from KubeVirt's test files by
// node-agent's own policy) and a node no labeller has described, in pools
// the selector picks from.
func TestCPUBaseline(t *testing.T) {
	env := testenv.StartForTest(t, testenv.Options{})
	ctx := t.Context()
	c := env.Client()

	// intelNew also carries cpu-model-migration for EPYC-IBPB, a model it
	// knows but cannot run (usable='no'); cpu-baseline reads cpu-model only,
	// so EPYC-IBPB must not become a candidate held back by intel-old.
	intelNew := kubevirtLabels(t, "virsh_domcapabilities.xml") // Haswell, IvyBridge, Penryn, Skylake-Client-IBRS
	if intelNew[kubevirtlabels.CPUModelMigrationLabelPrefix+"EPYC-IBPB"] != "true" {
		t.Fatalf("the fixture lost its migration-only model: %v", intelNew)
	}
	amd := kubevirtLabels(t, "domcapabilities_sev.xml") // EPYC-IBPB host; Westmere, SandyBridge, Penryn, ...
	intelOld := map[string]string{
		kubevirtlabels.CPUModelLabelPrefix + "IvyBridge":     "true",
		kubevirtlabels.CPUModelLabelPrefix + "Penryn":        "true",
		kubevirtlabels.CPUModelLabelPrefix + "Nehalem":       "false", // not "true": not a model it runs
		kubevirtlabels.CPUFeatureLabelPrefix + "apic":        "true",
		kubevirtlabels.CPUFeatureLabelPrefix + "clflush":     "true",
		kubevirtlabels.HostModelCPULabelPrefix + "IvyBridge": "true",
	}
	nodes := map[string]map[string]string{
		"intel-new": with(intelNew, "pool", "a"),
		"intel-old": with(intelOld, "pool", "a"),
		"amd":       with(amd, "pool", "b"),
		"bare":      {"pool": "c"},
	}
	for name, labels := range nodes {
		if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := resourceVersions(ctx, t, env)

	run := func(args ...string) (string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, agentBinary, append([]string{"cpu-baseline", "--kubeconfig", env.KubeconfigPath()}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cpu-baseline %v: %v\n%s", args, err, stderr.String())
		}
		return string(out), stderr.String()
	}
	result := func(args ...string) baseline.Result {
		t.Helper()
		out, _ := run(append(args, "-o", "json")...)
		var r baseline.Result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return r
	}
	heldBack := func(r baseline.Result) map[string][]string {
		out := map[string][]string{}
		for _, c := range r.Candidates {
			out[c.Model] = c.HeldBackBy
		}
		return out
	}

	t.Run("one pool", func(t *testing.T) {
		r := result("--selector", "pool=a")
		if r.Model != "IvyBridge" || !slices.Equal(r.Common, []string{"IvyBridge", "Penryn"}) {
			t.Errorf("model %q, common %v; want IvyBridge, [IvyBridge Penryn]", r.Model, r.Common)
		}
		want := map[string][]string{"Skylake-Client-IBRS": {"intel-old"}, "Haswell": {"intel-old"}}
		if got := heldBack(r); !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("held back %v; want %v", got, want)
		}
		if !slices.Equal(r.SharedFeatures, []string{"apic", "clflush"}) {
			t.Errorf("shared features %v; want [apic clflush]", r.SharedFeatures)
		}
	})

	t.Run("two vendors", func(t *testing.T) {
		r := result("--selector", "pool in (a,b)")
		if r.Model != "Penryn" || !slices.Equal(r.Common, []string{"Penryn"}) {
			t.Errorf("model %q, common %v; want Penryn only", r.Model, r.Common)
		}
		got := heldBack(r)
		for model, want := range map[string][]string{
			"EPYC-IBPB":           {"intel-new", "intel-old"},
			"Skylake-Client-IBRS": {"amd", "intel-old"},
			"IvyBridge":           {"amd"},
			"Westmere":            {"intel-new", "intel-old"},
		} {
			if !slices.Equal(got[model], want) {
				t.Errorf("%s held back by %v; want %v", model, got[model], want)
			}
		}
		if len(r.Candidates) != 10 {
			t.Errorf("%d candidates newer than Penryn; want 10: %v", len(r.Candidates), got)
		}
	})

	t.Run("an unlabelled node", func(t *testing.T) {
		r := result("--selector", "pool in (a,c)")
		if r.Model != "" || !slices.Equal(r.Unlabelled, []string{"bare"}) || len(r.SharedFeatures) != 0 {
			t.Errorf("model %q, unlabelled %v, shared %v; want none, [bare], none", r.Model, r.Unlabelled, r.SharedFeatures)
		}
		if held := heldBack(r)["Penryn"]; !slices.Equal(held, []string{"bare"}) {
			t.Errorf("Penryn held back by %v; want [bare]", held)
		}
	})

	t.Run("table", func(t *testing.T) {
		out, _ := run("-l", "pool=a")
		for _, want := range []string{"Baseline CPU model: IvyBridge", "Skylake-Client-IBRS", "1/2", "intel-old"} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		t.Logf("\n%s", out)
	})

	if after := resourceVersions(ctx, t, env); !maps.Equal(before, after) {
		t.Errorf("cpu-baseline changed Nodes: resourceVersions %v, then %v", before, after)
	}
}

func with(labels map[string]string, k, v string) map[string]string {
	out := maps.Clone(labels)
	out[k] = v
	return out
}

func resourceVersions(ctx context.Context, t *testing.T, env *testenv.Env) map[string]string {
	t.Helper()
	list, err := env.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range list.Items {
		out[n.Name] = n.ResourceVersion
	}
	return out
}
