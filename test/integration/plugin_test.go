package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/test/testenv"
)

// TestKubectlPlugin: `make install` puts node-agent and the kubectl plugin
// name beside it; the real kubectl finds the plugin on $PATH, and
// `kubectl node-agent ...` reaches the cluster with kubectl's --kubeconfig
// and --context, and says how it was called in its help.
func TestKubectlPlugin(t *testing.T) {
	kubectl := toolBinary(t, testenv.DefaultOptions(), testenv.BinKubectl)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env := fullEnv(t)
	if err := env.AddNode(t.Context(), "node-1"); err != nil {
		t.Fatal(err)
	}
	prefix := t.TempDir()
	install := exec.Command("make", "-s", "install", "PREFIX="+prefix, "BIN="+filepath.Dir(agentBinary))
	install.Dir = root
	// `make install` depends on `build`, which would write bin/ of the
	// checkout; the test's binary is already built, so make is told so.
	install.Args = append(install.Args, "-o", "build")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	if target, err := os.Readlink(filepath.Join(prefix, "bin", "kubectl-node_agent")); err != nil || target != "node-agent" {
		t.Fatalf("kubectl-node_agent links to %q (%v), want node-agent", target, err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(kubectl, args...)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Join(prefix, "bin")+":"+os.Getenv("PATH"), "KUBECONFIG=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("plugin", "list")
	if err != nil || !strings.Contains(out, filepath.Join(prefix, "bin", "kubectl-node_agent")) {
		t.Fatalf("kubectl plugin list: %v\n%s", err, out)
	}
	ctxOut, err := exec.Command(kubectl, "config", "current-context", "--kubeconfig", env.KubeconfigPath()).Output()
	if err != nil {
		t.Fatal(err)
	}
	current := strings.TrimSpace(string(ctxOut))
	out, err = run("node-agent", "reboot", "status", "--kubeconfig", env.KubeconfigPath(), "--context", current)
	if err != nil || !strings.Contains(out, "node-1") || !strings.Contains(out, "NODE") {
		t.Fatalf("kubectl node-agent reboot status: %v\n%s", err, out)
	}
	t.Logf("kubectl node-agent reboot status --context %s:\n%s", current, out)
	out, err = run("node-agent", "maintenance", "status", "--kubeconfig", env.KubeconfigPath(), "--context", "no-such-context")
	if err == nil || !strings.Contains(out, "no-such-context") {
		t.Fatalf("an unknown --context: %v\n%s", err, out)
	}
	out, err = run("node-agent", "--help")
	if err != nil || !strings.Contains(out, "kubectl node-agent [command]") {
		t.Fatalf("kubectl node-agent --help: %v\n%s", err, out)
	}
}
