package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

// TestDemoRunsToTheEnd runs what `make demo` runs and checks that it shows
// the labels and the drain, and leaves nothing running.
func TestDemoRunsToTheEnd(t *testing.T) {
	testenv.RequireBinaries(t, testenv.DefaultOptions())
	requireLibvirt(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The demo runs bin/node-agent and bin/node-agent-coordinator; give it
	// the binaries built for this run.
	bin := t.TempDir()
	for _, name := range []string{testenv.BinEtcd, testenv.BinKubeAPIServer, testenv.BinKubeControllerManager, testenv.BinKubeScheduler, testenv.BinKwok} {
		if err := os.Symlink(filepath.Join(root, "bin", name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The other Kubernetes releases' control planes (bin/k8s-<version>/),
	// which NODE_AGENT_K8S_VERSION selects for the demo as for the tests.
	others, err := filepath.Glob(filepath.Join(root, "bin", "k8s-*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range others {
		if err := os.Symlink(dir, filepath.Join(bin, filepath.Base(dir))); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"node-agent": agentBinary, testenv.CoordinatorName: testenv.CoordinatorBinary(agentBinary)} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "-tags", "libvirt_dlopen", "./hack/demo")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "NODE_AGENT_DEMO_BIN_DIR="+bin)
	out, err := cmd.CombinedOutput()
	t.Logf("make demo output:\n%s", out)
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	// The host model is there whatever this host's CPU; which models are
	// usable (cpu-model, cpu-model-migration) depends on it.
	for _, want := range []string{"host-model-cpu.node.kubevirt.io/", "labels in all", "node-1 drained:", "Succeeded", "node-1: unschedulable=false", "Stopping everything"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
