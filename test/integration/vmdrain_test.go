package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/vmdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// vmBed is a control plane with KubeVirt's VMI CRDs written for the tests
// (testdata/kubevirt-vmi-crd.yaml) and node-1..3 labelled as KubeVirt's
// labeller would label them:
//   - node-1: host model EPYC-Genoa, which requires ibpb; offers the named
//     models EPYC-Genoa and Skylake-Server;
//   - node-2: takes host-model guests of EPYC-Milan hosts only; offers
//     Skylake-Server;
//   - node-3: cordoned, but would take anything.
type vmBed struct {
	env *testenv.Env
	c   kubernetes.Interface
	dyn dynamic.Interface
}

// vmiEnv is a control plane (fullEnv) that serves KubeVirt's VMI CRDs
// written for the tests (testdata/kubevirt-vmi-crd.yaml), and a dynamic
// client to it.
func vmiEnv(t *testing.T) (*testenv.Env, dynamic.Interface) {
	t.Helper()
	env := fullEnv(t)
	dyn, err := dynamic.NewForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := env.Client()
	kb := &deployBed{env: env, c: c, kubectl: kubectlBinary(t, testenv.DefaultOptions())}
	if _, err := kb.run(t, nil, "apply", "--server-side", "--field-manager=kubevirt-test", "-f", filepath.Join("testdata", "kubevirt-vmi-crd.yaml")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "virtualmachineinstances.kubevirt.io served", func() (bool, error) {
		return kube.Serves(kubetest.Wrap(c).Discovery(), vmdrain.GVR)
	})
	return env, dyn
}

func newVMBed(t *testing.T) *vmBed {
	t.Helper()
	env, dyn := vmiEnv(t)
	b := &vmBed{env: env, c: env.Client(), dyn: dyn}
	if err := env.AddNodes(t.Context(), []string{"node-1", "node-2", "node-3"}, testenv.WithNodeCapacity(kubevirtNodeCapacity())); err != nil {
		t.Fatal(err)
	}
	labels := map[string][]string{
		"node-1": {"host-model-cpu.node.kubevirt.io/EPYC-Genoa", "host-model-required-features.node.kubevirt.io/ibpb",
			"cpu-model.node.kubevirt.io/EPYC-Genoa", "cpu-model.node.kubevirt.io/Skylake-Server", "cpu-model-migration.node.kubevirt.io/EPYC-Genoa"},
		"node-2": {"host-model-cpu.node.kubevirt.io/EPYC-Milan", "cpu-model-migration.node.kubevirt.io/EPYC-Milan",
			"cpu-model.node.kubevirt.io/Skylake-Server", "cpu-feature.node.kubevirt.io/ibpb"},
		"node-3": {"cpu-model-migration.node.kubevirt.io/EPYC-Genoa", "cpu-feature.node.kubevirt.io/ibpb",
			"cpu-model.node.kubevirt.io/Skylake-Server", "cpu-model.node.kubevirt.io/EPYC-Genoa"},
	}
	for node, ls := range labels {
		m := map[string]any{"kubevirt.io/schedulable": "true"}
		for _, l := range ls {
			m[l] = "true"
		}
		patch := map[string]any{"metadata": map[string]any{"labels": m}}
		if node == "node-3" {
			patch["spec"] = map[string]any{"unschedulable": true}
		}
		if err := mergePatchNode(t, b.c, node, patch, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.env.CreateNamespace(t.Context(), "vms"); err != nil {
		t.Fatal(err)
	}
	return b
}

// kubevirtNodeCapacity is testenv's default capacity with the device
// plugin resources virt-handler offers on a KubeVirt node, which a VM's
// launcher pod asks for in its limits.
func kubevirtNodeCapacity() corev1.ResourceList {
	c := testenv.DefaultNodeCapacity()
	for _, d := range []string{"kvm", "tun", "vhost-net"} {
		c[corev1.ResourceName("devices.kubevirt.io/"+d)] = resource.MustParse("1k")
	}
	return c
}

// installAgent installs deploy/ and deploy/components/kubevirt-vms, so
// that agents run as shipped with the component.
func (b *vmBed) installAgent(t *testing.T) *deployBed {
	t.Helper()
	installAgentIdentity(t, b.env)
	v, _ := identities.Load(b.env)
	dep := v.(*deployBed)
	dep.applyComponent(t, "kubevirt-vms")
	return dep
}

// vmi creates a running VMI on node in the namespace vms
// (testenv.CreateVMI), without a launcher pod.
func (b *vmBed) vmi(t *testing.T, name, node string, spec map[string]any, migratable bool) {
	t.Helper()
	testenv.CreateVMI(t.Context(), t, b.dyn, "vms", name, node, spec, migratable, nil)
}

// TestMaintenanceDryRunNamesEachVMsWay is issue 34's acceptance for the
// dry run: for a node with three VMs (one movable, one whose host model no
// other node offers, one with strategy None), `maintenance start NODE
// --dry-run` lists each VM and where it can go, and changes nothing.
func TestMaintenanceDryRunNamesEachVMsWay(t *testing.T) {
	b := newVMBed(t)
	b.vmi(t, "movable", "node-1", map[string]any{"evictionStrategy": "LiveMigrate",
		"domain": map[string]any{"cpu": map[string]any{"model": "Skylake-Server"}}}, true)
	b.vmi(t, "no-target", "node-1", map[string]any{"evictionStrategy": "LiveMigrate", "domain": map[string]any{}}, true)
	b.vmi(t, "stops", "node-1", map[string]any{"evictionStrategy": "None", "domain": map[string]any{}}, false)
	b.vmi(t, "elsewhere", "node-2", map[string]any{"evictionStrategy": "LiveMigrate", "domain": map[string]any{}}, true)
	before := getNode(t, b.c, "node-1")

	cmd := exec.CommandContext(t.Context(), agentBinary, "maintenance", "start", "node-1", "--dry-run", "--kubeconfig", b.env.KubeconfigPath())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("maintenance start --dry-run: %v\n%s%s", err, out, stderr.String())
	}
	t.Logf("maintenance start node-1 --dry-run:\n%s", out)
	rows := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 3 && strings.HasPrefix(f[0], "vms/") {
			rows[f[0]] = line
		}
	}
	for vm, want := range map[string][]string{
		"vms/movable":   {"LiveMigrate", "Skylake-Server", "migrate", "node-2", "planned to node-2"},
		"vms/no-target": {"LiveMigrate", "host-model", "no-target", "node-2: NodeAffinity", "node-3: NodeUnschedulable"},
		"vms/stops":     {"None", "stopped", "evictionStrategy None"},
	} {
		row, ok := rows[vm]
		if !ok {
			t.Errorf("no row for %s", vm)
			continue
		}
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("%s: %q lacks %q", vm, row, w)
			}
		}
		if f := strings.Fields(row); len(f) > 4 && strings.Contains(f[4], "node-3") {
			t.Errorf("%s: %q offers the cordoned node-3", vm, row)
		}
	}
	if _, ok := rows["vms/elsewhere"]; ok {
		t.Error("a VM of node-2 is listed for node-1")
	}
	if !strings.Contains(string(out), "2 of 3 VMs cannot leave by live migration: vms/no-target (no-target), vms/stops (stopped)") {
		t.Error("the dry run does not sum up the VMs that cannot leave")
	}
	after := getNode(t, b.c, "node-1")
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("node-1 changed during a dry run: resourceVersion %s, was %s", after.ResourceVersion, before.ResourceVersion)
	}
	// The Node is read again after a pause: nothing was written late either.
	time.Sleep(time.Second)
	if n, err := b.c.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable || n.Annotations["node-agent.io/maintenance"] != "" {
		t.Errorf("node-1 after the dry run: %v, unschedulable %v, annotations %v", err, n.Spec.Unschedulable, n.Annotations)
	}
}

// TestMaintenanceWaitsForVMsThatCannotLeave: with drain.vmWithoutTarget
// wait (the default) and deploy/components/kubevirt-vms applied, a
// maintenance of a node whose VM no other node can take waits before the
// cordon, naming the VM and why on the Node; once a node that can take it
// is schedulable again, the maintenance goes on.
func TestMaintenanceWaitsForVMsThatCannotLeave(t *testing.T) {
	// In parallel (main_test.go): most of it is waiting out a bound.
	t.Parallel()
	b := newVMBed(t)
	b.installAgent(t)
	// host-model on node-1 (EPYC-Genoa, ibpb): only node-3 takes it, and
	// node-3 is cordoned.
	b.vmi(t, "pinned", "node-1", map[string]any{"evictionStrategy": "LiveMigrate", "domain": map[string]any{}}, true)
	agent := startAgent(t, b.env, "node-1")
	agent.WaitReady(t)
	if _, err := maintenance.RequestMaintenance(t.Context(), kubetest.Wrap(b.c), "node-1", "VM test"); err != nil {
		t.Fatal(err)
	}
	var st *selfdrain.Status
	testenv.WaitFor(t, time.Minute, "the maintenance waiting for vms/pinned", func() (bool, error) {
		var err error
		st, err = selfdrain.ParseStatus(getNode(t, b.c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseWaiting && strings.Contains(st.LastError, "vms/pinned"), err
	})
	t.Logf("while no node can take the VM: %s", st.LastError)
	for _, want := range []string{"waiting for " + maintenance.VMGateWhat, "vms/pinned (no-target: no other node passes kube-scheduler's filters for its migration target pod: node-2: NodeAffinity", "node-3: NodeUnschedulable"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("lastError %q lacks %q", st.LastError, want)
		}
	}
	if n := getNode(t, b.c, "node-1"); n.Spec.Unschedulable || testenv.HasTaint(n, testenv.DrainTaint) {
		t.Errorf("node-1 changed while its VM had nowhere to go: unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	// `maintenance status` names, per node, the scheduler's filter that
	// keeps the VM off it.
	out, err := exec.CommandContext(t.Context(), agentBinary, "maintenance", "status", "node-1", "--kubeconfig", b.env.KubeconfigPath()).CombinedOutput()
	if err != nil {
		t.Fatalf("maintenance status: %v\n%s", err, out)
	}
	t.Logf("maintenance status node-1:\n%s", out)
	for _, want := range []string{"Nodes that cannot take vms/pinned", "node-2  NodeAffinity", "node-3  NodeUnschedulable  node(s) were unschedulable"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("maintenance status lacks %q", want)
		}
	}
	// node-3 takes it once it is schedulable again.
	if err := mergePatchNode(t, b.c, "node-3", map[string]any{"spec": map[string]any{"unschedulable": false}}, false); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the maintenance going on once node-3 can take the VM", func() (bool, error) {
		st, err := selfdrain.ParseStatus(getNode(t, b.c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
	})
	if n := getNode(t, b.c, "node-1"); !n.Spec.Unschedulable {
		t.Error("node-1 not cordoned by its maintenance")
	}
}

// vmStatus returns node-1's maintenance status and its VMs as name: phase
// target message.
func vmLines(st *selfdrain.Status) map[string]string {
	out := map[string]string{}
	for _, v := range st.VMs {
		out[v.Name] = strings.TrimSpace(v.Phase + " " + v.Target + " " + v.Message)
	}
	return out
}

// TestDrainFollowsVMMigrations drains a node with four VMs, against the
// stand-in for KubeVirt's eviction answer and evacuation (testenv.
// KubeVirtStandIn), with drain.vmWithoutTarget proceed: vms/a live-migrates
// to node-2; vms/b (strategy None) is stopped by its eviction, and so is
// vms/d (LiveMigrateIfPossible, not live-migratable); vms/c's first
// migration fails, which the status names with its reason, and once the
// failure is lifted it migrates too. The status shows each VM's migration
// (phase, target) apart from the pods, and the final one where each went.
func TestDrainFollowsVMMigrations(t *testing.T) {
	b := newVMBed(t)
	b.installAgent(t)
	kv := testenv.StartKubeVirtStandIn(t, b.env, testenv.KubeVirtStandInOptions{MigrationDelay: 12 * time.Second, RetryDelay: 3 * time.Second})
	ctx := t.Context()
	to2 := map[string]string{testenv.MigrationTargetAnnotation: "node-2"}
	skylake := func(strategy string) map[string]any {
		return map[string]any{"evictionStrategy": strategy, "domain": map[string]any{"cpu": map[string]any{"model": "Skylake-Server"}},
			"tolerations": []any{map[string]any{"key": testenv.KwokToleration().Key, "operator": "Exists", "effect": "NoSchedule"}}}
	}
	kv.CreateVM(ctx, t, "vms", "a", "node-1", skylake("LiveMigrate"), true, to2)
	kv.CreateVM(ctx, t, "vms", "b", "node-1", skylake("None"), false, nil)
	kv.CreateVM(ctx, t, "vms", "c", "node-1", skylake("LiveMigrate"), true,
		map[string]string{testenv.MigrationTargetAnnotation: "node-2", testenv.FailMigrationAnnotation: "true"})
	kv.CreateVM(ctx, t, "vms", "d", "node-1", skylake("LiveMigrateIfPossible"), false, to2)
	testenv.WaitRunningOn(ctx, t, b.c, "vms", "node-1", 4)

	agent := startAgent(t, b.env, "node-1", "--drain-vm-without-target=proceed")
	agent.WaitReady(t)
	if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(b.c), "node-1", "VM progress"); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	testenv.WaitFor(t, 2*time.Minute, "vms/c's failed migration in the status", func() (bool, error) {
		st, err := selfdrain.ParseStatus(getNode(t, b.c, "node-1"))
		if err != nil || st == nil {
			return false, err
		}
		for name, line := range vmLines(st) {
			seen[name+" "+line] = true
		}
		return strings.HasPrefix(vmLines(st)["vms/c"], "MigrationFailed node-2 migration to node-2 failed: stand-in"), nil
	})
	// The failure is lifted: KubeVirt's next attempt succeeds.
	if _, err := b.dyn.Resource(vmdrain.GVR).Namespace("vms").Patch(ctx, "c", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+testenv.FailMigrationAnnotation+`":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var st *selfdrain.Status
	testenv.WaitFor(t, 3*time.Minute, "phase Succeeded", func() (bool, error) {
		var err error
		st, err = selfdrain.ParseStatus(getNode(t, b.c, "node-1"))
		if err == nil && st != nil {
			for name, line := range vmLines(st) {
				seen[name+" "+line] = true
			}
		}
		return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
	})
	var lines []string
	for l := range seen {
		lines = append(lines, l)
	}
	slices.Sort(lines)
	t.Logf("VM progress seen in the status:\n%s", strings.Join(lines, "\n"))
	t.Logf("the stand-in's events:\n%s", strings.Join(kv.Events(), "\n"))
	final := vmLines(st)
	for vm, want := range map[string]string{
		"vms/a": "Migrated node-2 live-migrated to node-2",
		"vms/b": "Stopped  stopped (phase Failed)",
		"vms/c": "Migrated node-2 live-migrated to node-2",
		"vms/d": "Stopped  stopped (phase Failed)",
	} {
		if got := strings.Join(strings.Fields(final[vm]), " "); got != strings.Join(strings.Fields(want), " ") {
			t.Errorf("final %s: %q, want %q", vm, final[vm], want)
		}
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "vms/a Migrating node-2") }) {
		t.Error("vms/a was never shown migrating")
	}
}

// TestEndingMaintenanceCancelsEvacuation: a maintenance ended while a VM
// migrates off the node calls the evacuation off (its migration deleted,
// its evacuation mark cleared), says so in an Event, and the VM stays on
// the node given back: no new migration starts (kubevirt/kubevirt#9585).
// A token bound to node-1's agent pod may do neither to node-2's VMs, nor
// change anything else of a VMI's status.
func TestEndingMaintenanceCancelsEvacuation(t *testing.T) {
	b := newVMBed(t)
	dep := b.installAgent(t)
	kv := testenv.StartKubeVirtStandIn(t, b.env, testenv.KubeVirtStandInOptions{MigrationDelay: time.Minute, RetryDelay: 2 * time.Second})
	ctx := t.Context()
	spec := map[string]any{"evictionStrategy": "LiveMigrate", "domain": map[string]any{"cpu": map[string]any{"model": "Skylake-Server"}},
		"tolerations": []any{map[string]any{"key": testenv.KwokToleration().Key, "operator": "Exists", "effect": "NoSchedule"}}}
	kv.CreateVM(ctx, t, "vms", "slow", "node-1", spec, true, map[string]string{testenv.MigrationTargetAnnotation: "node-2"})
	kv.CreateVM(ctx, t, "vms", "theirs", "node-2", spec, true, map[string]string{testenv.MigrationTargetAnnotation: "node-1"})
	testenv.WaitRunningOn(ctx, t, b.c, "vms", "node-1", 1)

	agent := startAgent(t, b.env, "node-1")
	agent.WaitReady(t)
	if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(b.c), "node-1", "cancel test"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "vms/slow migrating in the status", func() (bool, error) {
		st, err := selfdrain.ParseStatus(getNode(t, b.c, "node-1"))
		return err == nil && st != nil && strings.HasPrefix(vmLines(st)["vms/slow"], "Migrating node-2"), err
	})

	t.Run("a stolen token stays on its node", func(t *testing.T) {
		token := dep.boundToken(t, dep.agentPod(t, "node-1"))
		asSA := dep.tokenDynamic(t, token)
		// An evacuation of node-2 to refuse: vms/theirs marked as KubeVirt
		// would mark it, and a migration object for it.
		if _, err := b.dyn.Resource(vmdrain.GVR).Namespace("vms").Patch(ctx, "theirs", types.MergePatchType,
			[]byte(`{"status":{"evacuationNodeName":"node-2"}}`), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
		const msg = "may only clear the evacuation mark"
		testenv.WaitFor(t, time.Minute, "the kubevirt-vms policy in force", func() (bool, error) {
			_, err := asSA.Resource(vmdrain.GVR).Namespace("vms").Patch(ctx, "theirs", types.MergePatchType, []byte(`{"status":{"evacuationNodeName":null}}`), dry, "status")
			return err != nil && strings.Contains(err.Error(), msg), nil
		})
		_, err := asSA.Resource(vmdrain.GVR).Namespace("vms").Patch(ctx, "theirs", types.MergePatchType, []byte(`{"status":{"evacuationNodeName":null}}`), dry, "status")
		wantDenied(t, "clear the evacuation mark of node-2's VMI", err, msg)
		_, err = asSA.Resource(vmdrain.GVR).Namespace("vms").Patch(ctx, "slow", types.MergePatchType, []byte(`{"status":{"phase":"Failed"}}`), dry, "status")
		wantDenied(t, "change the phase of node-1's own VMI", err, msg)
		_, err = asSA.Resource(vmdrain.GVR).Namespace("vms").Patch(ctx, "slow", types.MergePatchType, []byte(`{"status":{"evacuationNodeName":null}}`), dry, "status")
		wantAllowed(t, "clear the evacuation mark of node-1's own VMI (dry run)", err)
		m := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
			"metadata": map[string]any{"name": "their-evacuation", "namespace": "vms", "annotations": map[string]any{vmdrain.EvacuationAnnotation: "node-2"}},
			"spec":     map[string]any{"vmiName": "theirs"}}}
		if _, err := b.dyn.Resource(vmdrain.MigrationGVR).Namespace("vms").Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = asSA.Resource(vmdrain.MigrationGVR).Namespace("vms").Delete(ctx, "their-evacuation", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		wantDenied(t, "delete node-2's evacuation migration", err, "may only delete migrations that evacuate that Node")
	})

	if _, err := maintenance.EndMaintenance(ctx, kubetest.Wrap(b.c), "node-1"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "node-1 uncordoned", func() (bool, error) {
		return !getNode(t, b.c, "node-1").Spec.Unschedulable, nil
	})
	// Longer than the stand-in's RetryDelay: KubeVirt would have started a
	// new migration by now had the mark stayed.
	time.Sleep(6 * time.Second)
	vmi, err := b.dyn.Resource(vmdrain.GVR).Namespace("vms").Get(ctx, "slow", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := vmdrain.FromUnstructured(vmi)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the stand-in's events:\n%s", strings.Join(kv.Events(), "\n"))
	if v.Node != "node-1" || v.EvacuationNode != "" {
		t.Errorf("vms/slow after the maintenance ended: on %s, evacuation mark %q; want it left on node-1, unmarked", v.Node, v.EvacuationNode)
	}
	started := 0
	for _, e := range kv.Events() {
		if strings.Contains(e, "vms/slow") && strings.Contains(e, "started") {
			started++
		}
	}
	if started != 1 {
		t.Errorf("%d migrations of vms/slow started, want the one the drain caused and no other after the maintenance ended", started)
	}
	events, err := b.c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node-1,reason=VMEvacuationCancelled"})
	if err != nil || len(events.Items) == 0 || !strings.Contains(events.Items[0].Message, "vms/slow (migrating to node-2)") {
		t.Errorf("no VMEvacuationCancelled Event naming vms/slow (migrating to node-2): %v %v", err, events)
	}
}
