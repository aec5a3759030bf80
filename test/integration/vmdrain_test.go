package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/handshake"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
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

func newVMBed(t *testing.T) *vmBed {
	t.Helper()
	env := fullEnv(t)
	b := &vmBed{env: env, c: env.Client()}
	var err error
	if b.dyn, err = dynamic.NewForConfig(env.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	kb := &deployBed{env: env, c: b.c, kubectl: kubectlBinary(t, testenv.DefaultOptions())}
	if _, err := kb.run(t, nil, "apply", "--server-side", "--field-manager=kubevirt-test", "-f", filepath.Join("testdata", "kubevirt-vmi-crd.yaml")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "virtualmachineinstances.kubevirt.io served", func() (bool, error) {
		return kube.Serves(kubetest.Wrap(b.c).Discovery(), vmdrain.GVR)
	})
	if err := env.AddNodes(t.Context(), []string{"node-1", "node-2", "node-3"}); err != nil {
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
		m := map[string]any{}
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

// vmi creates a running VMI on node as KubeVirt's controllers would leave
// it: the spec given (with kwok's toleration), the node label, and a status with the node, phase
// Running and the LiveMigratable condition.
func (b *vmBed) vmi(t *testing.T, name, node string, spec map[string]any, migratable bool) {
	t.Helper()
	// kwok's Nodes carry a NoSchedule taint, which the test's pods
	// tolerate; so do its VMs, as their launcher pods must.
	tol := testenv.KwokToleration()
	spec["tolerations"] = []any{map[string]any{"key": tol.Key, "operator": "Exists", "effect": string(tol.Effect)}}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": name, "namespace": "vms", "labels": map[string]any{vmdrain.NodeNameLabel: node}},
		"spec":     spec,
	}}
	created, err := b.dyn.Resource(vmdrain.GVR).Namespace("vms").Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cond := map[string]any{"type": "LiveMigratable", "status": "True"}
	if !migratable {
		cond = map[string]any{"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable", "message": "PVC disk is not shared"}
	}
	created.Object["status"] = map[string]any{"nodeName": node, "phase": "Running", "conditions": []any{cond}}
	if _, err := b.dyn.Resource(vmdrain.GVR).Namespace("vms").UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
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
		"vms/movable":   {"LiveMigrate", "Skylake-Server", "migrate", "node-2", "cpu-model.node.kubevirt.io/Skylake-Server=true"},
		"vms/no-target": {"LiveMigrate", "host-model", "no-target", "cpu-model-migration.node.kubevirt.io/EPYC-Genoa=true"},
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
		if strings.Contains(row, "node-3") {
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
	b := newVMBed(t)
	installAgentIdentity(t, b.env)
	v, _ := identities.Load(b.env)
	data, err := os.ReadFile(filepath.Join(testenv.DeployDir(t), "components", "kubevirt-vms", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.(*deployBed).run(t, data, "apply", "--server-side", "--field-manager=node-agent-install", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	// host-model on node-1 (EPYC-Genoa, ibpb): only node-3 takes it, and
	// node-3 is cordoned.
	b.vmi(t, "pinned", "node-1", map[string]any{"evictionStrategy": "LiveMigrate", "domain": map[string]any{}}, true)
	agent := startAgent(t, b.env, "node-1")
	agent.WaitReady(t)
	if _, err := selfdrain.RequestMaintenance(t.Context(), kubetest.Wrap(b.c), "node-1", "VM test"); err != nil {
		t.Fatal(err)
	}
	var st *selfdrain.Status
	testenv.WaitFor(t, time.Minute, "the maintenance waiting for vms/pinned", func() (bool, error) {
		var err error
		st, err = selfdrain.ParseStatus(getNode(t, b.c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseWaiting && strings.Contains(st.LastError, "vms/pinned"), err
	})
	t.Logf("while no node can take the VM: %s", st.LastError)
	for _, want := range []string{"waiting for " + handshake.VMGateWhat, "vms/pinned (no-target: no other schedulable node has cpu-model-migration.node.kubevirt.io/EPYC-Genoa=true"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("lastError %q lacks %q", st.LastError, want)
		}
	}
	if n := getNode(t, b.c, "node-1"); n.Spec.Unschedulable || testenv.HasTaint(n, testenv.DrainTaint) {
		t.Errorf("node-1 changed while its VM had nowhere to go: unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
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
