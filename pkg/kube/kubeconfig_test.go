package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig whose one cluster is at server.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// notInCluster makes the in-cluster fallback impossible, as outside a pod.
func notInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
}

func TestRESTConfig(t *testing.T) {
	explicit := writeKubeconfig(t, "https://explicit.example:6443")
	fromEnv := writeKubeconfig(t, "https://env.example:6443")
	tests := []struct {
		name, path, env, wantHost string
	}{
		{name: "path given", path: explicit, wantHost: "https://explicit.example:6443"},
		{name: "path wins over $KUBECONFIG", path: explicit, env: fromEnv, wantHost: "https://explicit.example:6443"},
		{name: "$KUBECONFIG without path", env: fromEnv, wantHost: "https://env.example:6443"},
		{name: "$KUBECONFIG list, missing files skipped", env: "/nonexistent/a" + string(os.PathListSeparator) + fromEnv, wantHost: "https://env.example:6443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			notInCluster(t)
			t.Setenv("KUBECONFIG", tt.env)
			c, err := RESTConfig(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if c.Host != tt.wantHost {
				t.Errorf("host %q, want %q", c.Host, tt.wantHost)
			}
		})
	}
}

func TestRESTConfigErrors(t *testing.T) {
	notInCluster(t)
	t.Run("missing file names it", func(t *testing.T) {
		t.Setenv("KUBECONFIG", writeKubeconfig(t, "https://env.example:6443"))
		_, err := RESTConfig("/nonexistent/kubeconfig")
		if err == nil || !strings.Contains(err.Error(), "kubeconfig /nonexistent/kubeconfig") {
			t.Errorf("error %v, want one naming /nonexistent/kubeconfig", err)
		}
	})
	t.Run("nothing to load", func(t *testing.T) {
		// ~/.kube/config is resolved once, when clientcmd loads.
		if _, err := os.Stat(clientcmd.RecommendedHomeFile); err == nil {
			t.Skipf("%s exists on this machine", clientcmd.RecommendedHomeFile)
		}
		t.Setenv("KUBECONFIG", "")
		_, err := RESTConfig("")
		if err == nil || !strings.Contains(err.Error(), "pass --kubeconfig PATH") {
			t.Errorf("error %v, want the no-kubeconfig message", err)
		}
		if err != nil && strings.Contains(err.Error(), "KUBERNETES_MASTER") {
			t.Errorf("error %v still speaks of KUBERNETES_MASTER", err)
		}
	})
}

// TestRESTConfigContext: --context picks another context of the kubeconfig,
// as kubectl's does; an unknown one is an error that names it.
func TestRESTConfigContext(t *testing.T) {
	notInCluster(t)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["prod"] = &clientcmdapi.Cluster{Server: "https://prod.example:6443"}
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: "https://lab.example:6443"}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["prod"] = &clientcmdapi.Context{Cluster: "prod", AuthInfo: "u"}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "u"}
	kc.CurrentContext = "prod"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	for ctx, want := range map[string]string{"": "https://prod.example:6443", "lab": "https://lab.example:6443"} {
		c, err := RESTConfigFor(path, ctx)
		if err != nil || c.Host != want {
			t.Errorf("context %q: host %v, %v; want %s", ctx, c, err, want)
		}
	}
	if _, err := RESTConfigFor(path, "staging"); err == nil || !strings.Contains(err.Error(), "staging") {
		t.Errorf("unknown context: %v, want an error naming it", err)
	}
}
