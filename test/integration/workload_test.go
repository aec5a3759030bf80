package integration

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// fullEnv starts every component: drains need the scheduler, the
// ReplicaSet and disruption controllers, and kwok.
func fullEnv(t *testing.T) *testenv.Env {
	t.Helper()
	return testenv.StartForTest(t, testenv.Options{Controllers: true, Scheduler: true, Kwok: true})
}

// slowStartDelay is how long kwok keeps each pod of a
// createSlowStartDeployment Pending before it runs and is Ready.
const slowStartDelay = time.Second

// createSlowStartDeployment is testenv.CreateDeployment with pods that kwok
// starts only slowStartDelay after they are scheduled
// (testenv.PodReadyDelayAnnotation), the replacements of evicted pods too.
// Under a PodDisruptionBudget that allows one disruption at a time, each
// eviction after the first waits until the replacement of the pod before it
// is Ready, as a real drain waits for each new pod to start: draining n such
// pods takes at least (n-1)*slowStartDelay however fast the machine is, which
// leaves time to stop the agent mid-drain at a known point. Every other pod
// keeps kwok's fast lifecycle.
func createSlowStartDeployment(t *testing.T, c kubernetes.Interface, ns, name string, replicas int32, preferNode string) {
	t.Helper()
	d := testenv.NewDeployment(ns, name, replicas, preferNode)
	d.Spec.Template.Annotations = map[string]string{testenv.PodReadyDelayAnnotation: slowStartDelay.String()}
	if _, err := c.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func nodeStatus(t *testing.T, c kubernetes.Interface, name string) *selfdrain.Status {
	t.Helper()
	st, err := selfdrain.ParseStatus(getNode(t, c, name))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func nodeCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == selfdrain.ConditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// cli runs `node-agent maintenance ...` against env.
func cli(t *testing.T, env *testenv.Env, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(agentBinary, append([]string{"maintenance"}, append(args, "--kubeconfig", env.KubeconfigPath())...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// scrape returns the value of the metric line that starts with prefix.
func scrape(t *testing.T, addr, prefix string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, prefix)), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}
