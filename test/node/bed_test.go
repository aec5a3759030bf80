// Package node runs the shipped DaemonSet (`kubectl kustomize deploy/`,
// changed only by the image name) on a real node: a kubelet v1.36 with
// containerd and runc, registered with the test control plane, running
// node-agent's image as `make image` builds it.
//
// `make node-e2e` runs these tests alone; `make test` runs them too. Under
// NODE_AGENT_INTEGRATION=1 a missing prerequisite fails them; elsewhere they
// skip.
package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/internal/ociimage"
	"github.com/node-agent/node-agent/test/testenv"
)

const (
	realNode     = "node-real"
	kwokNode     = "kwok-1"
	agentNS      = "node-agent"
	agentUser    = "system:serviceaccount:node-agent:node-agent"
	pauseImage   = "localhost/pause:test"
	testpodImage = "localhost/testpod:test"
	nodeNameKey  = "authentication.kubernetes.io/node-name"
)

// The agent's host paths in deploy/daemonset.yaml; the test removes those
// that the kubelet created for it (DirectoryOrCreate).
var hostPaths = []string{"/var/lib/node-agent", "/run/dbus", "/etc/systemd/logind.conf.d", "/run/libvirt"}

// bed is one control plane with one real node and one kwok node, and
// deploy/ applied.
type bed struct {
	env      *testenv.Env
	c        kubernetes.Interface
	node     *testenv.RealNode
	root     string // repository root
	bin      string
	image    testenv.ImageSummary
	auditLog string
}

func requireOrSkip(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(testenv.IntegrationEnv) == "1" {
		t.Fatalf("%v (a failure, not a skip, because %s=1)", err, testenv.IntegrationEnv)
	}
	t.Skipf("%v (set %s=1 to fail instead of skipping)", err, testenv.IntegrationEnv)
}

// newBed starts the control plane and the real node.
func newBed(t *testing.T) *bed {
	b := setupBed(t)
	pause, testpod := buildTestImages(t, t.TempDir())
	began := time.Now()
	node, err := b.env.StartRealNode(t.Context(), testenv.RealNodeOptions{
		Name:       realNode,
		PauseImage: pauseImage,
		Images:     []string{pause, testpod, filepath.Join(b.bin, "node-agent-image.tar")},
	})
	if err != nil {
		t.Fatalf("starting the real node: %v", err)
	}
	b.node = node
	// A kwok node beside it: another Node for the admission test, and room
	// for the drained pods' replacements.
	if err := b.env.AddNode(t.Context(), kwokNode); err != nil {
		t.Fatal(err)
	}
	t.Logf("real node %s Ready at %s after %s (kubelet log %s)", realNode, node.IP(), time.Since(began).Round(time.Millisecond), node.KubeletLog())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last lines of the kubelet log ---\n%s", testenv.TailFile(node.KubeletLog(), 60))
			t.Logf("--- last lines of the containerd log ---\n%s", testenv.TailFile(node.ContainerdLog(), 30))
		}
		// Pods first, so the kubelet tears their sandboxes down itself.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		_ = b.c.AppsV1().DaemonSets(agentNS).Delete(ctx, "node-agent", metav1.DeleteOptions{})
		_ = b.c.AppsV1().Deployments(agentNS).Delete(ctx, coordinatorDeployment, metav1.DeleteOptions{})
		_ = b.c.CoreV1().Namespaces().Delete(ctx, "work", metav1.DeleteOptions{})
		waitNoPods(ctx, b.c, realNode)
		if err := node.Stop(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("stopping the real node: %v", err)
		}
	})
	return b
}

// setupBed checks the prerequisites and starts the control plane, with an
// audit log of the agent's requests.
func setupBed(t *testing.T) *bed {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{root: root, bin: filepath.Join(root, "bin")}
	if d := os.Getenv(testenv.BinDirEnv); d != "" {
		b.bin = d
	}
	opts := testenv.DefaultOptions()
	opts.BinDir = b.bin
	requireOrSkip(t, testenv.CheckBinaries(opts, testenv.BinKubectl, testenv.BinKubelet))
	requireOrSkip(t, testenv.CheckRealNode(opts))
	b.image = testenv.RequireImageRootfs(t)
	if _, err := os.Stat(filepath.Join(b.bin, "node-agent")); err != nil {
		requireOrSkip(t, fmt.Errorf("bin/node-agent: %w; run make build", err))
	}

	// The kubelet creates the agent's DirectoryOrCreate host paths; remove
	// the ones that were not there before.
	var created []string
	for _, p := range hostPaths {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			created = append(created, p)
		}
	}
	t.Cleanup(func() {
		for _, p := range created {
			_ = os.RemoveAll(p)
		}
	})

	if opts.APIServerArgs, b.auditLog, err = testenv.AuditLog(t.TempDir(), testenv.UserAuditPolicy(agentUser)); err != nil {
		t.Fatal(err)
	}
	b.env = testenv.StartForTest(t, opts)
	b.c = b.env.Client()

	return b
}

// buildTestImages builds the pause (sandbox) image and the workload image,
// both around test/images/pause, and returns their archives. No registry
// is reachable here.
func buildTestImages(t *testing.T, dir string) (pause, testpod string) {
	t.Helper()
	layer := filepath.Join(dir, "pause-layer")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(layer, "pause"), "./test/images/pause")
	cmd.Dir, _ = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building test/images/pause: %v\n%s", err, out)
	}
	write := func(name string, entrypoint ...string) string {
		out := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := ociimage.Write(f, ociimage.Spec{Name: name, Layers: []string{layer}, Entrypoint: entrypoint, Epoch: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return write(pauseImage, "/pause"), write(testpodImage, "/pause", "--listen=:8080", "--term-delay=10s")
}

// applyDeploy renders deploy/ with kustomize, changed only by the image
// name (kustomize's images:), and applies it.
func (b *bed) applyDeploy(t *testing.T) { b.applyDeployWith(t, nil, nil) }

// applyDeployWith is applyDeploy with deploy/'s components (paths relative
// to deploy/, such as components/reboot) and extra arguments of the agent's
// container, as an admin's overlay adds them.
func (b *bed) applyDeployWith(t *testing.T, components, args []string) {
	overlay := filepath.Join(t.TempDir(), "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(overlay, filepath.Join(b.root, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	newName, newTag, _ := strings.Cut(b.image.Name, ":")
	if i := strings.LastIndex(b.image.Name, ":"); i > strings.LastIndex(b.image.Name, "/") {
		newName, newTag = b.image.Name[:i], b.image.Name[i+1:]
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\nimages:\n  - name: node-agent\n    newName: %s\n    newTag: %q\n", rel, newName, newTag)
	if len(components) > 0 {
		k += "components:\n"
		for _, c := range components {
			k += fmt.Sprintf("  - %s/%s\n", rel, c)
		}
	}
	// The coordinator's pods may also go to the kwok node: a drain of the
	// real node evicts its coordinator pod, and its PodDisruptionBudget
	// lets the second go only once the first one's replacement runs, which
	// the cordoned real node cannot take.
	k += "patches:\n  - target:\n      kind: Deployment\n      name: " + coordinatorDeployment + "\n    patch: |-\n" +
		"      - op: add\n        path: /spec/template/spec/tolerations\n        value: [{key: " + testenv.KwokTaintKey + ", value: " + testenv.KwokNodeValue + ", effect: NoSchedule}]\n"
	if len(args) > 0 {
		k += "  - target:\n      kind: DaemonSet\n      name: node-agent\n    patch: |-\n"
		for _, a := range args {
			k += fmt.Sprintf("      - op: add\n        path: /spec/template/spec/containers/0/args/-\n        value: %q\n", a)
		}
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	manifests := b.kubectl(t, nil, "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay)
	b.kubectl(t, manifests, "apply", "-f", "-")
}

func (b *bed) kubectl(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(filepath.Join(b.bin, testenv.BinKubectl), append([]string{"--kubeconfig", b.env.KubeconfigPath()}, args...)...)
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// agentPod waits for the agent's pod on the real node to be Running and
// Ready, other than the one named not, and returns it.
func (b *bed) agentPod(t *testing.T, timeout time.Duration, not string) *corev1.Pod {
	t.Helper()
	return b.agentPodOn(t, realNode, timeout, not)
}

func (b *bed) agentPodOn(t *testing.T, node string, timeout time.Duration, not string) *corev1.Pod {
	t.Helper()
	var last string
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pods, err := b.c.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=node-agent", FieldSelector: "spec.nodeName=" + node})
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Name == not || p.DeletionTimestamp != nil {
					continue
				}
				if p.Status.Phase == corev1.PodRunning && testenv.PodReady(p) {
					return p
				}
				last = fmt.Sprintf("%s %s %s", p.Name, p.Status.Phase, containerStates(p))
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("no Ready agent pod on %s within %s; last seen: %s", node, timeout, last)
	return nil
}

func containerStates(p *corev1.Pod) string {
	var out []string
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			out = append(out, fmt.Sprintf("%s waiting %s: %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
		case cs.State.Terminated != nil:
			out = append(out, fmt.Sprintf("%s terminated %s (exit %d): %s", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message))
		case cs.State.Running != nil:
			out = append(out, fmt.Sprintf("%s running, ready=%t, restarts %d", cs.Name, cs.Ready, cs.RestartCount))
		}
	}
	return strings.Join(out, "; ")
}

func waitNoPods(ctx context.Context, c kubernetes.Interface, node string) {
	for ctx.Err() == nil {
		pods, err := testenv.PodsOn(ctx, c, "", node)
		if err == nil && len(pods) == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (b *bed) auditEvents(t *testing.T) []testenv.AuditEvent {
	t.Helper()
	audit := testenv.NewAuditReader(b.auditLog, testenv.AuditStageResponseComplete)
	if err := audit.Read(); err != nil {
		t.Fatal(err)
	}
	return audit.Events()
}
