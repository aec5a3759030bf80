package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/confinement"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestRealNode is issue 10's acceptance: the DaemonSet from deploy/, changed
// only by the image name, on a real kubelet with containerd and runc.
func TestRealNode(t *testing.T) {
	b := newBed(t)
	t.Logf("image %s %s, archive %.1f MiB", b.image.Name, b.image.Digest, float64(b.image.ArchiveBytes)/(1<<20))
	b.applyDeploy(t)
	b.startCoordinator(t) // the drain's slot

	if !t.Run("pod", b.testPod) {
		t.FailNow()
	}
	t.Run("identity", b.testIdentity)
	t.Run("coordinator pod", b.testCoordinatorPod)
	t.Run("usage", b.testUsage)
	t.Run("drain", b.testDrain)
}

// testPod: the agent's pod is Running and Ready (its probes pass), and the
// Node's CPU labels come from libvirt inside the container, equal to what
// `node-agent labels` prints in the image's root filesystem for the same
// virt type.
func (b *bed) testPod(t *testing.T) {
	pod := b.agentPod(t, 3*time.Minute, "")
	var started time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "node-agent" && cs.State.Running != nil {
			started = cs.State.Running.StartedAt.Time
		}
	}
	t.Logf("agent pod %s Running and Ready: %s", pod.Name, containerStates(pod))

	want := b.imageLabels(t, false)
	if _, err := os.Stat("/dev/kvm"); err == nil {
		if withKVM := b.imageLabels(t, true); !maps.Equal(withKVM, want) {
			t.Logf("with the host's /dev/kvm, `node-agent labels` in the image prints these labels instead (- with /dev/kvm, + without), which the pod, without /dev/kvm, cannot write: %v", testenv.DiffLabels(withKVM, want))
		}
	}
	if !hasPrefix(want, kubevirtlabels.CPUModelMigrationLabelPrefix) {
		t.Fatalf("`node-agent labels` in the image printed no %s labels; the comparison would prove nothing", kubevirtlabels.CPUModelMigrationLabelPrefix)
	}
	var got map[string]string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		node, err := b.c.CoreV1().Nodes().Get(t.Context(), realNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = testenv.OwnedLabels(node.Labels)
		if maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Node's labels never equalled `node-agent labels` in the image without /dev/kvm (- image only, + Node only): %v",
				testenv.DiffLabels(want, got))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Container start times are in whole seconds.
	t.Logf("time from the agent container's start (%s) to the Node's %d CPU labels: %s (%d of them cpu-model-migration)",
		started.Format(time.TimeOnly), len(got), time.Since(started).Round(time.Second), countPrefix(got, kubevirtlabels.CPUModelMigrationLabelPrefix))

	// The pod has run a while; its liveness probe has not restarted it.
	pod, err := b.c.CoreV1().Pods(agentNS).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			last := ""
			if term := cs.LastTerminationState.Terminated; term != nil {
				last = fmt.Sprintf("; the last run ended with exit code %d, %s: %s", term.ExitCode, term.Reason, term.Message)
			}
			t.Errorf("container %s restarted %d times: %s%s", cs.Name, cs.RestartCount, containerStates(pod), last)
		}
	}
}

// imageLabels runs `node-agent labels` in the image's root filesystem
// (testenv.NewImageContainer), on the libvirt and QEMU the pod has, with or
// without the host's /dev/kvm. The DaemonSet mounts no /dev/kvm unless the
// kvm component is added, so the pod's "auto" picks virt type qemu, as the
// container without kvm does.
func (b *bed) imageLabels(t *testing.T, kvm bool) map[string]string {
	t.Helper()
	c := testenv.NewImageContainer(t, b.image, kvm)
	labels, _, err := testenv.ImageLabels(t.Context(), c, "--state-dir", "/var/lib/node-agent")
	if err != nil {
		t.Fatal(err)
	}
	return labels
}

// testIdentity: the agent's requests carry the token the kubelet projected
// (the audit log shows the node name bound into it), and the admission
// policy refuses a change to another Node made with that very token, read
// out of the container.
func (b *bed) testIdentity(t *testing.T) {
	pod := b.agentPod(t, time.Minute, "")
	events := b.auditEvents(t)
	var n int
	verbs := map[string]int{}
	for _, e := range events {
		if e.User.Username != agentUser {
			continue
		}
		n++
		verbs[e.Verb]++
		if got := e.User.Extra[nodeNameKey]; !slices.Equal(got, []string{realNode}) {
			t.Errorf("%s %s by %s carries %s=%v, want [%s]", e.Verb, e.RequestURI, agentUser, nodeNameKey, got, realNode)
		}
		// The start check's dry runs (pkg/confinement) are checked below.
		if confinement.IsProbe(e.RequestURI) {
			continue
		}
		if c := e.Code(); c == 401 || c == 403 || c == 422 {
			t.Errorf("%s %s by the agent was refused: %d", e.Verb, e.RequestURI, e.Code())
		}
	}
	if n == 0 {
		t.Fatalf("the audit log has no request of %s", agentUser)
	}
	t.Logf("audit log: %d requests of %s (by verb: %v), each with %s=%s", n, agentUser, verbs, nodeNameKey, realNode)
	var agents []testenv.AuditEvent
	for _, e := range events {
		if e.User.Username == agentUser {
			agents = append(agents, e)
		}
	}
	if allowed, refused, err := testenv.CheckConfinementProbes(agents); err != nil {
		t.Error(err)
	} else {
		t.Logf("the agent's start check: %d dry runs allowed before the policy took effect, %d refused by it", allowed, refused)
	}

	pid, err := b.node.ContainerPID(t.Context(), agentNS, pod.Name, "node-agent")
	if err != nil {
		t.Fatal(err)
	}
	// /proc/PID/root is the container's own root: this is the file the
	// kubelet projected into it.
	// The pod mounts it at /var/run/secrets/...; in the image /var/run is a
	// symlink to /run, which /proc/PID/root would resolve against the
	// host's root, not the container's.
	token, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/run/secrets/kubernetes.io/serviceaccount/token", pid))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(b.env.TokenConfig(strings.TrimSpace(string(token))))
	if err != nil {
		t.Fatal(err)
	}
	label := func(node string) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, kubevirtlabels.CPUModelLabelPrefix+"Identity-Test")
		_, err := c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := label(realNode); err != nil {
		t.Errorf("the container's token may not label its own Node (dry run): %v", err)
	}
	err = label(kwokNode)
	if err == nil {
		t.Fatalf("the container's token labelled %s, another Node", kwokNode)
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		t.Fatalf("labelling %s with the container's token: %v, want a refusal by admission", kwokNode, err)
	}
	if !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("the refusal does not come from the admission policy: %v", err)
	}
	t.Logf("the container's token, on %s: refused: %v", kwokNode, err)

	// Pods (issue 22): the token reaches pods only as its own node, so a
	// pod of the other node is out of its reach, with impersonation or
	// without. Dry runs: nothing would be evicted even if one were allowed.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "identity-", Namespace: agentNS},
		Spec: corev1.PodSpec{NodeName: kwokNode, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}},
			Tolerations: []corev1.Toleration{testenv.KwokToleration()}}}
	other, err = b.env.Client().CoreV1().Pods(agentNS).Create(t.Context(), other, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = b.env.Client().CoreV1().Pods(agentNS).Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	}()
	evict := func(c kubernetes.Interface) error {
		return c.PolicyV1().Evictions(agentNS).Evict(t.Context(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: other.Name, Namespace: agentNS},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
	}
	asNode := func(node string) kubernetes.Interface {
		c, err := kubernetes.NewForConfig(podaccess.NodeConfig(b.env.TokenConfig(strings.TrimSpace(string(token))), node))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		what string
		c    kubernetes.Interface
		want string
	}{
		{"without impersonation", c, `cannot create resource "pods/eviction"`},
		{"as " + realNode, asNode(realNode), "can only evict pods with spec.nodeName set to itself"},
		{"as " + kwokNode, asNode(kwokNode), "cannot impersonate-on:arbitrary-node:create"},
	} {
		err := evict(tc.c)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("the container's token evicting %s's pod %s: %v, want 403 with %q", kwokNode, tc.what, err, tc.want)
			continue
		}
		t.Logf("the container's token evicting %s's pod %s: refused: %v", kwokNode, tc.what, err)
	}
}

// testDrain: maintenance by annotation drains real pods (a Deployment with a
// PodDisruptionBudget) off the real node in a drain slot the coordinator
// granted, while the agent's own pod is deleted mid-drain; the new pod
// resumes the drain in the same slot and completes it, and `maintenance
// stop` uncordons.
func (b *bed) testDrain(t *testing.T) {
	ctx := t.Context()
	const replicas = 6
	if _, err := b.env.CreateNamespace(ctx, "work"); err != nil {
		t.Fatal(err)
	}
	dep := testenv.NewDeployment("work", "web", replicas, realNode)
	spec := &dep.Spec.Template.Spec
	spec.Containers[0].Image = testpodImage
	spec.Containers[0].ImagePullPolicy = corev1.PullNever
	spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	spec.DNSPolicy = corev1.DNSDefault // no cluster DNS here
	// The kwok node that takes the replacements is cordoned until every
	// pod has landed on the real node.
	b.cordon(t, kwokNode, true)
	if _, err := b.c.AppsV1().Deployments("work").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "work"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}
	if _, err := b.c.PolicyV1().PodDisruptionBudgets("work").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the Deployment's pods Ready on "+realNode, func() (bool, string) {
		pods, err := testenv.PodsOn(ctx, b.c, "", realNode)
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range pods {
			if pods[i].Namespace == "work" && testenv.PodReady(&pods[i]) {
				ready++
			}
		}
		return ready == replicas, fmt.Sprintf("%d of %d Ready", ready, replicas)
	})
	b.cordon(t, kwokNode, false)

	// The budget's floor, sampled through the whole drain.
	minReady := replicas
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			pods, err := b.c.CoreV1().Pods("work").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				continue
			}
			ready := 0
			for i := range pods.Items {
				if pods.Items[i].DeletionTimestamp == nil && testenv.PodReady(&pods.Items[i]) {
					ready++
				}
			}
			mu.Lock()
			minReady = min(minReady, ready)
			mu.Unlock()
		}
	})

	began := time.Now()
	b.agent(t, "maintenance", "start", realNode, "--reason", "real-node test")
	old := b.agentPod(t, time.Minute, "")
	waitFor(t, 2*time.Minute, "the drain to be under way", func() (bool, string) {
		st := b.status(t)
		return st != nil && st.Phase == selfdrain.PhaseRunning && len(st.PendingPods) > 0, fmt.Sprintf("%+v", st)
	})
	st := b.status(t)
	slot, err := b.slotView(ctx, realNode)
	if err != nil || !slot.held(realNode) || slot.request.Purpose != slots.PurposeMaintenance {
		t.Errorf("draining, but the drain slot is not held for a maintenance: %s %v", slot, err)
	}
	if err := b.c.CoreV1().Pods(agentNS).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted agent pod %s mid-drain (%d%% progress, %d pods pending)", old.Name, st.DrainProgress, len(st.PendingPods))
	fresh := b.agentPod(t, 3*time.Minute, old.Name)
	t.Logf("new agent pod %s Ready after %s", fresh.Name, time.Since(began).Round(time.Second))
	waitFor(t, 5*time.Minute, "the drain to succeed", func() (bool, string) {
		st := b.status(t)
		return st != nil && st.Phase == selfdrain.PhaseSucceeded, fmt.Sprintf("%+v", st)
	})
	close(stop)
	wg.Wait()
	st = b.status(t)
	t.Logf("drain Succeeded %s after maintenance start: totalPods %d, evictionPods %d; minimum Ready web pods during it: %d of %d",
		time.Since(began).Round(time.Second), st.TotalPods, st.EvictionPods, minReady, replicas)
	if minReady < replicas-1 {
		t.Errorf("the PodDisruptionBudget was broken: %d Ready pods at one point, floor %d", minReady, replicas-1)
	}
	if !st.StartTime.Equal(&metav1.Time{}) && st.StartTime.Time.After(began.Add(2*time.Second)) {
		t.Errorf("the new agent started a new drain (startTime %s) instead of resuming the one begun at %s", st.StartTime, began)
	}
	// The drain gives its slot back once it is over, maintenance or not.
	waitFor(t, 30*time.Second, "the drain slot given back", func() (bool, string) {
		v, err := b.slotView(ctx, realNode)
		if err != nil {
			return false, err.Error()
		}
		return v.request == nil && v.grant == nil && v.lease == nil, v.String()
	})
	if slot.request != nil {
		t.Logf("drained in the slot granted for request %s", slot.request.ID)
	}
	// Succeeded means every evicted pod is gone or finished; the kubelet
	// deletes a finished pod's object a moment later.
	pods, err := testenv.PodsOn(ctx, b.c, "", realNode)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Namespace == "work" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			t.Errorf("pod %s still %s on %s after the drain", p.Name, p.Status.Phase, realNode)
		}
	}
	waitFor(t, time.Minute, "the evicted pods' objects to go", func() (bool, string) {
		pods, err := testenv.PodsOn(ctx, b.c, "", realNode)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, p := range pods {
			if p.Namespace == "work" {
				n++
			}
		}
		return n == 0, fmt.Sprintf("%d left", n)
	})
	waitFor(t, time.Minute, fmt.Sprintf("%d web pods Ready on %s", replicas, kwokNode), func() (bool, string) {
		pods, err := testenv.PodsOn(ctx, b.c, "", kwokNode)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for i := range pods {
			if pods[i].Namespace == "work" && testenv.PodReady(&pods[i]) {
				n++
			}
		}
		return n == replicas, fmt.Sprintf("%d Ready", n)
	})
	node, err := b.c.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !node.Spec.Unschedulable || !testenv.HasTaint(node, testenv.DrainTaint) {
		t.Errorf("%s drained but unschedulable=%t, taints %v", realNode, node.Spec.Unschedulable, node.Spec.Taints)
	}

	b.agent(t, "maintenance", "stop", realNode, "--wait")
	node, err = b.c.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.Unschedulable || testenv.HasTaint(node, testenv.DrainTaint) {
		t.Errorf("after maintenance stop: unschedulable=%t, taints %v", node.Spec.Unschedulable, node.Spec.Taints)
	}
}

func (b *bed) cordon(t *testing.T, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := b.c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (b *bed) agent(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(b.bin, "node-agent"), append(args, "--kubeconfig", b.env.KubeconfigPath())...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node-agent %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (b *bed) status(t *testing.T) *selfdrain.Status {
	t.Helper()
	node, err := b.c.CoreV1().Nodes().Get(t.Context(), realNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := selfdrain.ParseStatus(node)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitFor polls check every 200 ms for up to timeout; check's string says
// what it saw, and the failure names the last one.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := testenv.Poll(ctx, 200*time.Millisecond, what, func() (bool, error) {
		if ok, state := check(); !ok {
			return false, errors.New(state)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func hasPrefix(m map[string]string, prefix string) bool { return countPrefix(m, prefix) > 0 }

func countPrefix(m map[string]string, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
