package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// deployConfigMap is the ConfigMap the DaemonSet mounts as --config.
var deployConfigMap = filepath.Join("..", "..", "deploy", "configmap.yaml")

// TestDeployConfigMapIsDefault keeps deploy/configmap.yaml in step with this
// package: the config file it ships lists every key, each with a comment, at
// exactly the value Default() gives it. A new key or a changed default fails
// here until the manifest follows.
func TestDeployConfigMapIsDefault(t *testing.T) {
	raw, err := os.ReadFile(deployConfigMap)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
		t.Fatalf("%s: %v", deployConfigMap, err)
	}
	content, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("%s has no key config.yaml (the DaemonSet passes /etc/node-agent/config.yaml)", deployConfigMap)
	}

	// Parse over the zero Config, not Default(): a key left out of the file
	// then shows as a difference instead of inheriting its default.
	got, _, err := Parse([]byte(content), Config{})
	if err != nil {
		t.Fatalf("config.yaml in %s: %v", deployConfigMap, err)
	}
	got = got.NormalizeEmpty()
	// The DaemonSet-only keys are not the file's (trust.go).
	if want := Default().WithoutDaemonSetOnly(); !reflect.DeepEqual(got, want) {
		gotKeys, wantKeys := deployFlatten(t, got), deployFlatten(t, want)
		for _, k := range deployKeyPaths(reflect.TypeOf(Config{}), "") {
			if gotKeys[k] != wantKeys[k] {
				t.Errorf("config.yaml in %s: %s is %s, config.Default() has %s", deployConfigMap, k, gotKeys[k], wantKeys[k])
			}
		}
		if !t.Failed() {
			t.Errorf("config.yaml in %s differs from config.Default():\n got %+v\nwant %+v", deployConfigMap, got, want)
		}
	}

	var doc map[string]any
	if err := yaml.Unmarshal([]byte(content), &doc); err != nil {
		t.Fatal(err)
	}
	keys := deployKeyPaths(reflect.TypeOf(Config{}), "")
	if len(keys) < 25 {
		t.Fatalf("found only %d keys in Config; the walk is broken", len(keys))
	}
	defaults := deployFlatten(t, Default())
	for _, k := range keys {
		if tr, _ := TrustOf(k); tr.Writer == WriterDaemonSet {
			if deployHasPath(doc, k) {
				t.Errorf("config.yaml in %s sets %s, which the agent refuses in a config file", deployConfigMap, k)
			}
			if !strings.Contains(string(raw), "--"+flagOfPath()[k]) {
				t.Errorf("%s does not name --%s among the keys it leaves to the DaemonSet", deployConfigMap, flagOfPath()[k])
			}
			continue
		}
		if !deployHasPath(doc, k) {
			t.Errorf("config.yaml in %s lacks key %s (default %s)", deployConfigMap, k, defaults[k])
		}
	}

	// Documented inline: the line above every key is a comment.
	keyLine := regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9]*:`)
	lines := strings.Split(content, "\n")
	for i, l := range lines {
		if !keyLine.MatchString(l) {
			continue
		}
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			t.Errorf("config.yaml in %s: key %q has no comment above it", deployConfigMap, strings.TrimSpace(l))
		}
	}
}

// deployKeyPaths lists the dotted config keys of t's JSON tags, descending into
// sections (durations are leaves).
func deployKeyPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type.Name() != "Duration" {
			out = append(out, deployKeyPaths(f.Type, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

func deployHasPath(doc map[string]any, path string) bool {
	head, rest, nested := strings.Cut(path, ".")
	v, ok := doc[head]
	if !ok || !nested {
		return ok
	}
	m, ok := v.(map[string]any)
	return ok && deployHasPath(m, rest)
}

// deployFlatten renders every key of c as YAML, by dotted path; a key omitted when
// empty renders as "".
func deployFlatten(t *testing.T, c Config) map[string]string {
	t.Helper()
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range deployKeyPaths(reflect.TypeOf(Config{}), "") {
		var v any = doc
		for _, p := range strings.Split(k, ".") {
			m, _ := v.(map[string]any)
			v = m[p]
		}
		if v == nil {
			out[k] = `""`
			continue
		}
		b, _ := yaml.Marshal(v)
		out[k] = strings.TrimSpace(string(b))
	}
	return out
}
