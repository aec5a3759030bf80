package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/node-agent/node-agent/pkg/ownnode"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestRebootPendingTaint: agents with the reboot controller on, running as
// the shipped ServiceAccount (so under deploy/'s admission policy), on kwok
// nodes. While node-1's reboot waits for its window, node-1 carries
// node-agent.io/reboot-pending:PreferNoSchedule, beside the taints that are
// not the agent's, and kube-scheduler places a new pod on node-2 instead;
// once the reboot is called off (the sentinel removed) the taint is gone.
// An agent that starts where no reboot is needed removes a taint an earlier
// run left, and one with reboot.preferNoScheduleTaint off removes it while
// the reboot waits.
func TestRebootPendingTaint(t *testing.T) {
	b := newDrainBed(t)
	c := b.env.Client()
	ctx := t.Context()
	if err := b.env.AddNodes(ctx, []string{"node-2"}); err != nil {
		t.Fatal(err)
	}
	// Outside the window until tomorrow: the reboot waits and never asks
	// the coordinator (which startAgent runs) for a slot.
	tomorrow := strings.ToLower(time.Now().UTC().Add(24 * time.Hour).Weekday().String()[:3])
	waiting := []string{"--reboot-enabled=true", "--reboot-check-interval=1s", "--shutdown-enabled=false",
		"--reboot-window-days=" + tomorrow, "--reboot-window-start=02:00", "--reboot-window-end=04:00"}
	sentinel := filepath.Join(t.TempDir(), "reboot-required")
	start := func(t *testing.T, args ...string) {
		a := startAgent(t, b.env, "node-1", append(append([]string{"--reboot-sentinel-file=" + sentinel}, waiting...), args...)...)
		a.WaitReady(t)
	}
	others := getNode(t, c, "node-1").Spec.Taints
	if len(others) == 0 {
		t.Fatal("node-1 has no taint of someone else's: the test would not show that they stay")
	}

	t.Run("while the reboot waits, and gone once it is called off", func(t *testing.T) {
		if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		start(t)
		waitRebootReason(t, c, "node-1", string(reboot.OutsideWindow))
		waitPendingTaint(t, c, "node-1", true)
		keepsOthers(t, c, "node-1", others)

		// A new pod that tolerates only kwok's taint may run on either
		// node; the scheduler scores node-1 down for the PreferNoSchedule
		// taint it does not tolerate.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "newcomer", Namespace: b.ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}},
				Tolerations: []corev1.Toleration{testenv.KwokToleration()},
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-1", "node-2"}}}}}}}}}}
		if _, err := c.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var on string
		testenv.WaitFor(t, time.Minute, "pod newcomer scheduled", func() (bool, error) {
			p, err := c.CoreV1().Pods(b.ns).Get(ctx, pod.Name, metav1.GetOptions{})
			on = p.Spec.NodeName
			return err == nil && on != "", err
		})
		if on != "node-2" {
			t.Errorf("pod newcomer scheduled on %s, want node-2: node-1 waits for a reboot", on)
		}

		if err := os.Remove(sentinel); err != nil {
			t.Fatal(err)
		}
		waitRebootReason(t, c, "node-1", string(reboot.NotNeeded))
		waitPendingTaint(t, c, "node-1", false)
		keepsOthers(t, c, "node-1", others)
	})

	t.Run("an earlier run's taint removed at start", func(t *testing.T) {
		addPendingTaint(t, c, "node-1")
		start(t)
		waitRebootReason(t, c, "node-1", string(reboot.NotNeeded))
		waitPendingTaint(t, c, "node-1", false)
		keepsOthers(t, c, "node-1", others)
	})

	t.Run("off: removed while the reboot waits", func(t *testing.T) {
		if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		addPendingTaint(t, c, "node-1")
		start(t, "--reboot-prefer-no-schedule-taint=false")
		waitRebootReason(t, c, "node-1", string(reboot.OutsideWindow))
		waitPendingTaint(t, c, "node-1", false)
		keepsOthers(t, c, "node-1", others)
	})
}

func waitPendingTaint(t *testing.T, c kubernetes.Interface, node string, want bool) {
	t.Helper()
	what := node + " without " + reboot.PendingTaintKey
	if want {
		what = node + " tainted " + reboot.PendingTaintKey + ":" + string(reboot.PendingTaintEffect)
	}
	testenv.WaitFor(t, time.Minute, what, func() (bool, error) {
		return ownnode.HasTaint(getNode(t, c, node), reboot.PendingTaintKey, reboot.PendingTaintEffect) == want, nil
	})
}

// keepsOthers: every taint node had that is not the agent's is still there.
func keepsOthers(t *testing.T, c kubernetes.Interface, node string, others []corev1.Taint) {
	t.Helper()
	n := getNode(t, c, node)
	for _, o := range others {
		if !ownnode.HasTaint(n, o.Key, o.Effect) {
			t.Errorf("%s lost the taint %s:%s, which is not the agent's: %v", node, o.Key, o.Effect, n.Spec.Taints)
		}
	}
}

// addPendingTaint puts the taint on node as an agent's earlier run would
// have left it, with the admin's client.
func addPendingTaint(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, c, node)
		ownnode.AddTaint(n, corev1.Taint{Key: reboot.PendingTaintKey, Effect: reboot.PendingTaintEffect})
		_, err := c.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
