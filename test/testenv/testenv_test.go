package testenv

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestPKI(t *testing.T) {
	p, err := newPKI()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.caPEM)

	serving, err := p.serving("s", []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"kubernetes.default.svc"})
	if err != nil {
		t.Fatal(err)
	}
	sc := parseCert(t, serving.CertPEM)
	for _, host := range []string{"127.0.0.1", "kubernetes.default.svc"} {
		if _, err := sc.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	if _, err := sc.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("serving certificate verified for a name it does not carry")
	}

	client, err := p.client("alice", "system:masters", "team")
	if err != nil {
		t.Fatal(err)
	}
	cc := parseCert(t, client.CertPEM)
	if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate is usable as a server certificate")
	}
	// DER sorts the members of a SET, so the groups may come back reordered.
	groups := slices.Sorted(slices.Values(cc.Subject.Organization))
	if cc.Subject.CommonName != "alice" || strings.Join(groups, ",") != "system:masters,team" {
		t.Errorf("subject = %v, want CN=alice O=[system:masters team]", cc.Subject)
	}
	if cc.IsCA {
		t.Error("client certificate is a CA")
	}

	priv, pub, err := newServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(priv); b == nil || b.Type != "PRIVATE KEY" {
		t.Errorf("service-account key is not a PKCS#8 PEM")
	}
	if b, _ := pem.Decode(pub); b == nil || b.Type != "PUBLIC KEY" {
		t.Errorf("service-account public key is not a PKIX PEM")
	}
}

func TestCheckBinaries(t *testing.T) {
	// The layout of BinDir itself; `make test K8S_VERSION=...` would
	// otherwise look for that release's control plane in its directory.
	t.Setenv(KubernetesVersionEnv, "")
	dir := t.TempDir()
	for _, name := range []string{BinEtcd, BinKubeAPIServer, BinKubeScheduler} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Present but not executable counts as missing.
	if err := os.WriteFile(filepath.Join(dir, BinKwok), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		opts        Options
		extra       []string
		wantMissing []string
	}{
		{"all components", Options{BinDir: dir, Controllers: true, Scheduler: true, Kwok: true}, nil, []string{BinKubeControllerManager, BinKwok}},
		{"apiserver only", Options{BinDir: dir}, nil, nil},
		{"extra kubectl", Options{BinDir: dir, Scheduler: true}, []string{BinKubectl}, []string{BinKubectl}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckBinaries(tt.opts, tt.extra...)
			if tt.wantMissing == nil {
				if err != nil {
					t.Fatalf("CheckBinaries() = %v, want nil", err)
				}
				return
			}
			var missing *MissingBinariesError
			if !errors.As(err, &missing) {
				t.Fatalf("CheckBinaries() = %v, want *MissingBinariesError", err)
			}
			if got, want := strings.Join(missing.Missing, ","), strings.Join(tt.wantMissing, ","); got != want {
				t.Errorf("missing = %s, want %s", got, want)
			}
			if !strings.Contains(err.Error(), "make tools") {
				t.Errorf("error %q does not say how to build the binaries", err)
			}
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	t.Setenv(BinDirEnv, "/opt/bin")
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.BinDir != "/opt/bin" || o.PodStages != PodStagesFast || o.StartTimeout != defaultStartTimeout {
		t.Errorf("defaults = %+v", o)
	}
	if _, err := (Options{PodStages: "slow"}).withDefaults(); err == nil {
		t.Error("unknown pod stages accepted")
	}

	t.Setenv(BinDirEnv, "")
	o, err = Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if o.BinDir != filepath.Join(root, "bin") {
		t.Errorf("BinDir = %s, want %s/bin", o.BinDir, root)
	}
}

func TestKwokStagesConfig(t *testing.T) {
	mod := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		path := filepath.Join(mod, "kustomize", "stage", rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stage := func(name string) string {
		return "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: " + name + "\n"
	}
	write("node/fast/node-initialize.yaml", stage("node-initialize"))
	write("node/fast/kustomization.yaml", "resources:\n- node-initialize.yaml\n")
	write("node/heartbeat-with-lease/node-heartbeat-with-lease.yaml", stage("node-heartbeat-with-lease"))
	write("pod/fast/pod-ready.yaml", stage("pod-ready"))
	write("pod/fast/pod-delete.yaml", stage("pod-delete"))
	write("pod/general/pod-create.yaml", stage("pod-create"))

	got, err := kwokStagesConfig(mod, PodStagesFast)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: node-initialize", "name: node-heartbeat-with-lease", "name: pod-ready", "name: pod-delete"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"resources:", "name: pod-create"} {
		if strings.Contains(string(got), unwanted) {
			t.Errorf("config contains %q:\n%s", unwanted, got)
		}
	}

	if _, err := kwokStagesConfig(t.TempDir(), PodStagesFast); err == nil {
		t.Error("a directory without stages was accepted")
	}
}

// TestKwokModuleStages reads the stages from the kwok module hack/tools/kwok
// pins, as Start does.
func TestKwokModuleStages(t *testing.T) {
	dir, err := findKwokModuleDir(t.Context())
	if err != nil {
		t.Skipf("kwok module not available: %v", err)
	}
	for _, stages := range []string{PodStagesFast, PodStagesGeneral} {
		got, err := kwokStagesConfig(dir, stages)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"name: node-initialize", "name: node-heartbeat-with-lease", "name: pod-ready", "name: pod-delete"} {
			if !strings.Contains(string(got), want) {
				t.Errorf("%s stages lack %q", stages, want)
			}
		}
		// Both sets delay a pod's deletion and its start by its
		// annotations: the general set by kwok's own Stages, the fast set
		// by the delay the harness adds.
		for _, stage := range []string{"pod-ready", "pod-delete"} {
			want := fmt.Sprintf("%q", StageDelayAnnotation(stage))
			if !strings.Contains(string(got), want) {
				t.Errorf("%s stages do not read %s", stages, want)
			}
		}
	}
}

func TestWithDelayFromAnnotation(t *testing.T) {
	fastDelete := `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    delete: true
`
	out, changed, err := withDelayFromAnnotation([]byte(fastDelete))
	if err != nil || !changed {
		t.Fatalf("changed=%t err=%v, want a delay added", changed, err)
	}
	var got, want map[string]any
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(fastDelete), &want); err != nil {
		t.Fatal(err)
	}
	// The delay is the only change: same name, selector and next.
	want["spec"].(map[string]any)["delay"] = map[string]any{"durationFrom": map[string]any{"jq": map[string]any{
		"expression": `.metadata.annotations["pod-delete.stage.kwok.x-k8s.io/delay"]`}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant the input with spec.delay added", out)
	}

	for name, doc := range map[string]string{
		"a Stage with a delay of its own": strings.Replace(fastDelete, "  next:", "  delay:\n    durationMilliseconds: 1000\n  next:", 1),
		"a Node Stage":                    strings.Replace(fastDelete, "kind: Pod", "kind: Node", 1),
		"not a Stage":                     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pod-delete\n",
	} {
		out, changed, err := withDelayFromAnnotation([]byte(doc))
		if err != nil || changed || string(out) != doc {
			t.Errorf("%s: changed=%t err=%v, want it as it was", name, changed, err)
		}
	}
	if _, _, err := withDelayFromAnnotation([]byte("kind: [")); err == nil {
		t.Error("invalid YAML accepted")
	}
}

func TestWriteKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	in := &rest.Config{
		Host:            "https://127.0.0.1:6443",
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca"), CertData: []byte("cert"), KeyData: []byte("key")},
		BearerToken:     "token",
		Impersonate:     rest.ImpersonationConfig{UserName: "bob", Groups: []string{"g"}},
	}
	if err := WriteKubeconfig(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if out.Host != in.Host || string(out.CAData) != "ca" || string(out.CertData) != "cert" || string(out.KeyData) != "key" ||
		out.BearerToken != "token" || out.Impersonate.UserName != "bob" || strings.Join(out.Impersonate.Groups, ",") != "g" {
		t.Errorf("round trip lost data: %+v", out)
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := TailFile(path, 2); got != "c\nd" {
		t.Errorf("tailFile = %q, want %q", got, "c\nd")
	}
	if got := TailFile(path, 10); got != "a\nb\nc\nd" {
		t.Errorf("tailFile = %q", got)
	}
	if got := TailFile(filepath.Join(t.TempDir(), "none"), 2); !strings.Contains(got, "no log") {
		t.Errorf("tailFile of a missing file = %q", got)
	}
}

func TestPortOf(t *testing.T) {
	for url, want := range map[string]int{
		"https://127.0.0.1:6443/readyz": 6443,
		"http://127.0.0.1:2379":         2379,
	} {
		if got := portOf(url); got != want {
			t.Errorf("portOf(%q) = %d, want %d", url, got, want)
		}
	}
}

func TestHasTaint(t *testing.T) {
	node := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: DrainTaint.Key, Value: "node-agent", Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute},
	}}}
	tests := []struct {
		taint corev1.Taint
		want  bool
	}{
		{DrainTaint, true}, // the value is not compared
		{corev1.Taint{Key: DrainTaint.Key, Effect: corev1.TaintEffectNoExecute}, false},
		{corev1.Taint{Key: corev1.TaintNodeNotReady}, true}, // any effect
		{corev1.Taint{Key: corev1.TaintNodeUnschedulable}, false},
	}
	for _, tt := range tests {
		if got := HasTaint(node, tt.taint); got != tt.want {
			t.Errorf("HasTaint(%v) = %t, want %t", tt.taint, got, tt.want)
		}
	}
}
