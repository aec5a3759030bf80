package node

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

const machineName = "node-machine"

// TestRealNodeReboot is issue 11: `systemctl reboot` on a real node (a
// systemd-nspawn machine with systemd, logind, containerd and the kubelet)
// drains it through the agent's DaemonSet pod, and the pod uncordons the
// node after the reboot.
func TestRealNodeReboot(t *testing.T) {
	b, m := setupMachineBed(t)
	t.Logf("machine %s booted, Node Ready after %s", machineName, m.boot(t, b.env).Round(time.Millisecond))
	if err := b.env.AddNode(t.Context(), kwokNode); err != nil {
		t.Fatal(err)
	}
	b.applyDeploy(t)
	pod := b.agentPodOn(t, machineName, 3*time.Minute, "")
	t.Logf("agent pod %s Ready on %s", pod.Name, machineName)
	waitFor(t, time.Minute, "the agent's delay lock", func() (bool, string) {
		locks, err := m.inhibitors(t.Context())
		return err == nil && len(locks) == 1, fmt.Sprintf("%v %v", locks, err)
	})

	if !t.Run("relock", func(t *testing.T) { b.testRelock(t, m) }) {
		t.FailNow()
	}
	if !t.Run("reboot", func(t *testing.T) { b.testReboot(t, m, "reboot-a", false) }) {
		t.FailNow()
	}
	t.Run("reboot-with-kubelet-shutdown", func(t *testing.T) { b.testReboot(t, m, "reboot-b", true) })
}

// setupMachineBed starts the control plane and the machine (not booted
// yet), and removes the agent and the machine when the test ends.
func setupMachineBed(t *testing.T) (*bed, *machineNode) {
	b := setupBed(t)
	pause, testpod := buildTestImages(t, t.TempDir())
	m := newMachineNode(t, b.env, b.bin, machineName, []string{pause, testpod, filepath.Join(b.bin, "node-agent-image.tar")}, "")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		if t.Failed() && m.c.Running() {
			t.Logf("--- errors in the machine's kubelet and containerd journal ---\n%s", m.journalErrors(ctx))
		}
		_ = b.c.AppsV1().DaemonSets(agentNS).Delete(ctx, "node-agent", metav1.DeleteOptions{})
		if m.c.Running() {
			m.c.Kill()
		}
		if err := testenv.RemoveKubepodsCgroups(); err != nil {
			t.Errorf("removing the kubelet's cgroups: %v", err)
		}
	})
	return b, m
}

// testRelock is case 3: the agent's pod is deleted while the host is up; the
// new pod takes the lock again, and logind never lists two node-agent locks.
func (b *bed) testRelock(t *testing.T, m *machineNode) {
	ctx := t.Context()
	old := b.agentPodOn(t, machineName, time.Minute, "")
	var (
		maxLocks int
		lastSeen = time.Now()
		gone     time.Time
		back     time.Time
	)
	deleted := time.Now()
	if err := b.c.CoreV1().Pods(agentNS).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		locks, err := m.inhibitors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		maxLocks = max(maxLocks, len(locks))
		switch {
		case len(locks) == 0 && gone.IsZero():
			gone = lastSeen
		case len(locks) == 1 && !gone.IsZero():
			back = now
		}
		if len(locks) > 0 {
			lastSeen = now
		}
		if !back.IsZero() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if back.IsZero() {
		t.Fatalf("no node-agent lock again within 3 minutes of deleting pod %s", old.Name)
	}
	if maxLocks > 1 {
		t.Errorf("logind listed %d node-agent locks at once", maxLocks)
	}
	fresh := b.agentPodOn(t, machineName, time.Minute, old.Name)
	t.Logf("pod %s deleted; its lock went %s later; pod %s took the lock %s after the deletion (%s without a lock); at most %d lock at a time",
		old.Name, gone.Sub(deleted).Round(time.Millisecond), fresh.Name, back.Sub(deleted).Round(time.Millisecond), back.Sub(gone).Round(time.Millisecond), maxLocks)
}

// testReboot is cases 1 and 2: a Deployment of 20 real pods with a PDB that
// allows 2 on the machine; `systemctl reboot` inside it; logind waits for
// the agent pod's lock while it drains, then the machine exits with 133; it
// boots again and the agent uncordons the node. With kubeletShutdown, the
// kubelet's own graceful node shutdown is on as well (30 s, 10 s for
// critical pods), and the test reports what each of them did.
func (b *bed) testReboot(t *testing.T, m *machineNode, ns string, kubeletShutdown bool) {
	ctx := t.Context()
	const replicas, allowed = 20, 2
	if kubeletShutdown {
		m.setKubeletConfig(t, "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n")
		restarted := time.Now()
		m.c.MustExec(ctx, "systemctl", "restart", "kubelet")
		waitFor(t, 2*time.Minute, "the kubelet to be back", func() (bool, string) {
			node, err := b.c.CoreV1().Nodes().Get(ctx, machineName, metav1.GetOptions{})
			return err == nil && nodeReadyAfter(node, restarted), fmt.Sprint(err)
		})
		waitFor(t, time.Minute, "the kubelet's and the agent's locks", func() (bool, string) {
			locks, _ := m.inhibitors(ctx)
			k := m.kubeletLocks(ctx)
			return len(locks) == 1 && k == 1, fmt.Sprintf("node-agent %d, kubelet %d", len(locks), k)
		})
		t.Log("logind lists both delay locks: the kubelet's and node-agent's")
	}
	b.rebootWorkload(t, ns, replicas, allowed)
	node, err := b.c.CoreV1().Nodes().Get(ctx, machineName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.Unschedulable || testenv.HasTaint(node, testenv.DrainTaint) {
		t.Fatalf("%s is cordoned or tainted before the reboot", machineName)
	}

	// Watch the drain from outside: when the node was cordoned and
	// tainted, when the status said Succeeded and how many web pods were
	// still on the node then, and the fewest Ready web pods at any time.
	var (
		mu                      sync.Mutex
		cordoned, succeeded     time.Time
		leftAtSucceeded, minRdy = -1, replicas
		stop                    = make(chan struct{})
		wg                      sync.WaitGroup
		exited                  = make(chan time.Time, 1)
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
			node, err := b.c.CoreV1().Nodes().Get(ctx, machineName, metav1.GetOptions{})
			if err != nil {
				continue
			}
			pods, err := b.c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				continue
			}
			ready, left := 0, 0
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.DeletionTimestamp == nil && testenv.PodReady(p) {
					ready++
				}
				if p.Spec.NodeName == machineName && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					left++
				}
			}
			st, _ := selfdrain.ParseStatus(node)
			now := time.Now()
			mu.Lock()
			minRdy = min(minRdy, ready)
			if cordoned.IsZero() && node.Spec.Unschedulable && testenv.HasTaint(node, testenv.DrainTaint) {
				cordoned = now
			}
			if succeeded.IsZero() && st != nil && st.Trigger == selfdrain.TriggerShutdown && st.Phase == selfdrain.PhaseSucceeded {
				succeeded, leftAtSucceeded = now, left
			}
			mu.Unlock()
		}
	})

	rebootAt := time.Now()
	m.c.MustExec(ctx, "systemctl", "reboot")
	waitCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	code, err := m.c.Wait(waitCtx)
	cancel()
	if err != nil {
		t.Fatalf("the machine did not go down within 4 minutes of systemctl reboot: %v", err)
	}
	exitAt := <-exited
	// One more sample after the exit.
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if code != testenv.ExitReboot {
		t.Errorf("the machine exited with %d, want %d (reboot)", code, testenv.ExitReboot)
	}
	node, err = b.c.CoreV1().Nodes().Get(ctx, machineName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := selfdrain.ParseStatus(node)
	if err != nil || st == nil {
		t.Fatalf("status after the reboot: %v %v", st, err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("status at exit: phase %s, trigger %s, totalPods %d, evictionPods %d, drainedInTime %s, lastError %q",
		st.Phase, st.Trigger, st.TotalPods, st.EvictionPods, fmtBool(st.DrainedInTime), st.LastError)
	// What the kubelet's node shutdown manager did, from its own journal
	// of the boot that just ended: the API cannot tell, since a pod it
	// kills in place keeps serving its readiness probe until it exits.
	killed, shutdownLines := m.kubeletShutdownKills(t, ns)
	if kubeletShutdown {
		if len(shutdownLines) == 0 {
			t.Errorf("the kubelet's journal has no line of its node shutdown manager: it never saw the shutdown")
		}
		t.Logf("the kubelet's node shutdown manager (%d lines):\n%s", len(shutdownLines), strings.Join(firstN(shutdownLines, 6), "\n"))
	}
	if cordoned.IsZero() {
		t.Errorf("the node was never seen cordoned and tainted")
	}
	if !kubeletShutdown {
		if succeeded.IsZero() {
			t.Fatalf("the status never said Succeeded with trigger shutdown before the machine went down")
		}
		if !succeeded.Before(exitAt) {
			t.Errorf("the machine exited (%s) before the drain succeeded (%s): logind did not wait", exitAt.Format(time.StampMilli), succeeded.Format(time.StampMilli))
		}
		if leftAtSucceeded != 0 {
			t.Errorf("%d web pods were still running on %s when the status said Succeeded", leftAtSucceeded, machineName)
		}
		if minRdy < replicas-allowed {
			t.Errorf("the PodDisruptionBudget was broken: %d Ready web pods at one point, floor %d", minRdy, replicas-allowed)
		}
		if killed != 0 {
			t.Errorf("the kubelet's node shutdown killed %d web pods in place", killed)
		}
		t.Logf("timeline: systemctl reboot → cordoned %s → Succeeded %s → machine exit %s (release and shutdown after the drain: %s); fewest Ready web pods %d (floor %d)",
			cordoned.Sub(rebootAt).Round(time.Millisecond), succeeded.Sub(rebootAt).Round(time.Millisecond),
			exitAt.Sub(rebootAt).Round(time.Millisecond), exitAt.Sub(succeeded).Round(time.Millisecond), minRdy, replicas-allowed)
	} else {
		sAt := "never"
		if !succeeded.IsZero() {
			sAt = succeeded.Sub(rebootAt).Round(time.Millisecond).String()
		}
		t.Logf("with the kubelet's graceful shutdown (30s/10s): systemctl reboot → cordoned %s → Succeeded %s → machine exit %s; the kubelet's node shutdown sent %d of the %d web pods their SIGTERM in place, at once, whatever the budget; fewest Ready web pods (in the API, where a pod killed in place stays Ready until it exits) %d (floor %d)",
			cordoned.Sub(rebootAt).Round(time.Millisecond), sAt, exitAt.Sub(rebootAt).Round(time.Millisecond), killed, replicas, minRdy, replicas-allowed)
	}

	// After the reboot: the kubelet registers again, the agent's pod runs
	// again, and it uncordons the node it cordoned.
	bootAt := time.Now()
	ready := m.boot(t, b.env)
	waitFor(t, 3*time.Minute, "the node uncordoned after the reboot", func() (bool, string) {
		node, err := b.c.CoreV1().Nodes().Get(ctx, machineName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !node.Spec.Unschedulable && !testenv.HasTaint(node, testenv.DrainTaint), fmt.Sprintf("unschedulable=%t taints=%v", node.Spec.Unschedulable, node.Spec.Taints)
	})
	uncordoned := time.Since(bootAt)
	pod := b.agentPodOn(t, machineName, 2*time.Minute, "")
	t.Logf("second boot: Node Ready %s after boot, uncordoned %s after boot (agent pod %s %s)",
		ready.Round(time.Millisecond), uncordoned.Round(time.Millisecond), pod.Name, containerStates(pod))
	waitFor(t, time.Minute, "the agent's lock after the reboot", func() (bool, string) {
		locks, err := m.inhibitors(ctx)
		return err == nil && len(locks) == 1, fmt.Sprintf("%v %v", locks, err)
	})
}

func (b *bed) readyOn(t *testing.T, ns, node string) int {
	pods, err := testenv.PodsOn(t.Context(), b.c, "", node)
	if err != nil {
		return 0
	}
	n := 0
	for i := range pods {
		if pods[i].Namespace == ns && testenv.PodReady(&pods[i]) {
			n++
		}
	}
	return n
}

// kubeletShutdownKills reads the kubelet's journal of the machine's last
// boot and returns how many pods of the namespace its node shutdown manager
// killed in place, and every line of that manager.
func (m *machineNode) kubeletShutdownKills(t *testing.T, ns string) (int, []string) {
	t.Helper()
	out, err := exec.Command("journalctl", "-D", m.c.JournalDir(), "-b", "0", "-u", "kubelet", "-o", "cat", "--no-pager").Output()
	if err != nil {
		t.Fatalf("reading the kubelet's journal: %v", err)
	}
	var lines []string
	killed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "nodeshutdown") {
			continue
		}
		lines = append(lines, line)
		// "Shutdown manager killing pod with gracePeriod" pod="NS/NAME"; a
		// later line says when it finished.
		if _, rest, ok := strings.Cut(line, "Shutdown manager killing pod"); ok {
			if _, pod, ok := strings.Cut(rest, `pod="`+ns+`/`); ok {
				killed[strings.SplitN(pod, `"`, 2)[0]] = true
			}
		}
	}
	return len(killed), lines
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

func fmtBool(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}
