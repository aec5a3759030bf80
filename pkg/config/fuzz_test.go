package config

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse feeds Parse what a ConfigMap writer may put in the file. It must
// not panic; what it accepts must validate without panicking, and never
// carries a DaemonSet-only key (a kubeconfig, a sentinel command) from the
// file.
func FuzzParse(f *testing.F) {
	f.Add([]byte("labeller:\n  minCPUModel: Haswell\n  obsoleteCPUModels: [Nehalem]\ndrain:\n  timeout: 90s\n"))
	f.Add([]byte("reboot:\n  enabled: true\n  sentinelCommand: [/usr/bin/touch, /x]\n"))
	f.Add([]byte("reboot:\n  sentinelCommand: []\n  window:\n    days: [sat]\n    start: \"22:00\"\n"))
	f.Add([]byte("labeller:\n  libvirtURI: qemu+ext:///system?command=/bin/sh\n"))
	f.Add([]byte("drain:\n  maxConcurrentNodes: 4294967296\n  pools: [{name: a, nodeSelector: 'x=y', maxConcurrentNodes: 2}]\n"))
	f.Add([]byte("slots:\n  limit: 2\n  pools: [{name: a, selector: 'x=y', limit: 2}]\n  heartbeatBound: 30s\n"))
	f.Add([]byte("drain:\n  leaseNamespace: x\n  slotSilenceBound: 1m\nslots:\n  namespace: y\n"))
	f.Add([]byte("a: [1\n"))
	f.Add([]byte("kubeconfig: /etc/node-agent/kubeconfig\nnotifications:\n  webhooks: [{name: a, urlFile: /x}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, _, err := Parse(data, Default())
		if err != nil {
			return
		}
		// Nothing a file says reaches a DaemonSet-only key (trust.go):
		// each is as the base had it.
		base := Default()
		for _, p := range DaemonSetOnlyKeys() {
			if got, want := valueAt(&c, p), valueAt(&base, p); !reflect.DeepEqual(got, want) {
				t.Errorf("accepted %s = %v from the file (base %v)", p, got, want)
			}
		}
		c.NodeName = "node-1"
		_ = c.Validate()
	})
}

// FuzzCheckLibvirtURI: whatever it accepts is "auto" or a local QEMU
// connection, and an error names what is accepted.
func FuzzCheckLibvirtURI(f *testing.F) {
	for _, s := range []string{"auto", "qemu:///system", "qemu+unix:///system?socket=/run/x", "qemu:///embed?root=/var/lib/x",
		"qemu+ext:///system?command=/bin/sh", "qemu+ssh://h/system", "test:///default", "qemu:///embed?root=/a/../b", "%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		err := CheckLibvirtURI(uri)
		if err != nil {
			if !strings.Contains(err.Error(), libvirtURIForms) {
				t.Errorf("%q: error %q does not say what is accepted", uri, err)
			}
			return
		}
		if uri == LibvirtURIAuto {
			return
		}
		u, perr := url.Parse(uri)
		if perr != nil {
			t.Fatalf("%q accepted but does not parse: %v", uri, perr)
		}
		if (u.Scheme != "qemu" && u.Scheme != "qemu+unix") || u.Host != "" || u.User != nil {
			t.Errorf("%q accepted: scheme %q, host %q", uri, u.Scheme, u.Host)
		}
		if q := u.Query(); q.Has("command") || q.Has("no_verify") || q.Has("keyfile") {
			t.Errorf("%q accepted with a transport parameter", uri)
		}
	})
}

// valueAt returns the values at path in c: one for a plain key, one per
// element for a key inside a list.
func valueAt(c *Config, path string) []any {
	var out []any
	var walk func(v reflect.Value, parts []string)
	walk = func(v reflect.Value, parts []string) {
		name, list := strings.CutSuffix(parts[0], "[]")
		f := fieldByJSON(v, name)
		switch {
		case len(parts) == 1:
			out = append(out, f.Interface())
		case list:
			for i := range f.Len() {
				walk(f.Index(i), parts[1:])
			}
		default:
			walk(f, parts[1:])
		}
	}
	walk(reflect.ValueOf(c).Elem(), strings.Split(path, "."))
	return out
}
