package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestRecoveringNodeKeepsItsSlot is issue 44's acceptance for "healthy
// before the next node" on the real control plane: a pool of every node with
// recoveryBound 30s (its least) and a limit of one slot. rec-1 runs the pod
// of a DaemonSet that kwok keeps from being Ready (its pod-ready stage waits
// an hour) in namespace work, which the pool lists in daemonSetNamespaces,
// and the pod of a tenant's DaemonSet, in namespace tenant, which the pool
// does not list and which stays not Ready to the end, so counts for nothing.
// rec-1 holds a reboot slot; rec-2 asks for maintenance and waits.
// rec-1 reboots and comes back NotReady (kwok stops playing its kubelet, and
// the test writes its Ready condition False, as a kubelet whose network is
// not ready does); the slot is given back, as its agent does once up again.
// The coordinator keeps rec-1's slot Lease, recording since when it
// recovers, and rec-2 stays Queued; past the bound the pool stops (the
// metric, the Event, rec-2's answer say so) and still nothing is granted.
// rec-1 is Ready again (kwok plays its kubelet again), but the DaemonSet's
// pod is not: the slot stays, and rec-2's answer names the pod. Once the pod
// is Ready (the test writes its status as its kubelet would) rec-1's Lease
// goes and rec-2 is granted. The watch of the slot Leases fails the test if
// rec-1's Lease is ever deleted before rec-2's is created, or if both hold
// at once. It waits out the bound beside the other waiting tests
// (TestMain).
func TestRecoveringNodeKeepsItsSlot(t *testing.T) {
	t.Parallel()
	env := fullEnv(t)
	ctx := t.Context()
	c := env.Client()
	if err := env.AddNodes(ctx, []string{"rec-1", "rec-2"}); err != nil {
		t.Fatal(err)
	}
	// DaemonSets of rec-1 only, whose pods never become Ready by
	// themselves: the node's own (work) and a tenant's.
	const ns = "work"
	if err := mergePatchNode(t, c, "rec-1", obj{"metadata": obj{"labels": obj{"recovery-test": "netd"}}}, false); err != nil {
		t.Fatal(err)
	}
	netd := unreadyDaemonSetPod(t, env, ns, "netd")
	tenant := unreadyDaemonSetPod(t, env, "tenant", "stuck")
	startCoordinator(t, env, "--slots-limit=1", "--reboot-enabled=true",
		`--slots-pools=[{"name":"all","selector":"","recoveryBound":"30s","daemonSetNamespaces":["kube-system","`+ns+`"]}]`)
	leases := watchSlotLeases(t, c)
	leases.check = func(holders []string) error {
		if len(holders) > 1 {
			return fmt.Errorf("two nodes hold slots at once under a limit of 1: %v", holders)
		}
		return nil
	}

	// rec-1 holds a reboot slot, as its agent asks for it before the
	// reboot (holdSeconds covers the reboot without a heartbeat).
	reboot := &slots.Request{Purpose: slots.PurposeReboot, ID: "recovery-rec-1", RequestedAt: time.Now().UTC().Truncate(time.Second), HoldSeconds: 600}
	writeRequest(t, c, "rec-1", reboot)
	testenv.WaitFor(t, time.Minute, "rec-1 granted its reboot slot", func() (bool, error) {
		g := grantOn(t, c, "rec-1")
		return g.Answers(reboot) && g.State == slots.Granted, leases.stop()
	})
	next := askForSlot(t, c, "rec-2")
	testenv.WaitFor(t, time.Minute, "rec-2 queued behind rec-1", func() (bool, error) {
		g := grantOn(t, c, "rec-2")
		return g.Answers(next.req) && g.State == slots.Queued, leases.stop()
	})

	// The reboot: rec-1 comes back NotReady, and gives its slot back.
	setKwokManaged(t, c, "rec-1", false)
	setReady(t, c, "rec-1", corev1.ConditionFalse)
	removeRequest(t, c, "rec-1")

	testenv.WaitFor(t, time.Minute, "rec-1's slot Lease recording its recovery", func() (bool, error) {
		l, err := c.CoordinationV1().Leases(agentNamespace).Get(ctx, slots.LeaseName("rec-1"), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, err = time.Parse(time.RFC3339, l.Annotations[slots.LeaseRecoveringSince])
		return err == nil, leases.stop()
	})
	recovering := nodeEvent(t, c, "rec-1", "DrainSlotRecovering")
	t.Logf("rec-1: %s", recovering.Message)
	if !strings.Contains(recovering.Message, "node rec-1 is not Ready") {
		t.Errorf("Event DrainSlotRecovering %q does not say that rec-1 is not Ready", recovering.Message)
	}

	// Past the bound: the pool stops, and says so; rec-1 keeps its slot.
	testenv.WaitFor(t, 2*time.Minute, "pool all stopped by rec-1", func() (bool, error) {
		return coordinatorMetric(t, env, `node_agent_drain_slot_recovery_stop{pool="all"}`) == 1, leases.stop()
	})
	notRecovered := nodeEvent(t, c, "rec-1", "DrainSlotNotRecovered")
	t.Logf("rec-1: %s", notRecovered.Message)
	if notRecovered.Type != corev1.EventTypeWarning || !strings.Contains(notRecovered.Message, slots.LeaseName("rec-1")) {
		t.Errorf("Event DrainSlotNotRecovered %+v: want a Warning naming the slot Lease to delete", notRecovered)
	}
	testenv.WaitFor(t, time.Minute, "rec-2's answer naming the stop", func() (bool, error) {
		g := grantOn(t, c, "rec-2")
		return g.Answers(next.req) && g.State == slots.Queued && strings.Contains(g.Reason, "rec-1 did not come back healthy within recoveryBound"), leases.stop()
	})
	if h := leases.holders(); !slices.Equal(h, []string{"rec-1"}) {
		t.Fatalf("slots held while rec-1 is NotReady after giving its slot back: %v, want rec-1's only", h)
	}
	if g := getReady(t, c, "rec-1"); g != corev1.ConditionFalse {
		t.Fatalf("rec-1 is Ready %s: the test meant it NotReady until now, and proves nothing", g)
	}

	// rec-1 is Ready again, but not the DaemonSet's pod on it: the slot
	// stays. The answer names that pod alone: the tenant's, not Ready
	// either, does not count.
	setKwokManaged(t, c, "rec-1", true)
	testenv.WaitFor(t, time.Minute, "rec-1 Ready, and rec-2's answer naming the DaemonSet pod that is not", func() (bool, error) {
		g := grantOn(t, c, "rec-2")
		return getReady(t, c, "rec-1") == corev1.ConditionTrue && g.Answers(next.req) && g.State == slots.Queued &&
			strings.Contains(g.Reason, "1 DaemonSet pod(s) not Ready: "+ns+"/"+netd.Name), leases.stop()
	})
	t.Logf("rec-2 waits: %s", grantOn(t, c, "rec-2").Reason)
	if h := leases.holders(); !slices.Equal(h, []string{"rec-1"}) {
		t.Fatalf("slots held while rec-1's DaemonSet pod is not Ready: %v, want rec-1's only", h)
	}

	// The pod is Ready, as its kubelet reports it: the slot goes to rec-2,
	// the tenant's pod still not Ready.
	setPodReady(t, c, ns, netd.Name)
	next.waitGranted(t, c)
	if p, err := c.CoreV1().Pods("tenant").Get(ctx, tenant.Name, metav1.GetOptions{}); err != nil || testenv.PodReady(p) {
		t.Fatalf("the tenant's DaemonSet pod %s: Ready or gone (%v), so the grant proves nothing about daemonSetNamespaces", tenant.Name, err)
	}
	if err := leases.err(); err != nil {
		t.Fatal(err)
	}
	recovered := nodeEvent(t, c, "rec-1", "DrainSlotRecovered")
	t.Logf("rec-1: %s", recovered.Message)
	testenv.WaitFor(t, time.Minute, "pool all going again", func() (bool, error) {
		return coordinatorMetric(t, env, `node_agent_drain_slot_recovery_stop{pool="all"}`) == 0, nil
	})
	// From the Leases' history: rec-1's slot went once, and before
	// rec-2's came.
	var order []string
	for _, ch := range leases.changes() {
		if ch.node == "rec-1" && !ch.added || ch.node == "rec-2" && ch.added {
			order = append(order, ch.node)
		}
	}
	if !slices.Equal(order, []string{"rec-1", "rec-2"}) {
		t.Errorf("slot Lease history %v: want rec-1's deleted once, then rec-2's created", order)
	}
}

// unreadyDaemonSetPod creates namespace ns and in it a DaemonSet name of
// the nodes labelled recovery-test=netd, whose pod kwok keeps from being
// Ready (its pod-ready stage waits an hour), and returns that pod.
func unreadyDaemonSetPod(t *testing.T, env *testenv.Env, ns, name string) corev1.Pod {
	t.Helper()
	ctx, c := t.Context(), env.Client()
	if _, err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	ds := testenv.NewDaemonSet(ns, name)
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"recovery-test": "netd"}
	ds.Spec.Template.Annotations = map[string]string{testenv.PodReadyDelayAnnotation: "1h"}
	if _, err := c.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	testenv.WaitFor(t, time.Minute, "DaemonSet "+ns+"/"+name+"'s pod on rec-1", func() (bool, error) {
		pods, err := testenv.PodsOn(ctx, c, ns, "rec-1")
		if err != nil || len(pods) == 0 {
			return false, err
		}
		pod = pods[0]
		return true, nil
	})
	return pod
}

// setKwokManaged lets kwok play node's kubelet, or stops it: kwok manages
// only the Nodes with testenv.KwokNodeAnnotation, and marks every one it
// manages Ready.
func setKwokManaged(t *testing.T, c kubernetes.Interface, node string, on bool) {
	t.Helper()
	var value any
	if on {
		value = testenv.KwokNodeValue
	}
	if err := mergePatchNode(t, c, node, obj{"metadata": obj{"annotations": obj{testenv.KwokNodeAnnotation: value}}}, false); err != nil {
		t.Fatal(err)
	}
}

// setPodReady writes pod's status Running and Ready, as its kubelet would.
func setPodReady(t *testing.T, c kubernetes.Interface, ns, pod string) {
	t.Helper()
	now := metav1.Now()
	var conds []obj
	for _, typ := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		conds = append(conds, obj{"type": typ, "status": corev1.ConditionTrue, "lastTransitionTime": now})
	}
	patch, err := json.Marshal(obj{"status": obj{"phase": corev1.PodRunning, "conditions": conds}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods(ns).Patch(t.Context(), pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// setReady writes node's Ready condition, as its kubelet would.
func setReady(t *testing.T, c kubernetes.Interface, node string, status corev1.ConditionStatus) {
	t.Helper()
	now := metav1.Now()
	patch, err := json.Marshal(obj{"status": obj{"conditions": []obj{{
		"type": corev1.NodeReady, "status": status, "reason": "KubeletNotReady",
		"message": "container runtime network not ready: NetworkReady=false", "lastHeartbeatTime": now, "lastTransitionTime": now,
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Patch(t.Context(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

func getReady(t *testing.T, c kubernetes.Interface, node string) corev1.ConditionStatus {
	t.Helper()
	for _, cond := range getNode(t, c, node).Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}
