package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/hooks"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestMaintenanceHooks: hooks an outside controller puts on the Node hold a
// NodeMaintenance object's maintenance on the real control plane. A
// pre-drain hook keeps node-1 uncordoned, with its pods, until the test
// removes it; a post-drain hook keeps the object Running after the pods are
// gone, until the test removes it too. On node-2 a hook nobody removes is
// passed over at maintenance.hookBound (3s), with a Warning Event and the
// wait-bound metric.
func TestMaintenanceHooks(t *testing.T) {
	b := newNMBed(t, false)
	c := b.env.Client()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "web", 4, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 4)
	b.addTargets(t)
	preDrain, postDrain := hooks.PreDrain.Prefix()+"backup", hooks.PostDrain.Prefix()+"firmware"
	annotate(t, c, "node-1", map[string]any{preDrain: "velero", postDrain: "fw-operator"})

	agent := startAgent(t, b.env, "node-1", nmFlag)
	agent.WaitReady(t)
	b.create(t, kubevirtGroup, "nm-node-1", "node-1", "hooks test")

	var st *selfdrain.Status
	testenv.WaitFor(t, 2*time.Minute, "the maintenance waiting for its pre-drain hook", func() (bool, error) {
		var err error
		st, err = selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseWaiting && strings.Contains(st.LastError, "pre-drain hooks"), err
	})
	if !strings.HasPrefix(st.LastError, "waiting for pre-drain hooks: backup (velero)") {
		t.Errorf("lastError %q, want it to name the hook and its owner", st.LastError)
	}
	// Held a while longer: still nothing on the node changes.
	time.Sleep(3 * time.Second)
	n := getNode(t, c, "node-1")
	if n.Spec.Unschedulable || testenv.HasTaint(n, testenv.DrainTaint) {
		t.Errorf("node-1 changed while a pre-drain hook held it: unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if pods := podsOn(t, c, b.ns, "node-1"); pods != 4 {
		t.Errorf("%d pods on node-1 while a pre-drain hook held it, want 4", pods)
	}
	t.Logf("held before the drain: %s", st.LastError)

	annotate(t, c, "node-1", map[string]any{preDrain: nil})
	testenv.WaitFor(t, 3*time.Minute, "the drain to end with the pods gone", func() (bool, error) {
		var err error
		st, err = selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
	})
	if pods := podsOn(t, c, b.ns, "node-1"); pods != 0 {
		t.Errorf("%d pods on node-1 after the drain, want none", pods)
	}
	var nm *maintenance.NodeMaintenance
	testenv.WaitFor(t, time.Minute, "the object held Running by its post-drain hook", func() (bool, error) {
		nm = b.get(t, kubevirtGroup, "nm-node-1")
		return nm != nil && strings.Contains(nm.Status.LastError, "post-drain hooks: firmware (fw-operator)"), nil
	})
	if nm.Status.Phase != selfdrain.PhaseRunning {
		t.Errorf("phase %s while the post-drain hook holds, want Running", nm.Status.Phase)
	}
	time.Sleep(3 * time.Second)
	if nm = b.get(t, kubevirtGroup, "nm-node-1"); nm.Status.Phase == selfdrain.PhaseSucceeded {
		t.Errorf("phase Succeeded while the post-drain hook holds: %+v", nm.Status)
	}
	if ev := nodeEvent(t, c, "node-1", maintenance.ReasonPostDrainHooks); !strings.Contains(ev.Message, "firmware (fw-operator)") {
		t.Errorf("Event %s: %s; want it to name the hook", ev.Reason, ev.Message)
	}
	annotate(t, c, "node-1", map[string]any{postDrain: nil})
	testenv.WaitFor(t, time.Minute, "phase Succeeded once the post-drain hook is removed", func() (bool, error) {
		nm = b.get(t, kubevirtGroup, "nm-node-1")
		return nm != nil && nm.Status.Phase == selfdrain.PhaseSucceeded, nil
	})

	t.Run("bound", func(t *testing.T) {
		annotate(t, c, "node-2", map[string]any{hooks.PreDrain.Prefix() + "stuck": "a controller that is gone"})
		agent2 := startAgent(t, b.env, "node-2", "--maintenance-hook-bound=3s")
		agent2.WaitReady(t)
		if _, err := maintenance.RequestMaintenance(t.Context(), kubetest.Wrap(c), "node-2", "hook bound test"); err != nil {
			t.Fatal(err)
		}
		ev := nodeEvent(t, c, "node-2", hooks.ReasonPassed)
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "stuck (a controller that is gone)") || !strings.Contains(ev.Message, "maintenance.hookBound") {
			t.Errorf("Event %s %s: %s; want a Warning naming the hook and the bound", ev.Type, ev.Reason, ev.Message)
		}
		const passedOver = `node_agent_wait_bound_exceeded_total{decision="proceed",wait="maintenance-hooks"}`
		testenv.WaitFor(t, time.Minute, passedOver+" counted", func() (bool, error) {
			return scrape(t, agent2.MetricsAddr, passedOver) == 1, nil
		})
		testenv.WaitFor(t, 2*time.Minute, "node-2 cordoned past its hook's bound", func() (bool, error) {
			return getNode(t, c, "node-2").Spec.Unschedulable, nil
		})
		if _, ok := getNode(t, c, "node-2").Annotations[hooks.PreDrain.Prefix()+"stuck"]; !ok {
			t.Error("the agent removed the hook; only its owner may")
		}
	})
}

// annotate merge-patches node's annotations as an admin; nil removes one.
func annotate(t *testing.T, c kubernetes.Interface, node string, annotations map[string]any) {
	t.Helper()
	if err := mergePatchNode(t, c, node, obj{"metadata": obj{"annotations": annotations}}, false); err != nil {
		t.Fatal(err)
	}
}

// podsOn counts the pods of ns bound to node that are not being deleted.
func podsOn(t *testing.T, c kubernetes.Interface, ns, node string) int {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// nodeEvent is the first Event of reason about node.
func nodeEvent(t *testing.T, c kubernetes.Interface, node, reason string) corev1.Event {
	t.Helper()
	var ev corev1.Event
	testenv.WaitFor(t, 2*time.Minute, node+": Event "+reason, func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		ev = evs.Items[0]
		return true, nil
	})
	return ev
}
