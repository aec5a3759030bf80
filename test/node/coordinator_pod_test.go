package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/test/testenv"
)

// coordinatorDeployment is deploy/coordinator.yaml's Deployment.
const coordinatorDeployment = "node-agent-coordinator"

// testCoordinatorPod: the coordinator's Deployment, as deploy/ ships it,
// runs node-agent-coordinator from the image on the real kubelet: the pod
// there turns Ready (its probes answer), its process runs as the
// non-root uid of the pod's securityContext under a read-only root, and with
// the token the kubelet mounted it takes part in the leader election without
// a refused request.
func (b *bed) testCoordinatorPod(t *testing.T) {
	var pod *corev1.Pod
	var last string
	waitFor(t, 3*time.Minute, "a Ready node-agent-coordinator pod on "+realNode, func() (bool, string) {
		pods, err := b.c.CoreV1().Pods(agentNS).List(t.Context(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=node-agent-coordinator", FieldSelector: "spec.nodeName=" + realNode})
		if err != nil {
			return false, err.Error()
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if testenv.PodReady(p) {
				pod = p
				return true, ""
			}
			last = fmt.Sprintf("%s %s %s", p.Name, p.Status.Phase, containerStates(p))
		}
		return false, last
	})
	t.Logf("coordinator pod %s Running and Ready: %s", pod.Name, containerStates(pod))

	pid, err := b.node.ContainerPID(t.Context(), agentNS, pod.Name, "node-agent-coordinator")
	if err != nil {
		t.Fatal(err)
	}
	status := readKV(t, fmt.Sprintf("/proc/%d/status", pid))
	uid := strings.Fields(status["Uid"])
	if want := fmt.Sprint(*pod.Spec.SecurityContext.RunAsUser); len(uid) == 0 || uid[0] != want {
		t.Errorf("node-agent-coordinator runs as uid %v, want %s", uid, want)
	}
	if caps := status["CapEff"]; strings.Trim(caps, "0") != "" {
		t.Errorf("node-agent-coordinator has effective capabilities %s, want none", caps)
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mounts", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[1] == "/" && !strings.HasPrefix(f[3], "ro") {
			t.Errorf("node-agent-coordinator's root is mounted %s, want read-only", f[3])
		}
	}

	// Its log, as the kubelet keeps it (the apiserver cannot reach this
	// kubelet for `kubectl logs`): it started from the mounted ConfigMap,
	// reached the apiserver with its own token and either leads or knows
	// who does.
	var log string
	waitFor(t, time.Minute, "the coordinator pod in the leader election", func() (bool, string) {
		files, _ := filepath.Glob(filepath.Join(b.node.Dir(), "pod-logs", agentNS+"_"+pod.Name+"_*", "node-agent-coordinator", "*.log"))
		if len(files) == 0 {
			return false, "no log file yet"
		}
		raw, err := os.ReadFile(files[0])
		if err != nil {
			return false, err.Error()
		}
		log = string(raw)
		return strings.Contains(log, "Leading: deciding the drain slots") || strings.Contains(log, "Another replica leads"), lastLine(log)
	})
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "forbidden") || strings.Contains(l, "Unauthorized") {
			t.Errorf("the coordinator pod was refused a request: %s", l)
		}
	}
	t.Logf("coordinator pod %s (uid %s): %s", pod.Name, uid[0], lastLine(log))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
