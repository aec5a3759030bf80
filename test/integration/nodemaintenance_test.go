package integration

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

const (
	medik8sGroup  = "nodemaintenance.medik8s.io"
	kubevirtGroup = "nodemaintenance.kubevirt.io"
	// nmFlag turns on maintenance.nodeMaintenance.
	nmFlag = "--maintenance-node-maintenance=true"
)

// nmAuditPolicy records every request on NodeMaintenance objects, so a test
// can show which objects the agent wrote to.
const nmAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    resources:
      - group: nodemaintenance.medik8s.io
      - group: nodemaintenance.kubevirt.io
  - level: None
`

// nmBed is a drain bed with the CRDs of deploy/components/nodemaintenance
// installed and, when audited, an audit log of NodeMaintenance requests.
type nmBed struct {
	*drainBed
	dyn      dynamic.Interface
	auditLog string
}

func newNMBed(t *testing.T, audited bool) *nmBed {
	t.Helper()
	opts := testenv.Options{Controllers: true, Scheduler: true, Kwok: true}
	b := &nmBed{}
	if audited {
		var err error
		if opts.APIServerArgs, b.auditLog, err = testenv.AuditLog(t.TempDir(), nmAuditPolicy); err != nil {
			t.Fatal(err)
		}
	}
	env := testenv.StartForTest(t, opts)
	if _, err := env.CreateNamespace(context.Background(), "work"); err != nil {
		t.Fatal(err)
	}
	installAgentIdentity(t, env)
	if err := env.AddNode(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	b.drainBed = &drainBed{env: env, ns: "work"}
	installNodeMaintenanceCRDs(t, env)
	dyn, err := dynamic.NewForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	b.dyn = dyn
	return b
}

// installNodeMaintenanceCRDs applies the CRDs of the component and waits
// until both groups are served.
func installNodeMaintenanceCRDs(t *testing.T, env *testenv.Env) {
	t.Helper()
	kb := &deployBed{env: env, c: env.Client(), kubectl: kubectlBinary(t, testenv.DefaultOptions())}
	dir := filepath.Join(testenv.DeployDir(t), "components", "nodemaintenance")
	if _, err := kb.run(t, nil, "apply", "--server-side", "--field-manager=node-agent-install",
		"-f", filepath.Join(dir, "crd-medik8s.yaml"), "-f", filepath.Join(dir, "crd-kubevirt.yaml")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the NodeMaintenance groups served", func() (bool, error) {
		groups, err := maintenance.ServedNodeMaintenanceGroups(env.Client().Discovery())
		return len(groups) == 2, err
	})
}

func (b *nmBed) create(t *testing.T, group, name, node, reason string) {
	t.Helper()
	if _, err := maintenance.RequestNodeMaintenance(context.Background(), b.dyn, group, name, node, reason); err != nil {
		t.Fatal(err)
	}
}

// get returns the object, or nil when it is gone.
func (b *nmBed) get(t *testing.T, group, name string) *maintenance.NodeMaintenance {
	t.Helper()
	u, err := b.dyn.Resource(maintenance.NodeMaintenanceGVR(group)).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	nm, err := maintenance.NodeMaintenanceFromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return nm
}

func (b *nmBed) delete(t *testing.T, group, name string) {
	t.Helper()
	if err := b.dyn.Resource(maintenance.NodeMaintenanceGVR(group)).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// phases records the phases an object goes through, from a watch.
type phases struct {
	mu   sync.Mutex
	seen []string
	stop context.CancelFunc
	done chan struct{}
}

func (b *nmBed) watchPhases(t *testing.T, group, name string) *phases {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &phases{stop: cancel, done: make(chan struct{})}
	w, err := b.dyn.Resource(maintenance.NodeMaintenanceGVR(group)).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			p.mu.Lock()
			if phase != "" && (len(p.seen) == 0 || p.seen[len(p.seen)-1] != phase) {
				p.seen = append(p.seen, phase)
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

func (p *phases) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

func hasFinalizer(nm *maintenance.NodeMaintenance) bool {
	return nm != nil && slices.Contains(nm.Finalizers, maintenance.NodeMaintenanceFinalizer)
}

// TestNodeMaintenanceObject is issue 12's main path on the real control
// plane: a NodeMaintenance object drains the node with the same engine and
// the same counts as the annotation (the workload of
// TestMaintenanceDrainsNode, whose annotation drain reports 46 and 42); a
// second object for the node joins the same maintenance as a second
// requester and starts no second drain; the annotation and
// an object together keep the node in maintenance until both are gone;
// deleting the object restores the node before the object goes; and the
// objects of other nodes, one of them a node that does not exist, are never
// touched (audit log).
func TestNodeMaintenanceObject(t *testing.T) {
	b := newNMBed(t, true)
	c := b.env.Client()
	ctx := context.Background()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "web", 40, "node-1")
	for _, ds := range []string{"ds-a", "ds-b", "ds-c"} {
		testenv.CreateDaemonSet(t.Context(), t, c, b.ns, ds)
	}
	unmanaged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unmanaged", Namespace: b.ns},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}},
			Tolerations: []corev1.Toleration{testenv.KwokToleration()}}}
	scratch := unmanaged.DeepCopy()
	scratch.Name = "scratch"
	scratch.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	for _, p := range []*corev1.Pod{unmanaged, scratch} {
		if _, err := c.CoreV1().Pods(b.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 45)
	b.addTargets(t)

	// Objects of other nodes: node-2 exists (no agent runs there in this
	// test), node-9 does not.
	b.create(t, medik8sGroup, "nm-node-2", "node-2", "other node")
	b.create(t, kubevirtGroup, "nm-node-9", "node-9", "no such node")

	agent := startAgent(t, b.env, "node-1", nmFlag)
	agent.WaitReady(t)

	// The documents' group.
	seen := b.watchPhases(t, kubevirtGroup, "nm-node-1")
	b.create(t, kubevirtGroup, "nm-node-1", "node-1", "NIC replacement")
	testenv.WaitFor(t, 3*time.Minute, "phase Succeeded", func() (bool, error) {
		nm := b.get(t, kubevirtGroup, "nm-node-1")
		return nm.Status.Phase == selfdrain.PhaseSucceeded, nil
	})
	nm := b.get(t, kubevirtGroup, "nm-node-1")
	t.Logf("status of nm-node-1: %+v", nm.Status)
	if got := seen.list(); !slices.Equal(got, []string{"Running", "Succeeded"}) {
		t.Errorf("phases seen %v, want [Running Succeeded]", got)
	}
	if nm.Status.TotalPods != 46 || nm.Status.EvictionPods != 42 || len(nm.Status.PendingPods) != 0 || nm.Status.DrainProgress != 100 || nm.Status.LastError != "" {
		t.Errorf("counts: totalpods=%d evictionPods=%d pendingPods=%v drainProgress=%d lastError=%q; want 46, 42, none, 100, none (the annotation path's)",
			nm.Status.TotalPods, nm.Status.EvictionPods, nm.Status.PendingPods, nm.Status.DrainProgress, nm.Status.LastError)
	}
	if !hasFinalizer(nm) {
		t.Errorf("finalizers %v, want %s", nm.Finalizers, maintenance.NodeMaintenanceFinalizer)
	}
	st := nodeStatus(t, c, "node-1")
	if st.Trigger != selfdrain.TriggerNodeMaintenance || st.Reason != "NIC replacement" || st.TotalPods != nm.Status.TotalPods || st.EvictionPods != nm.Status.EvictionPods {
		t.Errorf("node record %s does not match the object", st.Encode())
	}
	node := getNode(t, c, "node-1")
	if !node.Spec.Unschedulable || !testenv.HasTaint(node, testenv.DrainTaint) {
		t.Errorf("node-1 not cordoned and tainted: unschedulable=%t taints=%v", node.Spec.Unschedulable, node.Spec.Taints)
	}
	if left, err := testenv.PodsOn(t.Context(), c, b.ns, "node-1"); err != nil || len(left) != 3 {
		t.Errorf("pods left on node-1: %d (%v), want the 3 DaemonSet pods", len(left), err)
	}

	// A second object for node-1, in the other group: a second requester
	// of the same maintenance (issue 44), no second drain. It mirrors the
	// drain and holds the finalizer like the first.
	b.create(t, medik8sGroup, "nm-node-1-again", "node-1", "second request")
	testenv.WaitFor(t, time.Minute, "the second object's status", func() (bool, error) {
		nm := b.get(t, medik8sGroup, "nm-node-1-again")
		return nm.Status.Phase == selfdrain.PhaseSucceeded && hasFinalizer(nm), nil
	})
	testenv.WaitFor(t, time.Minute, "both objects listed as requesters", func() (bool, error) {
		list, err := maintenance.ParseRequesters(getNode(t, c, "node-1"))
		return len(list) == 2, err
	})
	if again := nodeStatus(t, c, "node-1"); !again.StartTime.Equal(st.StartTime) || again.Phase != selfdrain.PhaseSucceeded {
		t.Errorf("the second object changed the maintenance: %s", again.Encode())
	}
	b.delete(t, medik8sGroup, "nm-node-1-again")
	testenv.WaitFor(t, 30*time.Second, "the second object gone", func() (bool, error) {
		return b.get(t, medik8sGroup, "nm-node-1-again") == nil, nil
	})

	// status shows both APIs, and the object whose node does not exist.
	out, err := cli(t, b.env, "status")
	t.Logf("maintenance status:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "nodemaintenances."+kubevirtGroup+"/nm-node-1") || !strings.Contains(out, "node node-9 does not exist") {
		t.Errorf("status output lacks the objects or the note on node-9")
	}

	out, err = cli(t, b.env, "status", "node-9")
	t.Logf("maintenance status node-9:\n%s", out)
	if err != nil || !strings.Contains(out, "Node node-9 does not exist") || !strings.Contains(out, "nodemaintenances."+kubevirtGroup+"/nm-node-9") {
		t.Errorf("status node-9 (%v) does not show the missing node and its object", err)
	}

	// Both at once: the annotation too; deleting the object then leaves
	// the node in maintenance, and the object goes at once.
	if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "also by annotation"); err != nil {
		t.Fatal(err)
	}
	b.delete(t, kubevirtGroup, "nm-node-1")
	testenv.WaitFor(t, time.Minute, "nm-node-1 gone while the annotation holds the node", func() (bool, error) {
		return b.get(t, kubevirtGroup, "nm-node-1") == nil, nil
	})
	node = getNode(t, c, "node-1")
	if st := nodeStatus(t, c, "node-1"); !node.Spec.Unschedulable || !st.Active() {
		t.Errorf("node-1 left maintenance although the annotation still asks for it: unschedulable=%t status %s", node.Spec.Unschedulable, st.Encode())
	}

	// And the other way round: an object while the annotation holds the
	// node; removing the annotation leaves the node in maintenance.
	b.create(t, medik8sGroup, "nm-node-1", "node-1", "object after annotation")
	testenv.WaitFor(t, time.Minute, "the object mirrors the drain", func() (bool, error) {
		nm := b.get(t, medik8sGroup, "nm-node-1")
		return nm.Status.Phase == selfdrain.PhaseSucceeded && hasFinalizer(nm), nil
	})
	if _, err := maintenance.EndMaintenance(ctx, kubetest.Wrap(c), "node-1"); err != nil {
		t.Fatal(err)
	}
	// The agent acts on the annotation's removal within a moment; give it
	// time to do the wrong thing.
	time.Sleep(3 * time.Second)
	if node := getNode(t, c, "node-1"); !node.Spec.Unschedulable || !nodeStatus(t, c, "node-1").Active() {
		t.Errorf("node-1 left maintenance although a NodeMaintenance object still asks for it")
	}

	// Deleting the last request restores the node before the object goes.
	b.delete(t, medik8sGroup, "nm-node-1")
	testenv.WaitFor(t, time.Minute, "nm-node-1 gone", func() (bool, error) {
		return b.get(t, medik8sGroup, "nm-node-1") == nil, nil
	})
	node = getNode(t, c, "node-1")
	if node.Spec.Unschedulable || testenv.HasTaint(node, testenv.DrainTaint) || nodeCondition(node) != nil {
		t.Errorf("after deleting the object: unschedulable=%t taints=%v condition %v; want restored", node.Spec.Unschedulable, node.Spec.Taints, nodeCondition(node))
	}
	if st := nodeStatus(t, c, "node-1"); st.Active() || st.EndTime == nil {
		t.Errorf("node record not final: %s", st.Encode())
	}

	// The other nodes' objects: untouched, by the object and by the audit
	// log.
	for _, o := range []struct{ group, name string }{{medik8sGroup, "nm-node-2"}, {kubevirtGroup, "nm-node-9"}} {
		nm := b.get(t, o.group, o.name)
		if nm == nil || len(nm.Finalizers) != 0 || nm.Status.Phase != "" || nm.Status.LastError != "" {
			t.Errorf("%s/%s changed: %+v", o.group, o.name, nm)
		}
	}
	writes := b.agentWrites(t)
	t.Logf("the agent's writes to NodeMaintenance objects (audit log): %v", writes)
	for _, name := range []string{"nm-node-2", "nm-node-9"} {
		if n := writes[name]; n > 0 {
			t.Errorf("the agent wrote %d times to %s, an object of another node", n, name)
		}
	}
	if writes["nm-node-1"] == 0 || writes["nm-node-1-again"] == 0 {
		t.Errorf("the audit log shows no write to node-1's objects; the check above proves nothing")
	}
}

// agentWrites counts, from the audit log, the agent's write requests
// (anything but get, list, watch) per NodeMaintenance object name.
func (b *nmBed) agentWrites(t *testing.T) map[string]int {
	t.Helper()
	// A write is not long-running: its one event is at ResponseComplete.
	audit := testenv.NewAuditReader(b.auditLog, testenv.AuditStageResponseComplete)
	if err := audit.Read(); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range audit.Events() {
		if e.User.Username != agentUser || e.ObjectRef == nil || e.ObjectRef.Resource != maintenance.NodeMaintenanceResource {
			continue
		}
		switch e.Verb {
		case "get", "list", "watch":
			continue
		}
		out[e.ObjectRef.Name]++
	}
	return out
}

// TestNodeMaintenancePDBBlocked: a drain a PodDisruptionBudget blocks shows
// the pods left and the blocker in the object's status.
func TestNodeMaintenancePDBBlocked(t *testing.T) {
	// In parallel (main_test.go): most of it is waiting out a bound.
	t.Parallel()
	b := newNMBed(t, false)
	c := b.env.Client()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "db", 3, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 3)
	testenv.CreatePDB(t.Context(), t, c, b.ns, "db", testenv.MinAvailable(3), 3, 0)
	b.addTargets(t)

	agent := startAgent(t, b.env, "node-1", nmFlag, "--drain-timeout", "15s")
	agent.WaitReady(t)
	// The CLI creates nm-node-1 in the operator's group.
	if out, err := cli(t, b.env, "start", "node-1", "--api", "nodemaintenance", "--reason", "blocked"); err != nil {
		t.Fatalf("maintenance start --api nodemaintenance: %v\n%s", err, out)
	}
	testenv.WaitFor(t, 2*time.Minute, "a blocker in the status", func() (bool, error) {
		nm := b.get(t, medik8sGroup, "nm-node-1")
		return len(nm.Status.PendingPods) == 3 && nm.Status.LastError != "", nil
	})
	nm := b.get(t, medik8sGroup, "nm-node-1")
	t.Logf("status while blocked: %+v", nm.Status)
	if nm.Status.Phase != selfdrain.PhaseRunning && nm.Status.Phase != selfdrain.PhaseFailed {
		t.Errorf("phase %q, want Running or Failed", nm.Status.Phase)
	}
	if !strings.Contains(nm.Status.LastError, "disruption budget") || !strings.Contains(nm.Status.LastError, "db") {
		t.Errorf("lastError %q does not name the PodDisruptionBudget", nm.Status.LastError)
	}
	for _, p := range nm.Status.PendingPods {
		if !strings.HasPrefix(p, b.ns+"/db-") {
			t.Errorf("pending pod %q is not one of the db pods", p)
		}
	}
	if nm.Status.EvictionPods != 3 || nm.Status.DrainProgress != 0 {
		t.Errorf("evictionPods=%d drainProgress=%d, want 3 and 0", nm.Status.EvictionPods, nm.Status.DrainProgress)
	}
	// drain.timeout passes: the drain stops, Failed, still with the pods,
	// and lastError names the budget that held them.
	testenv.WaitFor(t, 2*time.Minute, "phase Failed", func() (bool, error) {
		return b.get(t, medik8sGroup, "nm-node-1").Status.Phase == selfdrain.PhaseFailed, nil
	})
	nm = b.get(t, medik8sGroup, "nm-node-1")
	if len(nm.Status.PendingPods) != 3 || !strings.Contains(nm.Status.LastError, "disruption budget") ||
		!strings.Contains(nm.Status.LastError, "PodDisruptionBudget "+b.ns+"/db") {
		t.Errorf("Failed status lost the pods or the blocker: %+v", nm.Status)
	}
	if !getNode(t, c, "node-1").Spec.Unschedulable {
		t.Error("node-1 uncordoned after its drain timed out, with drain.onTimeout keepCordoned")
	}
}

// TestNodeMaintenanceResumesAfterKill: an agent killed mid-drain resumes the
// object's drain, keeping the original record. As in
// TestDrainResumesAfterAgentRestart, the pods start slowly under a PDB that
// allows one disruption at a time, so the kill lands while the drain runs,
// once the object shows progress and the counts.
// It waits most of its time for the PDB to forget the killed eviction
// (TestMain: the waiting tests run side by side).
func TestNodeMaintenanceResumesAfterKill(t *testing.T) {
	t.Parallel()
	b := newNMBed(t, false)
	c := b.env.Client()
	const replicas = 12
	createSlowStartDeployment(t, c, b.ns, "db", replicas, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", replicas)
	testenv.CreatePDB(t.Context(), t, c, b.ns, "db", testenv.MinAvailable(replicas-1), replicas, 1)
	b.addTargets(t)

	agent := startAgent(t, b.env, "node-1", nmFlag)
	agent.WaitReady(t)
	requested := time.Now()
	b.create(t, kubevirtGroup, "nm-node-1", "node-1", "restart test")
	testenv.WaitFor(t, time.Minute, "drain under way in the object's status", func() (bool, error) {
		st := b.get(t, kubevirtGroup, "nm-node-1").Status
		return st.Phase == selfdrain.PhaseRunning && st.DrainProgress > 0 && st.TotalPods > 0 && st.EvictionPods > 0, nil
	})
	agent.Kill(t)
	// What the killed agent published last, on the object and on the Node.
	before := b.get(t, kubevirtGroup, "nm-node-1")
	recBefore := nodeStatus(t, c, "node-1")
	t.Logf("killed the agent %s after the request, at %d%%: %d of %d pods pending; object status %+v",
		time.Since(requested).Round(100*time.Millisecond), before.Status.DrainProgress, len(before.Status.PendingPods), before.Status.EvictionPods, before.Status)
	if before.Status.Phase != selfdrain.PhaseRunning || before.Status.DrainProgress <= 0 || before.Status.DrainProgress >= 100 {
		t.Fatalf("the kill did not land mid-drain (phase %s, progress %d%%): nothing to resume", before.Status.Phase, before.Status.DrainProgress)
	}
	if before.Status.EvictionPods != replicas || before.Status.TotalPods < replicas || recBefore.StartTime == nil ||
		recBefore.TotalPods != before.Status.TotalPods || recBefore.EvictionPods != before.Status.EvictionPods {
		t.Fatalf("the killed agent had not published the counts (want %d pods to evict) and the start time: object %+v, node record %s",
			replicas, before.Status, recBefore.Encode())
	}

	again := startAgent(t, b.env, "node-1", nmFlag)
	again.WaitReady(t)
	// As in TestDrainResumesAfterAgentRestart: a killed eviction can leave
	// the PDB counting a disruption for up to two minutes.
	testenv.WaitFor(t, 5*time.Minute, "phase Succeeded", func() (bool, error) {
		return b.get(t, kubevirtGroup, "nm-node-1").Status.Phase == selfdrain.PhaseSucceeded, nil
	})
	after := b.get(t, kubevirtGroup, "nm-node-1")
	rec := nodeStatus(t, c, "node-1")
	t.Logf("drained %s after the request; status after resume: %+v; node record %s", time.Since(requested).Round(100*time.Millisecond), after.Status, rec.Encode())
	if !rec.StartTime.Equal(recBefore.StartTime) || rec.TotalPods != recBefore.TotalPods || rec.EvictionPods != recBefore.EvictionPods ||
		after.Status.TotalPods != before.Status.TotalPods || after.Status.EvictionPods != before.Status.EvictionPods {
		t.Errorf("resume lost the original record: before %+v and %s, after %+v and %s", before.Status, recBefore.Encode(), after.Status, rec.Encode())
	}
	if after.Status.DrainProgress != 100 || len(after.Status.PendingPods) != 0 {
		t.Errorf("resumed drain not complete: drainProgress %d, pendingPods %v", after.Status.DrainProgress, after.Status.PendingPods)
	}
	if !rec.CordonedByAgent || !rec.TaintedByAgent || !hasFinalizer(after) {
		t.Errorf("resume forgot what the agent did: %s, finalizers %v", rec.Encode(), after.Finalizers)
	}
	if left, err := testenv.PodsOn(t.Context(), c, b.ns, "node-1"); err != nil || len(left) != 0 {
		t.Errorf("pods left on node-1: %d (%v)", len(left), err)
	}

	out, err := cli(t, b.env, "stop", "node-1", "--api", "nodemaintenance", "--wait")
	t.Logf("maintenance stop --api nodemaintenance --wait:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if nm := b.get(t, kubevirtGroup, "nm-node-1"); nm != nil {
		t.Errorf("nm-node-1 still there after stop --wait: %+v", nm)
	}
	if node := getNode(t, c, "node-1"); node.Spec.Unschedulable || testenv.HasTaint(node, testenv.DrainTaint) {
		t.Errorf("after deleting the object: unschedulable=%t taints=%v", node.Spec.Unschedulable, node.Spec.Taints)
	}
}

// TestNodeMaintenanceWithoutCoordinatorSaysWhy is the new user's case: the
// agents are installed (as the shipped ServiceAccount) but no drain slot
// coordinator runs. No slot is ever granted, so nothing is cordoned or
// evicted; the object's status (phase Running, as node-maintenance-operator
// shows a drain that waits) and a Warning Event say that no coordinator
// answered and name node-agent-coordinator. Once one runs, the drain goes
// ahead and the count of errors resets.
func TestNodeMaintenanceWithoutCoordinatorSaysWhy(t *testing.T) {
	// In parallel (main_test.go): most of it is waiting out a bound.
	t.Parallel()
	b := newNMBed(t, false)
	c := b.env.Client()
	ctx := context.Background()
	testenv.CreateDeployment(t.Context(), t, c, b.ns, "web", 3, "node-1")
	testenv.WaitRunningOn(t.Context(), t, c, b.ns, "node-1", 3)
	b.addTargets(t)
	withoutCoordinator(t, b.env)
	agent := startAgent(t, b.env, "node-1", nmFlag)
	agent.WaitReady(t)
	b.create(t, medik8sGroup, "nm-node-1", "node-1", "new user")
	// The agent tells after 30 s without an answer (internal/runagent).
	testenv.WaitFor(t, 2*time.Minute, "lastError naming the coordinator", func() (bool, error) {
		st := b.get(t, medik8sGroup, "nm-node-1").Status
		return st.ErrorOnLeaseCount >= 1 && strings.Contains(st.LastError, "node-agent-coordinator"), nil
	})
	nm := b.get(t, medik8sGroup, "nm-node-1")
	t.Logf("status: %+v", nm.Status)
	if nm.Status.Phase != selfdrain.PhaseRunning || !strings.Contains(nm.Status.LastError, "no drain slot coordinator answered") {
		t.Errorf("status %+v: want phase Running and lastError saying that no coordinator answered", nm.Status)
	}
	if st := nodeStatus(t, c, "node-1"); st.Phase != selfdrain.PhaseWaiting {
		t.Errorf("node record %s, want phase Waiting", st.Encode())
	}
	if n := getNode(t, c, "node-1"); n.Spec.Unschedulable || !hasSlotRequest(t, c, "node-1") {
		t.Errorf("node-1: unschedulable=%t, request %q; want schedulable, and its request for a slot on the Node",
			n.Spec.Unschedulable, n.Annotations[slots.RequestAnnotation])
	}
	if left, err := testenv.PodsOn(t.Context(), c, b.ns, "node-1"); err != nil || len(left) != 3 {
		t.Errorf("pods on node-1: %d (%v), want all 3: nothing drains without a slot", len(left), err)
	}
	testenv.WaitFor(t, 30*time.Second, "a Warning Event naming the coordinator", func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=node-1,reason=DrainSlotError"})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		e := evs.Items[0]
		t.Logf("Event: %s %s: %s", e.Type, e.Reason, e.Message)
		return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "node-agent-coordinator"), nil
	})
	// Once a coordinator runs, the drain goes ahead and the count resets.
	startCoordinator(t, b.env, nmFlag)
	testenv.WaitFor(t, 2*time.Minute, "phase Succeeded", func() (bool, error) {
		nm := b.get(t, medik8sGroup, "nm-node-1")
		return nm.Status.Phase == selfdrain.PhaseSucceeded && nm.Status.ErrorOnLeaseCount == 0 && nm.Status.LastError == "", nil
	})
}

// TestNodeMaintenanceOffByDefault: without maintenance.nodeMaintenance the
// agent leaves NodeMaintenance objects alone, so that it never competes
// with a node-maintenance-operator serving them. (Until this test, an
// agent with its labeller on served them all the same.) The annotation
// still works.
func TestNodeMaintenanceOffByDefault(t *testing.T) {
	b := newNMBed(t, false)
	c := b.env.Client()
	agent := startAgent(t, b.env, "node-1")
	agent.WaitReady(t)
	b.create(t, medik8sGroup, "nm-node-1", "node-1", "for the operator")
	// The annotation's drain shows the agent is up and acting meanwhile.
	if _, err := maintenance.RequestMaintenance(t.Context(), kubetest.Wrap(c), "node-1", "by annotation"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the annotation's drain Succeeded", func() (bool, error) {
		st, err := selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
	})
	nm := b.get(t, medik8sGroup, "nm-node-1")
	if nm == nil || nm.Status.Phase != "" || hasFinalizer(nm) {
		t.Errorf("nm-node-1 was served without maintenance.nodeMaintenance: %+v", nm)
	}
	if st := nodeStatus(t, c, "node-1"); st.Trigger != selfdrain.TriggerAnnotation {
		t.Errorf("the node's maintenance came from %s, want the annotation", st.Trigger)
	}
}
