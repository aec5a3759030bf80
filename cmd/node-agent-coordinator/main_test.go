package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunReadsTheAgentsConfigWithoutANode: the coordinator starts from the
// agents' ConfigMap, which names no node, and without $NODE_NAME; it gets
// as far as the kubeconfig.
func TestRunReadsTheAgentsConfigWithoutANode(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("slots:\n  limit: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--config", cfg}} {
		args = append(args, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
		err := run(t.Context(), args)
		if err == nil || strings.Contains(err.Error(), "nodeName") || !strings.Contains(err.Error(), "kubeconfig") {
			t.Errorf("run %q: %v; want the missing kubeconfig named, not nodeName", args, err)
		}
	}
}
