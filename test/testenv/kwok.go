package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	kwokModule = "sigs.k8s.io/kwok"

	// KwokNodeAnnotation marks the Nodes kwok plays the kubelet for; kwok
	// runs with --manage-nodes-with-annotation-selector on it, so a Node
	// without it (for example one a test registers for a real agent) is left
	// alone.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// KwokNodeValue is the value of KwokNodeAnnotation and of KwokTaintKey.
	KwokNodeValue = "fake"
	// KwokTaintKey is the taint AddNode puts on fake Nodes, as kwok's own
	// documentation does, so that only workloads that ask for a fake node land
	// on one.
	KwokTaintKey = "kwok.x-k8s.io/node"
)

// KwokToleration tolerates exactly the taint AddNode puts on fake Nodes.
// Workloads in tests carry this and nothing broader: a pod that tolerates
// every taint (operator Exists without a key) would also tolerate the
// unschedulable taint and be placed back on a cordoned node.
func KwokToleration() corev1.Toleration {
	return corev1.Toleration{
		Key:      KwokTaintKey,
		Operator: corev1.TolerationOpEqual,
		Value:    KwokNodeValue,
		Effect:   corev1.TaintEffectNoSchedule,
	}
}

// kwokStageDirs are the stage sets loaded, relative to the module's
// kustomize/stage. node/heartbeat-with-lease is there because kwok then keeps
// a Lease per node (--node-lease-duration-seconds); without heartbeats the
// node lifecycle controller marks the nodes unreachable after its grace
// period and evicts every pod, which would break any test longer than that.
func kwokStageDirs(podStages string) []string {
	return []string{"node/fast", "node/heartbeat-with-lease", "pod/" + podStages}
}

// findKwokModuleDir asks the go command where the kwok module pinned by
// hack/tools/kwok/go.mod lives. Reading the stages from that module at run
// time, instead of keeping copies in this repository, keeps them in step with
// the binary hack/build-tools.sh built from the same go.mod; bumping kwok is a
// one-line change there.
func findKwokModuleDir(ctx context.Context) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("finding hack/tools/kwok: %w; set Options.KwokModuleDir", err)
	}
	toolsDir := filepath.Join(root, "hack", "tools", "kwok")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// `go list -m` reports the directory when the module is in the module
	// cache, which it is once kwok was built; `go mod download` fetches it
	// otherwise.
	for _, args := range [][]string{
		{"list", "-m", "-json", kwokModule},
		{"mod", "download", "-json", kwokModule},
	} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = toolsDir
		// A go.work above the checkout or a vendoring GOFLAGS must not
		// change which kwok the tools module resolves to.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("go %s in %s: %w: %s", strings.Join(args, " "), toolsDir, err, strings.TrimSpace(stderr.String()))
		}
		var mod struct{ Dir string }
		if err := json.Unmarshal(out, &mod); err != nil {
			return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
		}
		if mod.Dir != "" {
			return mod.Dir, nil
		}
	}
	return "", fmt.Errorf("the go command reports no directory for %s in %s", kwokModule, toolsDir)
}

// kwokStagesConfig concatenates the Stage documents of the chosen stage sets
// into one multi-document YAML for kwok --config.
func kwokStagesConfig(moduleDir, podStages string) ([]byte, error) {
	var buf bytes.Buffer
	// One kwok plays the kubelet of every node, with 4 pod workers by
	// default; a real cluster has one kubelet per node, each handling its own
	// pods at once. More workers keep kwok from being the bottleneck of a
	// parallel drain, which would measure kwok instead of the drain.
	buf.WriteString("---\napiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n  podPlayStageParallelism: 32\n  nodePlayStageParallelism: 4\n  nodeLeaseParallelism: 4\n  podsOnNodeSyncParallelism: 1\n")
	for _, rel := range kwokStageDirs(podStages) {
		dir := filepath.Join(moduleDir, "kustomize", "stage", filepath.FromSlash(rel))
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		n := 0
		for _, f := range files {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			if !bytes.Contains(data, []byte("kind: Stage")) {
				continue
			}
			fmt.Fprintf(&buf, "---\n# from %s\n", f)
			buf.Write(bytes.TrimSpace(data))
			buf.WriteString("\n")
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("no kwok Stage files in %s; is %s the sigs.k8s.io/kwok module?", dir, moduleDir)
		}
	}
	return buf.Bytes(), nil
}
