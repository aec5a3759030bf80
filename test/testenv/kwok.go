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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
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

// StageDelayAnnotation is the annotation that delays, for the one object
// carrying it, kwok's Stage of that name: its value is a Go duration ("2s")
// or an RFC 3339 time to wait for. It is kwok's own convention, which the
// Stages of kwok's general and chaos sets honour (for example
// "pod-delete.stage.kwok.x-k8s.io/delay"); the harness makes the fast pod
// Stages honour it too (see withDelayFromAnnotation).
func StageDelayAnnotation(stage string) string {
	return stage + ".stage.kwok.x-k8s.io/delay"
}

var (
	// PodReadyDelayAnnotation delays kwok's pod-ready Stage: a pod carrying
	// it stays Pending, not Ready, for that long after it is scheduled. The
	// replacements of evicted pods carry it too when it is in their
	// template, so a drain that a PodDisruptionBudget allows one disruption
	// at a time evicts at most one pod per that delay, as a real drain waits
	// for each replacement to start.
	PodReadyDelayAnnotation = StageDelayAnnotation("pod-ready")
	// PodDeleteDelayAnnotation delays kwok's pod-delete Stage: a pod carrying
	// it stays Terminating for that long after its deletion is asked for, as
	// a real pod does while its containers shut down.
	PodDeleteDelayAnnotation = StageDelayAnnotation("pod-delete")
)

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
			data, changed, err := withDelayFromAnnotation(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			fmt.Fprintf(&buf, "---\n# from %s\n", f)
			if changed {
				buf.WriteString("# with spec.delay added by testenv: see StageDelayAnnotation\n")
			}
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

// withDelayFromAnnotation gives a Pod Stage that has no delay of its own
// the delay kwok's general Stages have: the duration in the pod's
// StageDelayAnnotation(name), and none without it. Other documents, and Stages
// with a delay (the general set's, which already read the same annotation),
// are returned as they are, with changed false.
//
// Only the delay changes: the Stage keeps its name, selector and weight, so
// kwok picks among the same Stages for the same pods as before and no second
// Stage can match a delayed pod. A pod without the annotation gets delay 0,
// which kwok's pod controller queues exactly as a Stage without a delay (the
// annotation's value is read with durationFrom; a missing value falls back
// to durationMilliseconds, unset here, so 0).
func withDelayFromAnnotation(doc []byte) (out []byte, changed bool, err error) {
	var stage map[string]any
	if err := yaml.Unmarshal(doc, &stage); err != nil {
		return nil, false, err
	}
	if stage["kind"] != "Stage" {
		return doc, false, nil
	}
	name, _, _ := unstructured.NestedString(stage, "metadata", "name")
	kind, _, _ := unstructured.NestedString(stage, "spec", "resourceRef", "kind")
	_, hasDelay, _ := unstructured.NestedFieldNoCopy(stage, "spec", "delay")
	if name == "" || kind != "Pod" || hasDelay {
		return doc, false, nil
	}
	expr := fmt.Sprintf(".metadata.annotations[%q]", StageDelayAnnotation(name))
	delay := map[string]any{"durationFrom": map[string]any{"jq": map[string]any{"expression": expr}}}
	if err := unstructured.SetNestedField(stage, delay, "spec", "delay"); err != nil {
		return nil, false, err
	}
	out, err = yaml.Marshal(stage)
	return out, true, err
}
