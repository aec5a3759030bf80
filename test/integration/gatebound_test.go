package integration

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestMaintenanceGateBound: a tenant's VMI with evictionStrategy None holds
// its node's maintenance in the VM gate (drain.vmWithoutTarget wait) only
// until maintenance.gateBound (3s here). Then, with
// maintenance.onGateBound wait, the maintenance keeps waiting and its
// status says so; with proceed the drain starts with the VM still there.
// Either way a Warning Event on the Node names the VM and the decision.
func TestMaintenanceGateBound(t *testing.T) {
	b := newVMBed(t)
	b.installAgent(t)
	// node-3 is cordoned in the bed; node-2 is the second node under test,
	// so the VMs' strategy None is what holds them, not a missing target.
	b.vmi(t, "stuck-1", "node-1", map[string]any{"evictionStrategy": "None", "domain": map[string]any{}}, false)
	b.vmi(t, "stuck-2", "node-2", map[string]any{"evictionStrategy": "None", "domain": map[string]any{}}, false)

	t.Run("wait: held past the bound, and said", func(t *testing.T) {
		agent := startAgent(t, b.env, "node-1", "--maintenance-gate-bound=3s", "--maintenance-on-gate-bound=wait")
		agent.WaitReady(t)
		if _, err := maintenance.RequestMaintenance(t.Context(), kubetest.Wrap(b.c), "node-1", "gate bound test"); err != nil {
			t.Fatal(err)
		}
		var st *selfdrain.Status
		testenv.WaitFor(t, 2*time.Minute, "node-1's maintenance saying it waits past maintenance.gateBound", func() (bool, error) {
			var err error
			st, err = selfdrain.ParseStatus(getNode(t, b.c, "node-1"))
			return err == nil && st != nil && strings.Contains(st.LastError, "maintenance.gateBound"), err
		})
		if st.Phase != selfdrain.PhaseWaiting || !strings.Contains(st.LastError, "vms/stuck-1") || !strings.Contains(st.LastError, "maintenance.onGateBound=wait") {
			t.Errorf("status %s: %s; want Waiting naming the VM and the decision", st.Phase, st.LastError)
		}
		ev := gateBoundEvent(t, b.c, "node-1")
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "vms/stuck-1") || !strings.Contains(ev.Message, "onGateBound=wait") {
			t.Errorf("Event %s %s: %s; want a Warning naming the VM and the decision", ev.Type, ev.Reason, ev.Message)
		}
		if n := getNode(t, b.c, "node-1"); n.Spec.Unschedulable || testenv.HasTaint(n, testenv.DrainTaint) {
			t.Errorf("node-1 changed while its maintenance waits past the bound: unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
		}
		t.Logf("node-1: %s", st.LastError)
	})

	t.Run("proceed: the VM is passed over", func(t *testing.T) {
		agent := startAgent(t, b.env, "node-2", "--maintenance-gate-bound=3s", "--maintenance-on-gate-bound=proceed")
		agent.WaitReady(t)
		if _, err := maintenance.RequestMaintenance(t.Context(), kubetest.Wrap(b.c), "node-2", "gate bound test"); err != nil {
			t.Fatal(err)
		}
		ev := gateBoundEvent(t, b.c, "node-2")
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "vms/stuck-2") || !strings.Contains(ev.Message, "onGateBound=proceed") {
			t.Errorf("Event %s %s: %s; want a Warning naming the VM and the decision", ev.Type, ev.Reason, ev.Message)
		}
		// Past the gate: the drain cordons the node.
		testenv.WaitFor(t, 2*time.Minute, "node-2 cordoned by its maintenance past the bound", func() (bool, error) {
			return getNode(t, b.c, "node-2").Spec.Unschedulable, nil
		})
	})
}

// gateBoundEvent is the MaintenanceGateBoundExceeded Event about node.
func gateBoundEvent(t *testing.T, c kubernetes.Interface, node string) corev1.Event {
	t.Helper()
	var ev corev1.Event
	testenv.WaitFor(t, 2*time.Minute, node+": Event MaintenanceGateBoundExceeded", func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=MaintenanceGateBoundExceeded"})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		ev = evs.Items[0]
		return true, nil
	})
	return ev
}
