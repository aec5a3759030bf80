package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestRealNodeCoordinatedReboot is issue 23's acceptance on the real node
// (a systemd-nspawn machine with systemd, logind, containerd and the
// kubelet), with deploy/ and its reboot component, and the drain slot
// coordinator (node-agent-coordinator, on the host): the sentinel appears
// while another node holds the only drain slot; the node asks for a slot,
// waits and says so; once the slot is free the coordinator grants it, the
// agent drains the node (PDB respected), keeps the slot across the reboot,
// reboots the machine through logind (exit 133), and after the reboot
// uncordons the node and gives the slot back. Then a sentinel that every
// boot creates again (a tmpfiles.d entry) causes one reboot, not a second.
func TestRealNodeCoordinatedReboot(t *testing.T) {
	b, m := setupMachineBed(t)
	ctx := t.Context()
	t.Logf("machine %s booted, Node Ready after %s", machineName, m.boot(t, b.env).Round(time.Millisecond))
	if err := b.env.AddNode(ctx, kwokNode); err != nil {
		t.Fatal(err)
	}
	b.applyDeployWith(t, []string{"components/reboot"}, []string{"--reboot-check-interval=2s"})
	b.startCoordinator(t)
	pod := b.agentPodOn(t, machineName, 3*time.Minute, "")
	t.Logf("agent pod %s Ready on %s", pod.Name, machineName)
	waitFor(t, time.Minute, "the agent's delay lock", func() (bool, string) {
		locks, err := m.inhibitors(ctx)
		return err == nil && len(locks) == 1, fmt.Sprintf("%v %v", locks, err)
	})
	b.rebootWorkload(t, "coord", 6, 1)

	if !t.Run("waits for the slot, drains, reboots, comes back", func(t *testing.T) { b.testCoordinatedReboot(t, m, "coord", 6) }) {
		t.FailNow()
	}
	t.Run("a sentinel that survives the reboot causes no second reboot", func(t *testing.T) { b.testRebootLoop(t, m) })
}

// rebootWorkload runs n pods of a Deployment web on the machine, Ready by
// an HTTP probe, with a PDB that allows `allowed` disruptions.
func (b *bed) rebootWorkload(t *testing.T, ns string, n, allowed int) {
	ctx := t.Context()
	if _, err := b.env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	dep := testenv.NewDeployment(ns, "web", int32(n), machineName)
	spec := &dep.Spec.Template.Spec
	spec.Containers[0].Image = testpodImage
	spec.Containers[0].ImagePullPolicy = corev1.PullNever
	spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	spec.DNSPolicy = corev1.DNSDefault
	b.cordon(t, kwokNode, true)
	if _, err := b.c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(int32(allowed))),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}
	if _, err := b.c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 4*time.Minute, fmt.Sprintf("%d web pods Ready on %s", n, machineName), func() (bool, string) {
		r := b.readyOn(t, ns, machineName)
		return r == n, fmt.Sprintf("%d Ready", r)
	})
	b.cordon(t, kwokNode, false)
}

// rebootState reads the coordinator's record and condition.
func (b *bed) rebootState(ctx context.Context) (*corev1.Node, *reboot.Record, *corev1.NodeCondition, error) {
	node, err := b.c.CoreV1().Nodes().Get(ctx, machineName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	rec, err := reboot.ParseRecord(node)
	if err != nil {
		return node, nil, nil, err
	}
	for i := range node.Status.Conditions {
		if c := &node.Status.Conditions[i]; c.Type == reboot.ConditionType {
			return node, rec, c, nil
		}
	}
	return node, rec, nil, nil
}

func (b *bed) waitReason(t *testing.T, timeout time.Duration, reason string) *corev1.NodeCondition {
	t.Helper()
	var cond *corev1.NodeCondition
	waitFor(t, timeout, "condition "+string(reboot.ConditionType)+" reason "+reason, func() (bool, string) {
		_, _, c, err := b.rebootState(t.Context())
		if err != nil || c == nil {
			return false, fmt.Sprint(err)
		}
		cond = c
		return c.Reason == reason, c.Reason + ": " + c.Message
	})
	return cond
}

func (b *bed) testCoordinatedReboot(t *testing.T, m *machineNode, ns string, replicas int) {
	ctx := t.Context()
	// Another node holds the only slot (slots.limit is 1).
	release := b.otherNodeHolds(t, kwokNode)
	before, _, _, err := b.rebootState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bootBefore := before.Status.NodeInfo.BootID

	start := time.Now()
	m.c.MustExec(ctx, "touch", "/run/reboot-required")
	cond := b.waitReason(t, 2*time.Minute, string(reboot.WaitingForSlot))
	waiting := time.Since(start)
	if cond.Status != corev1.ConditionTrue || !strings.Contains(cond.Message, "/host/run/reboot-required") {
		t.Errorf("while waiting: condition %s %q", cond.Status, cond.Message)
	}
	if node, _, _, _ := b.rebootState(ctx); node.Spec.Unschedulable {
		t.Errorf("the node was cordoned while it waited for a slot")
	}
	// The request is on the node's own Node, and the coordinator queues it.
	var queued slotView
	waitFor(t, 30*time.Second, "the reboot's request for a slot Queued", func() (bool, string) {
		v, err := b.slotView(ctx, machineName)
		if err != nil {
			return false, err.Error()
		}
		queued = v
		return v.request != nil && v.request.Purpose == slots.PurposeReboot && v.grant.Answers(v.request) && v.grant.State == slots.Queued, v.String()
	})
	if queued.lease != nil {
		t.Errorf("a slot Lease for %s while its request is queued: %s", machineName, queued)
	}
	// It keeps waiting while the slot stays taken.
	time.Sleep(5 * time.Second)
	if _, rec, _, err := b.rebootState(ctx); err != nil || rec.Reason != string(reboot.WaitingForSlot) {
		t.Fatalf("after 5s more with the slot taken: %+v %v", rec, err)
	}
	t.Logf("sentinel created; condition %s after %s: %s; %s", cond.Reason, waiting.Round(time.Millisecond), cond.Message, queued)

	// Watch the drain from outside.
	var (
		mu                           sync.Mutex
		cordoned, drained, rebooting time.Time
		minReady                     = replicas
		atReboot                     slotView
		stop                         = make(chan struct{})
		wg                           sync.WaitGroup
		exited                       = make(chan time.Time, 1)
	)
	done := m.c.Exited()
	go func() {
		<-done
		exited <- time.Now()
	}()
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			node, rec, _, err := b.rebootState(ctx)
			if err != nil {
				continue
			}
			pods, err := b.c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				continue
			}
			ready := 0
			for i := range pods.Items {
				if p := &pods.Items[i]; p.DeletionTimestamp == nil && testenv.PodReady(p) {
					ready++
				}
			}
			st, _ := selfdrain.ParseStatus(node)
			now := time.Now()
			mu.Lock()
			minReady = min(minReady, ready)
			if cordoned.IsZero() && node.Spec.Unschedulable && testenv.HasTaint(node, testenv.DrainTaint) {
				cordoned = now
			}
			if drained.IsZero() && st != nil && st.Trigger == selfdrain.TriggerReboot && st.Phase == selfdrain.PhaseSucceeded {
				drained = now
			}
			if rebooting.IsZero() && rec != nil && rec.Phase == reboot.PhaseRebootRequested {
				rebooting = now
				atReboot, _ = b.slotView(ctx, machineName)
			}
			mu.Unlock()
		}
	})

	released := time.Now()
	release()
	waitCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	code, err := m.c.Wait(waitCtx)
	cancel()
	if err != nil {
		t.Fatalf("the machine did not reboot within 4 minutes of the slot's release: %v", err)
	}
	exitAt := <-exited
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if code != testenv.ExitReboot {
		t.Errorf("the machine exited with %d, want %d (reboot)", code, testenv.ExitReboot)
	}
	mu.Lock()
	if cordoned.IsZero() || drained.IsZero() || rebooting.IsZero() {
		t.Fatalf("not seen: cordoned %v, drained %v, reboot requested %v", cordoned, drained, rebooting)
	}
	if !drained.Before(exitAt) || !drained.Before(rebooting.Add(time.Second)) {
		t.Errorf("the drain succeeded at %s, the reboot was asked at %s, the machine exited at %s", drained.Format(time.StampMilli), rebooting.Format(time.StampMilli), exitAt.Format(time.StampMilli))
	}
	if minReady < replicas-1 {
		t.Errorf("the PodDisruptionBudget was broken: %d Ready web pods at one point, floor %d", minReady, replicas-1)
	}
	// The agent said it would be silent for reboot.slotHoldBound (30m)
	// before it asked logind to reboot.
	if !atReboot.held(machineName) || atReboot.request.Purpose != slots.PurposeReboot || atReboot.request.HoldSeconds != 1800 {
		t.Errorf("at the reboot: %s; want the slot held by %s for a reboot, with holdSeconds 1800 (reboot.slotHoldBound)", atReboot, machineName)
	}
	timeline := fmt.Sprintf("slot released → cordoned %s → drained %s → reboot asked %s → machine exit %s (code %d); fewest Ready web pods %d (floor %d)",
		cordoned.Sub(released).Round(time.Millisecond), drained.Sub(released).Round(time.Millisecond),
		rebooting.Sub(released).Round(time.Millisecond), exitAt.Sub(released).Round(time.Millisecond), code, minReady, replicas-1)
	mu.Unlock()
	if v, err := b.slotView(ctx, machineName); err != nil || !v.held(machineName) {
		t.Errorf("while the machine is down: %s %v; want the slot held by %s", v, err, machineName)
	}
	if v, err := b.slotView(ctx, kwokNode); err != nil || v.request != nil || v.grant != nil || v.lease != nil {
		t.Errorf("%s after it gave its slot back: %s %v; want no request, grant or Lease", kwokNode, v, err)
	}

	bootAt := time.Now()
	ready := m.boot(t, b.env)
	cond = b.waitReason(t, 3*time.Minute, string(reboot.Done))
	back := time.Since(bootAt)
	node, rec, _, err := b.rebootState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.Unschedulable || testenv.HasTaint(node, testenv.DrainTaint) {
		t.Errorf("Done, but the node is cordoned or tainted: %v %v", node.Spec.Unschedulable, node.Spec.Taints)
	}
	if cond.Status != corev1.ConditionFalse || rec.LastReboot == nil || rec.SentinelSurvived || rec.Slot != "" || rec.Drain {
		t.Errorf("after the reboot: condition %s, record %+v", cond.Status, rec)
	}
	if node.Status.NodeInfo.BootID == bootBefore {
		t.Errorf("the boot ID did not change: %s", bootBefore)
	}
	// The agent withdrew its request once the node was back; the
	// coordinator then deleted the Lease and its grant.
	waitFor(t, 30*time.Second, "the slot given back after Done", func() (bool, string) {
		v, err := b.slotView(ctx, machineName)
		if err != nil {
			return false, err.Error()
		}
		return v.request == nil && v.grant == nil && v.lease == nil, v.String()
	})
	if _, err := m.c.Exec(ctx, "test", "-e", "/run/reboot-required"); err == nil {
		t.Errorf("the sentinel is still there after the reboot")
	}
	t.Logf("timeline: sentinel → WaitingForDrainSlot %s; %s; booted, Node Ready %s after boot, Done (uncordoned, slot released) %s after boot; boot ID %s → %s",
		waiting.Round(time.Millisecond), timeline, ready.Round(time.Millisecond), back.Round(time.Millisecond), bootBefore, node.Status.NodeInfo.BootID)
	b.logRebootEvents(t)
}

func (b *bed) testRebootLoop(t *testing.T, m *machineNode) {
	ctx := t.Context()
	// Something on the host creates the sentinel at every boot.
	if err := m.c.WriteFile("/etc/tmpfiles.d/reboot-loop.conf", []byte("f /run/reboot-required 0644 root root -\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.c.MustExec(ctx, "touch", "/run/reboot-required")
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	code, err := m.c.Wait(waitCtx)
	cancel()
	if err != nil || code != testenv.ExitReboot {
		t.Fatalf("the first reboot: exit %d, %v", code, err)
	}
	t.Logf("first reboot: machine exit %s after the sentinel", time.Since(start).Round(time.Millisecond))
	m.boot(t, b.env)
	cond := b.waitReason(t, 3*time.Minute, string(reboot.RebootLoop))
	if _, err := m.c.Exec(ctx, "test", "-e", "/run/reboot-required"); err != nil {
		t.Fatalf("the sentinel did not survive the reboot; the test's premise is broken")
	}
	// Watch for a while: no second reboot, no drain, no slot.
	observe := 30 * time.Second
	deadline := time.Now().Add(observe)
	for time.Now().Before(deadline) {
		if !m.c.Running() {
			t.Fatalf("the machine went down again: a second reboot within reboot.loopBound")
		}
		node, rec, _, err := b.rebootState(ctx)
		if err == nil && (node.Spec.Unschedulable || rec.Phase != reboot.PhaseIdle) {
			t.Fatalf("a second attempt started: unschedulable %v, phase %q", node.Spec.Unschedulable, rec.Phase)
		}
		if v, err := b.slotView(ctx, machineName); err == nil && (v.request != nil || v.lease != nil) {
			t.Fatalf("the node asked for a slot again: %s", v)
		}
		time.Sleep(500 * time.Millisecond)
	}
	_, rec, _, _ := b.rebootState(ctx)
	if !rec.SentinelSurvived || rec.Reason != string(reboot.RebootLoop) {
		t.Errorf("record %+v", rec)
	}
	t.Logf("after the reboot: %s %s: %s; no second reboot, drain or slot in %s", cond.Status, cond.Reason, cond.Message, observe)
}

func (b *bed) logRebootEvents(t *testing.T) {
	evs, err := b.c.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + machineName})
	if err != nil {
		t.Logf("events: %v", err)
		return
	}
	var lines []string
	for _, e := range evs.Items {
		if strings.HasPrefix(e.Reason, "Reboot") || e.Reason == "Rebooting" {
			lines = append(lines, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
		}
	}
	t.Logf("reboot Events on the Node:\n%s", strings.Join(lines, "\n"))
}
