package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunWarnsOfOldKeysAtStart: `node-agent run` with a file that still says
// drain.maxConcurrentNodes starts (as far as the kubeconfig here), and its log
// says, once, that the key is old and what its new name is.
func TestRunWarnsOfOldKeysAtStart(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("drain:\n  maxConcurrentNodes: 2\n  timeout: 30m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newRunCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--config", cfg, "--node-name", "n", "--kubeconfig", filepath.Join(dir, "missing"),
		"--metrics-bind-address=0", "--health-probe-bind-address=0"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Fatalf("run = %v; want it to get as far as the missing kubeconfig", err)
	}
	log := out.String()
	if n := strings.Count(log, "key=drain.maxConcurrentNodes newKey=slots.limit"); n != 1 {
		t.Errorf("%d warnings for drain.maxConcurrentNodes, want 1:\n%s", n, log)
	}
	if strings.Contains(log, "key=drain.timeout") {
		t.Errorf("drain.timeout is no old key:\n%s", log)
	}
}
