package integration

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/yaml"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// The Helm chart, deploy/helm/node-agent: its values hold every
// configuration key, it renders exactly what kustomize renders from deploy/
// (by default and with each component), it lints clean, and it installs,
// upgrades and uninstalls on the real control plane.

// binHelm is the Helm client hack/build-tools.sh builds into bin/.
const binHelm = "helm"

// configMapName and configKey are the agent's ConfigMap and its file.
const (
	configMapName = "node-agent-config"
	configKey     = "config.yaml"
)

func chartDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(testenv.DeployDir(t), "helm", "node-agent")
}

// chartValues reads the chart's values.yaml.
func chartValues(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	return v
}

// configStructKeys lists the dotted keys of config.Config's JSON tags,
// descending into sections; durations are leaves.
func configStructKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[metav1.Duration]() {
			out = append(out, configStructKeys(f.Type, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

// valueKeys lists the dotted leaf keys of a values tree; a map is a section.
func valueKeys(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			out = append(out, valueKeys(sub, prefix+k+".")...)
			continue
		}
		out = append(out, prefix+k)
	}
	return out
}

// TestHelmValuesConfigKeys: the chart's config: values are the agent's
// configuration keys, every one and nothing else, at config.Default()'s
// values. It needs no binaries.
func TestHelmValuesConfigKeys(t *testing.T) {
	cfg, ok := chartValues(t)["config"].(map[string]any)
	if !ok {
		t.Fatal("values.yaml has no config: map")
	}
	all := configStructKeys(reflect.TypeFor[config.Config](), "")
	if len(all) < 25 {
		t.Fatalf("found only %d keys in config.Config; the walk is broken", len(all))
	}
	// The keys the agent takes only from its command line are extraArgs,
	// not config: (pkg/config/trust.go).
	var want []string
	for _, k := range all {
		if tr, _ := config.TrustOf(k); tr.Writer != config.WriterDaemonSet {
			want = append(want, k)
		}
	}
	got := valueKeys(cfg, "")
	sort.Strings(want)
	sort.Strings(got)
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("values.yaml lacks config.%s (a key of config.Config)", k)
		}
	}
	for _, k := range got {
		if !slices.Contains(want, k) {
			t.Errorf("values.yaml has config.%s, which config.Config does not know (the agent would refuse it)", k)
		}
	}

	// The values, as the chart renders them into config.yaml, load strictly
	// and give the defaults.
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	parsed, old, err := config.Parse(raw, config.Config{})
	if err != nil {
		t.Fatalf("values.yaml config: does not load: %v", err)
	}
	if len(old) > 0 {
		t.Errorf("values.yaml config: uses old keys %v; the chart ships the new ones", old)
	}
	parsed = parsed.NormalizeEmpty()
	if d := config.Default().WithoutDaemonSetOnly(); !reflect.DeepEqual(parsed, d) {
		t.Errorf("values.yaml config: differs from config.Default() (-values +default):\n%s", diff.Diff(parsed, d))
	}
}

// TestHelmChartFiles: the manifests the chart includes unchanged
// (deploy/helm/node-agent/files/) are byte for byte the files of deploy/
// they copy, so the rendered objects and their comments stay the same. It
// needs no binaries.
func TestHelmChartFiles(t *testing.T) {
	files := filepath.Join(chartDir(t), "files")
	n := 0
	err := filepath.WalkDir(files, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(files, path)
		if err != nil {
			return err
		}
		orig := filepath.Join(testenv.DeployDir(t), rel)
		want, err := os.ReadFile(orig)
		if err != nil {
			t.Errorf("chart file %s copies deploy/%s, which cannot be read: %v", rel, rel, err)
			return nil
		}
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from deploy/%s; copy it again: cp deploy/%s deploy/helm/node-agent/files/%s", path, rel, rel, rel)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Errorf("found only %d files in %s", n, files)
	}
}

// helmRunner runs bin/helm with its configuration, cache and data kept in a
// scratch directory, so a test neither reads nor writes ~/.config/helm.
type helmRunner struct {
	helm       string
	home       string
	kubeconfig string
}

func newHelmRunner(t *testing.T, opts testenv.Options) *helmRunner {
	t.Helper()
	return &helmRunner{helm: toolBinary(t, opts, binHelm), home: t.TempDir()}
}

func (h *helmRunner) run(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	if h.kubeconfig != "" {
		args = append([]string{"--kubeconfig", h.kubeconfig}, args...)
	}
	cmd := exec.CommandContext(t.Context(), h.helm, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("helm %s, stderr:\n%s", strings.Join(args, " "), stderr.String())
	}
	return out, nil
}

// setFlags turns KEY=VALUE pairs into helm's --set flags.
func setFlags(set ...string) []string {
	var out []string
	for _, s := range set {
		out = append(out, "--set", s)
	}
	return out
}

// templateYAML renders the chart with the given flags of helm template.
func (h *helmRunner) templateYAML(t *testing.T, flags ...string) []byte {
	t.Helper()
	out, err := h.run(t, append([]string{"template", "node-agent", chartDir(t)}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// templateAsKustomize renders the chart and passes the result through
// `kubectl kustomize` unchanged (a kustomization with it as its only
// resource and no transformation), so that the chart's objects and deploy/'s
// are read by the same YAML parser. The two parsers differ on folded block
// scalars (">-") with more-indented lines, which the CEL expressions of
// deploy/admission-policy.yaml have: kustomize's (go-yaml v3) keeps one line
// break before such a line, as the YAML spec says, while sigs.k8s.io/yaml
// (go-yaml v2, which Helm, `kubectl apply -f` and DecodeObjects use) keeps
// two. The expressions mean the same either way; only the whitespace
// differs.
func (h *helmRunner) templateAsKustomize(t *testing.T, kubectl string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "chart.yaml"), h.templateYAML(t, setFlags(set...)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: [chart.yaml]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return kustomizeDir(t, kubectl, dir)
}

// kustomize renders deploy/ with the named components of deploy/components/
// added, as the README says to enable them.
func kustomize(t *testing.T, kubectl string, components ...string) []*unstructured.Unstructured {
	t.Helper()
	dir := testenv.DeployDir(t)
	if len(components) > 0 {
		overlay := t.TempDir()
		base, err := filepath.Rel(overlay, dir) // kustomize takes relative paths only
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\ncomponents:\n", base)
		for _, c := range components {
			fmt.Fprintf(&b, "  - %q\n", filepath.Join(base, "components", c))
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		dir = overlay
	}
	return kustomizeDir(t, kubectl, dir)
}

func kustomizeDir(t *testing.T, kubectl, dir string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	return testenv.DecodeObjects(t, out)
}

// components lists deploy/components/, each with its switch in values.yaml:
// the directory name in camelCase (cluster-wide-eviction is
// clusterWideEviction).
func components(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(testenv.DeployDir(t), "components"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		parts := strings.Split(e.Name(), "-")
		for i := 1; i < len(parts); i++ {
			r := []rune(parts[i])
			r[0] = unicode.ToUpper(r[0])
			parts[i] = string(r)
		}
		out[e.Name()] = strings.Join(parts, "")
	}
	if len(out) < 5 {
		t.Fatalf("found only %d components in deploy/components", len(out))
	}
	return out
}

// objectKey names an object as kubectl does, with its group.
func objectKey(o *unstructured.Unstructured) string {
	gvk := o.GroupVersionKind()
	kind := gvk.Kind
	if gvk.Group != "" {
		kind += "." + gvk.Group
	}
	if o.GetNamespace() == "" {
		return kind + " " + o.GetName()
	}
	return kind + " " + o.GetNamespace() + "/" + o.GetName()
}

// comparedForm returns o as compared: the agent's config.yaml is a YAML
// document inside a string, which kustomize copies with its comments and the
// chart renders from values without them, so it is compared parsed.
func comparedForm(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	obj := o.DeepCopy().Object
	if o.GetKind() != "ConfigMap" || o.GetName() != configMapName {
		return obj
	}
	data, _ := obj["data"].(map[string]any)
	s, ok := data[configKey].(string)
	if !ok {
		t.Errorf("%s has no %s", objectKey(o), configKey)
		return obj
	}
	var doc any
	if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
		t.Errorf("%s, %s: %v", objectKey(o), configKey, err)
		return obj
	}
	data[configKey] = doc
	return obj
}

// compareObjects fails for every object that is in one list and not the
// other, or that differs, with a diff of that object.
func compareObjects(t *testing.T, what string, helm, kust []*unstructured.Unstructured) {
	t.Helper()
	index := func(objs []*unstructured.Unstructured, from string) map[string]*unstructured.Unstructured {
		m := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			k := objectKey(o)
			if _, dup := m[k]; dup {
				t.Errorf("%s: %s renders %s twice", what, from, k)
			}
			m[k] = o
		}
		return m
	}
	h, k := index(helm, "helm template"), index(kust, "kubectl kustomize")
	var keys []string
	for key := range k {
		keys = append(keys, key)
	}
	for key := range h {
		if _, ok := k[key]; !ok {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		ho, inHelm := h[key]
		ko, inKust := k[key]
		switch {
		case !inHelm:
			t.Errorf("%s: %s is rendered by kubectl kustomize, not by helm template", what, key)
		case !inKust:
			t.Errorf("%s: %s is rendered by helm template, not by kubectl kustomize", what, key)
		default:
			hc, kc := comparedForm(t, ho), comparedForm(t, ko)
			if !reflect.DeepEqual(hc, kc) {
				t.Errorf("%s: %s differs (-helm template +kubectl kustomize):\n%s", what, key, diff.Diff(hc, kc))
			}
		}
	}
	if !t.Failed() {
		t.Logf("%s: %d objects equal", what, len(keys))
	}
}

// TestHelmTemplateEqualsKustomize: `helm template` with default values
// renders exactly `kubectl kustomize deploy/`, and each switch under
// components: exactly deploy/ with that kustomize component; all switches
// together, all components.
func TestHelmTemplateEqualsKustomize(t *testing.T) {
	opts := testenv.Options{}
	kubectl := kubectlBinary(t, opts)
	h := newHelmRunner(t, opts)

	t.Run("defaults", func(t *testing.T) {
		compareObjects(t, "default values", h.templateAsKustomize(t, kubectl), kustomize(t, kubectl))
	})

	comps := components(t)
	values, _ := chartValues(t)["components"].(map[string]any)
	var all, allSet []string
	for _, dir := range slices.Sorted(maps.Keys(comps)) {
		key := comps[dir]
		all = append(all, dir)
		allSet = append(allSet, "components."+key+"=true")
		t.Run(dir, func(t *testing.T) {
			if v, ok := values[key]; !ok || v != false {
				t.Fatalf("values.yaml has no switch components.%s: false for deploy/components/%s (has %v)", key, dir, values[key])
			}
			compareObjects(t, "components."+key, h.templateAsKustomize(t, kubectl, "components."+key+"=true"), kustomize(t, kubectl, dir))
		})
	}
	for key := range values {
		if !slices.Contains(slices.Collect(maps.Values(comps)), key) {
			t.Errorf("values.yaml has components.%s, but deploy/components has no such component", key)
		}
	}
	// Both the chart and kustomize append the components' DaemonSet
	// arguments in this (alphabetical) order.
	t.Run("all", func(t *testing.T) {
		compareObjects(t, "every component", h.templateAsKustomize(t, kubectl, allSet...), kustomize(t, kubectl, all...))
	})

	// The values the chart adds over kustomize reach the DaemonSet.
	t.Run("values", func(t *testing.T) {
		flags := setFlags("image.repository=registry.example.com/node-agent", "image.tag=v9.9.9", "image.pullPolicy=Always",
			"resources.limits.memory=256Mi", "components.kvm=true", "config.drain.parallelism=8",
			"extraArgs={--libvirt-uri=qemu:///system?socket=/run/host/libvirt/libvirt-sock,--reboot-sentinel-command=/usr/bin/needs-restarting}")
		// --set would make "true" a boolean, which no label value is.
		flags = append(flags, "--set-string", `nodeSelector.kubevirt\.io/schedulable=true`)
		objs := testenv.DecodeObjects(t, h.templateYAML(t, flags...))
		var ds map[string]any
		for _, o := range objs {
			if o.GetKind() == "DaemonSet" {
				ds = o.Object
			}
		}
		if ds == nil {
			t.Fatal("no DaemonSet rendered")
		}
		ctr, _, _ := unstructured.NestedSlice(ds, "spec", "template", "spec", "containers")
		c := ctr[0].(map[string]any)
		if c["image"] != "registry.example.com/node-agent:v9.9.9" || c["imagePullPolicy"] != "Always" {
			t.Errorf("container image %v, pull policy %v", c["image"], c["imagePullPolicy"])
		}
		limits, _, _ := unstructured.NestedStringMap(c, "resources", "limits")
		if limits["memory"] != "256Mi" || limits["cpu"] != "500m" || limits["devices.kubevirt.io/kvm"] != "1" {
			t.Errorf("limits %v, want memory 256Mi, cpu 500m and the kvm device", limits)
		}
		sel, _, _ := unstructured.NestedStringMap(ds, "spec", "template", "spec", "nodeSelector")
		if sel["kubevirt.io/schedulable"] != "true" {
			t.Errorf("nodeSelector %v", sel)
		}
		// extraArgs, the keys the agent takes only from its command line,
		// follow the chart's own arguments, in order.
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		if n := len(args); n < 2 || args[n-2] != "--libvirt-uri=qemu:///system?socket=/run/host/libvirt/libvirt-sock" || args[n-1] != "--reboot-sentinel-command=/usr/bin/needs-restarting" {
			t.Errorf("extraArgs did not reach the container's args: %q", args)
		}
		cfg := renderedConfig(t, objs)
		if cfg.Drain.Parallelism != 8 {
			t.Errorf("config.drain.parallelism=8 renders drain.parallelism %d", cfg.Drain.Parallelism)
		}
	})
}

// renderedConfig loads the agent's config.yaml from the rendered ConfigMap,
// strictly, as the agent does.
func renderedConfig(t *testing.T, objs []*unstructured.Unstructured) config.Config {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == configMapName {
			s, _, _ := unstructured.NestedString(o.Object, "data", configKey)
			c, _, err := config.Parse([]byte(s), config.Default())
			if err != nil {
				t.Fatalf("the rendered %s does not load: %v\n%s", configKey, err, s)
			}
			return c
		}
	}
	t.Fatalf("no ConfigMap %s rendered", configMapName)
	return config.Config{}
}

// TestHelmLint: `helm lint --strict` finds nothing, by default and with
// every component on.
func TestHelmLint(t *testing.T) {
	h := newHelmRunner(t, testenv.Options{})
	var all []string
	for _, key := range components(t) {
		all = append(all, "--set", "components."+key+"=true")
	}
	for _, args := range [][]string{nil, all} {
		out, err := h.run(t, append([]string{"lint", "--strict", chartDir(t)}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("helm lint %s:\n%s", strings.Join(args, " "), out)
		// --strict already fails on a warning; this also catches one that
		// a later Helm reports without failing.
		if bytes.Contains(out, []byte("[WARNING]")) || bytes.Contains(out, []byte("[ERROR]")) {
			t.Errorf("helm lint is not clean:\n%s", out)
		}
	}
}

// TestHelmInstallUpgrade installs the chart on the real control plane with
// kwok nodes, upgrades it with a changed configuration key (the ConfigMap
// changes and the DaemonSet does not, so the agents reload the file instead
// of restarting), then uninstalls it. A real agent on node-1 runs as the
// chart's ServiceAccount, with a token bound to the chart's pod there, and
// reads the ConfigMap's config.yaml as its --config file: it starts on the
// installed one and, once the upgraded one replaces the file as the kubelet
// replaces a mounted ConfigMap, applies it without a restart. A real
// node-agent-coordinator runs as the chart's coordinator, with a token bound
// to one of its pods (placed on node-2 with the values coordinator.tolerations
// and coordinator.nodeSelector), and grants node-1 the drain slot of a
// maintenance.
func TestHelmInstallUpgrade(t *testing.T) {
	requireLibvirt(t)
	opts := testenv.DefaultOptions()
	h := newHelmRunner(t, opts)
	env := testenv.StartForTest(t, opts)
	h.kubeconfig = env.KubeconfigPath()
	c := env.Client()
	ctx := t.Context()
	if err := env.AddNodes(ctx, []string{"node-1", "node-2"}); err != nil {
		t.Fatal(err)
	}

	// The release record lives in "default"; the chart's objects go to the
	// namespace node-agent, which the chart itself creates. The coordinator
	// tolerates kwok's taint and runs on node-2, which the test does not
	// drain: a drain would evict the pod whose token the coordinator runs
	// with.
	kwok := testenv.KwokToleration()
	out, err := h.run(t, "install", "node-agent", chartDir(t), "--namespace", "default",
		"--set", "coordinator.tolerations[0].key="+kwok.Key, "--set", "coordinator.tolerations[0].value="+kwok.Value,
		"--set", "coordinator.tolerations[0].effect="+string(kwok.Effect),
		"--set-string", `coordinator.nodeSelector.kubernetes\.io/hostname=node-2`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install:\n%s", out)
	if !bytes.Contains(out, []byte("node-agent maintenance start NODE")) {
		t.Errorf("helm install's notes do not say how to start a maintenance:\n%s", out)
	}
	testenv.WaitFor(t, 2*time.Minute, "a running node-agent pod on every node", func() (bool, error) {
		pods, err := c.CoreV1().Pods(agentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=node-agent"})
		if err != nil {
			return false, err
		}
		return testenv.RunningPods(pods.Items) == 2, nil
	})
	testenv.WaitFor(t, 2*time.Minute, "the chart's two node-agent-coordinator pods running on node-2", func() (bool, error) {
		pods := coordinatorPods(t, env)
		return len(pods) == 2 && pods[0].Spec.NodeName == "node-2" && pods[1].Spec.NodeName == "node-2", nil
	})
	ds, err := c.AppsV1().DaemonSets(agentNamespace).Get(ctx, "node-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := c.CoreV1().ConfigMaps(agentNamespace).Get(ctx, configMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before, _, err := config.Parse([]byte(cm.Data[configKey]), config.Default())
	if err != nil {
		t.Fatalf("installed %s does not load: %v", configKey, err)
	}
	if before.Labeller.MinCPUModel != "Penryn" {
		t.Fatalf("installed labeller.minCPUModel is %q, want the default Penryn", before.Labeller.MinCPUModel)
	}

	// The agent as the pod runs it, but for the flags, which win over the
	// file: no logind on a build machine, and the embedded libvirt under a
	// scratch root asked about QEMU's TCG, which runs a few CPU models
	// (Penryn, Nehalem, Westmere) on any x86 host.
	identities.Store(env, &deployBed{env: env, c: c, kubectl: kubectlBinary(t, opts)})
	// The chart's coordinator drains, as its own ServiceAccount (below).
	withoutCoordinator(t, env)
	root := t.TempDir()
	uri := "qemu:///embed?root=" + filepath.Join(root, "libvirt")
	cfgPath := filepath.Join(root, configKey)
	replaceFile(t, cfgPath, cm.Data[configKey])
	agent := startAgent(t, env, "node-1", "--config", cfgPath, "--libvirt-uri", uri, "--virt-type=qemu", "--shutdown-enabled=false")
	agent.WaitReady(t)
	var model string
	testenv.WaitFor(t, 2*time.Minute, "cpu-model-migration labels on node-1", func() (bool, error) {
		for k := range getNode(t, c, "node-1").Labels {
			if m, ok := strings.CutPrefix(k, kubevirtlabels.CPUModelMigrationLabelPrefix); ok {
				model = m
				return true, nil
			}
		}
		return false, nil
	})

	// labeller.obsoleteCPUModels is one of the keys the agent applies on
	// reload: marking a model it labels obsolete removes that label.
	out, err = h.run(t, "upgrade", "node-agent", chartDir(t), "--namespace", "default", "--reuse-values", "--set", "config.labeller.obsoleteCPUModels={"+model+"}")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm upgrade:\n%s", out)
	cm, err = c.CoreV1().ConfigMaps(agentNamespace).Get(ctx, configMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, _, err := config.Parse([]byte(cm.Data[configKey]), config.Default())
	if err != nil {
		t.Fatalf("upgraded %s does not load: %v", configKey, err)
	}
	want := before
	want.Labeller.ObsoleteCPUModels = []string{model}
	if !reflect.DeepEqual(after, want) {
		t.Errorf("after the upgrade the config differs from the installed one with labeller.obsoleteCPUModels [%s] (-got +want):\n%s", model, diff.Diff(after, want))
	}
	replaceFile(t, cfgPath, cm.Data[configKey])
	testenv.WaitFor(t, time.Minute, model+" label removed from node-1 after the reload", func() (bool, error) {
		_, ok := getNode(t, c, "node-1").Labels[kubevirtlabels.CPUModelMigrationLabelPrefix+model]
		return !ok, nil
	})
	if err, exited := agent.Exited(); exited {
		t.Fatalf("node-agent exited (%v); it should have reloaded the file", err)
	}
	t.Logf("the agent reloaded the upgraded config.yaml (obsoleteCPUModels [%s]); its cpu-model-migration label went away", model)

	// A maintenance drain of node-1, granted by the chart's coordinator.
	coordinator := startDeployedCoordinator(t, env, &coordinatorPods(t, env)[0], cm.Data[configKey])
	out2, err := cli(t, env, "start", "node-1", "--reason", "helm test", "--wait")
	t.Logf("maintenance start --wait:\n%s", out2)
	if err != nil {
		t.Fatalf("maintenance start --wait: %v", err)
	}
	if st := nodeStatus(t, c, "node-1"); st.Phase != selfdrain.PhaseSucceeded {
		t.Errorf("node-1's maintenance is %s, want %s", st.Phase, selfdrain.PhaseSucceeded)
	}
	if out2, err = cli(t, env, "stop", "node-1", "--wait"); err != nil {
		t.Fatalf("maintenance stop --wait: %v\n%s", err, out2)
	}
	if g := scrape(t, coordinator.MetricsAddr, "node_agent_drain_slot_grants_total"); g != 1 {
		t.Errorf("the chart's coordinator granted %v drain slots, want 1", g)
	}

	// Stopped before the uninstall takes their RBAC away.
	if err := coordinator.Stop(t); err != nil {
		t.Errorf("node-agent-coordinator exited with %v after SIGTERM, want status 0", err)
	}
	if err := agent.Stop(t); err != nil {
		t.Errorf("node-agent exited with %v after SIGTERM, want status 0\n%s", err, agent.Tail(40))
	}
	if n := hostcpu.KillProbes(hostcpu.EmbedRoot(uri, agent.StateDir)); n > 0 {
		t.Errorf("node-agent left %d QEMU capability probes running after it stopped", n)
	}
	ds2, err := c.AppsV1().DaemonSets(agentNamespace).Get(ctx, "node-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds2.Generation != ds.Generation {
		t.Errorf("a configuration change rolled the DaemonSet (generation %d to %d); the agents should reload the file instead", ds.Generation, ds2.Generation)
	}
	status, err := h.run(t, "status", "node-agent", "--namespace", "default")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(status, []byte("REVISION: 2")) || !bytes.Contains(status, []byte("STATUS: deployed")) {
		t.Errorf("helm status after the upgrade:\n%s", status)
	}

	out, err = h.run(t, "uninstall", "node-agent", "--namespace", "default", "--wait")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm uninstall:\n%s", out)
	if _, err := c.AppsV1().DaemonSets(agentNamespace).Get(ctx, "node-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the DaemonSet is still there after helm uninstall (err %v)", err)
	}
	if _, err := c.RbacV1().ClusterRoles().Get(ctx, "node-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ClusterRole node-agent is still there after helm uninstall (err %v)", err)
	}
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, agentPolicy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the admission policy is still there after helm uninstall (err %v)", err)
	}
	testenv.WaitFor(t, 2*time.Minute, "namespace node-agent gone", func() (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, agentNamespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// replaceFile writes content to a new file and renames it to path, so a
// reader sees the old file or the new one whole, as the kubelet updates a
// mounted ConfigMap (it swaps a symbolic link).
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
