package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestEveryKeyHasAWriter: a key added to Config without a class in trust
// fails here, and so does a class left behind for a key that is gone.
func TestEveryKeyHasAWriter(t *testing.T) {
	paths := KeyPaths()
	if len(paths) < 60 {
		t.Fatalf("KeyPaths found only %d keys; the walk is broken", len(paths))
	}
	for _, p := range paths {
		tr, ok := TrustOf(p)
		switch {
		case !ok:
			t.Errorf("config key %s has no writer class in trust (pkg/config/trust.go): say who may set it (WriterDaemonSet for a key that chooses an identity, credential, path, bus, command or what the host runs; else WriterConfigMap) and the worst a hostile value can do", p)
		case tr.Writer != WriterDaemonSet && tr.Writer != WriterConfigMap:
			t.Errorf("config key %s: writer %q is neither %s nor %s", p, tr.Writer, WriterDaemonSet, WriterConfigMap)
		case strings.TrimSpace(tr.Worst) == "":
			t.Errorf("config key %s: no worst case given", p)
		}
	}
	for p := range trust {
		if !slices.Contains(paths, p) {
			t.Errorf("trust classifies %s, which is not a key of Config", p)
		}
	}
}

// TestDaemonSetOnlyKeysCoverWhatChoosesHostTrust pins the keys whose value
// chooses an identity, a credential, a path, a bus, a command or what the
// host runs: a change of class here is a change of the security model, made
// on purpose, not by a slip in the table.
func TestDaemonSetOnlyKeysCoverWhatChoosesHostTrust(t *testing.T) {
	want := []string{
		"kubeconfig", "nodeName", "metricsBindAddress", "healthProbeBindAddress", "stateDir",
		"labeller.libvirtURI",
		"shutdown.systemBusAddress", "shutdown.manageLogindConfig", "shutdown.logindDropInDir",
		"reboot.sentinelFile", "reboot.sentinelCommand",
		"notifications.webhooks[].urlFile",
	}
	got := DaemonSetOnlyKeys()
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Errorf("DaemonSetOnlyKeys() = %v\nwant %v", got, want)
	}
}

// fileSetting returns config file YAML that sets the key at path, whatever
// its type: the refusal comes before the values are decoded.
func fileSetting(t *testing.T, path, value string) []byte {
	t.Helper()
	var build func(parts []string) any
	build = func(parts []string) any {
		if len(parts) == 0 {
			return value
		}
		head := parts[0]
		if list, ok := strings.CutSuffix(head, "[]"); ok {
			return map[string]any{list: []any{build(parts[1:])}}
		}
		return map[string]any{head: build(parts[1:])}
	}
	// A path such as notifications.webhooks[].urlFile splits at the dots;
	// its "webhooks[]" level becomes a list of one element.
	doc := build(strings.Split(path, "."))
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConfigFileRefusesDaemonSetOnlyKeys: each such key is refused in a file,
// with a one-line error that names the key and where it belongs, and
// nothing of the file is applied.
func TestConfigFileRefusesDaemonSetOnlyKeys(t *testing.T) {
	flags := flagOfPath()
	for _, p := range DaemonSetOnlyKeys() {
		for _, value := range []string{"/etc/node-agent/evil", ""} {
			t.Run(p+"="+value, func(t *testing.T) {
				data := fileSetting(t, p, value)
				_, _, err := Parse(data, Default())
				if !errors.Is(err, ErrDaemonSetOnlyKey) {
					t.Fatalf("Parse(%q) = %v, want ErrDaemonSetOnlyKey", data, err)
				}
				msg := err.Error()
				if strings.Contains(msg, "\n") {
					t.Errorf("error is not one line: %q", msg)
				}
				for _, want := range []string{p + " is taken only from the DaemonSet's arguments", "remove it from the file"} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q lacks %q", msg, want)
					}
				}
				list, _, _ := strings.Cut(p, "[]")
				if !strings.Contains(msg, "--"+flags[list]) {
					t.Errorf("error %q does not name the flag --%s", msg, flags[list])
				}
			})
		}
	}
}

// TestKubeconfigExecPluginRefused is the attack of issue 40: a ConfigMap
// writer adds a kubeconfig with an exec credential plugin beside config.yaml
// and points kubeconfig: at it.
func TestKubeconfigExecPluginRefused(t *testing.T) {
	for _, data := range []string{
		"kubeconfig: /etc/node-agent/kubeconfig\n",
		"logLevel: info\nkubeconfig: /etc/node-agent/kubeconfig\nnodeName: node-2\n",
		"kubeconfig: 12\n", // refused for what it is, not for its type
	} {
		_, _, err := Parse([]byte(data), Default())
		if !errors.Is(err, ErrDaemonSetOnlyKey) || !strings.Contains(err.Error(), "kubeconfig is taken only from the DaemonSet's arguments (--kubeconfig or $KUBECONFIG)") {
			t.Errorf("Parse(%q) = %v, want the kubeconfig refusal", data, err)
		}
	}
	_, _, err := Parse([]byte("kubeconfig: /x\nnodeName: n\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "nodeName is taken only") || !strings.Contains(err.Error(), "kubeconfig is taken only") {
		t.Errorf("two DaemonSet-only keys: %v, want both named", err)
	}
}

// TestConfigMapKeysAreAccepted: a file may hold every key of the ConfigMap
// class; the refusal is the class's, not a rule of each key.
func TestConfigMapKeysAreAccepted(t *testing.T) {
	data := []byte(`logLevel: debug
labeller:
  virtType: qemu
drain:
  timeout: 30m
slots:
  pools:
    - name: gpu
      selector: gpu=true
      limit: 1
notifications:
  webhooks:
    - name: ops
      url: https://hooks.example.com/x
reboot:
  enabled: true
`)
	c, _, err := Parse(data, Default())
	if err != nil {
		t.Fatal(err)
	}
	if c.LogLevel != "debug" || len(c.Slots.Pools) != 1 || c.Notifications.Webhooks[0].URL == "" || !c.Reboot.Enabled {
		t.Errorf("Parse applied too little: %+v", c)
	}
}
