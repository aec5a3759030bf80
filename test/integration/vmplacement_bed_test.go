package integration

import (
	"encoding/json"
	"errors"
	"maps"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/vmdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// The placement bed's Nodes. Two sources hold the VMs; every other node is
// a candidate that differs from amd-1, the one that takes everything, in
// one respect (its name says which).
const (
	srcAMD     = "src-amd"    // source: AMD, host model EPYC-Genoa requiring ibpb; 1Ti of memory
	srcIntel   = "src-intel"  // source: Intel
	amd1       = "amd-1"      // all AMD labels, ibpb, machine type, disk=ssd, rack=r1; runs the db pod
	amd2       = "amd-2"      // as amd-1 without cpu-feature ibpb, disk and rack=r2
	oldAMD     = "old-amd"    // EPYC-Milan only, other machine type
	intel1     = "intel-1"    // Intel, Skylake-Server
	noSched    = "nosched"    // kubevirt.io/schedulable absent
	schedFalse = "schedfalse" // kubevirt.io/schedulable=false
	cordoned   = "cordoned"   // spec.unschedulable
	draining   = "draining"   // kubevirt.io/drain:NoSchedule, as a node in maintenance
	tainted    = "tainted"    // dedicated=vm:NoSchedule
	memNode    = "mem-node"   // 1124Mi of memory: above 1Gi, below 1Gi and its overhead
	cpuNode    = "cpu-node"   // 2 CPUs
	pairNode   = "pair-node"  // 500Gi of memory: one 300Gi guest, not two; no other node has room for one
	noKVM      = "nokvm"      // no devices.kubevirt.io/kvm
)

// Label keys the bed's Nodes and VMs use.
const (
	lSchedulable = "kubevirt.io/schedulable"
	lVendor      = "cpu-vendor.node.kubevirt.io/"
	lModel       = "cpu-model.node.kubevirt.io/"
	lMigration   = "cpu-model-migration.node.kubevirt.io/"
	lFeature     = "cpu-feature.node.kubevirt.io/"
	lHostModel   = "host-model-cpu.node.kubevirt.io/"
	lHostReq     = "host-model-required-features.node.kubevirt.io/"
	lMachine     = "machine-type.node.kubevirt.io/"
	machineNew   = "pc-q35-rhel9.6.0"
	machineOld   = "pc-q35-rhel8.6.0"
	vmNamespace  = "vms"
)

// placementNode is one Node of the bed.
type placementNode struct {
	name   string
	labels map[string]string
	taints []corev1.Taint
	cordon bool
	// capacity changes these resources of the default capacity.
	capacity corev1.ResourceList
	// without drops these resources.
	without []corev1.ResourceName
}

func trueLabels(keys ...string) map[string]string {
	m := map[string]string{}
	for _, k := range keys {
		m[k] = "true"
	}
	return m
}

// amdLabels are what KubeVirt's heartbeat and labeller write on an AMD
// EPYC-Genoa host, plus extra.
func amdLabels(extra map[string]string) map[string]string {
	m := trueLabels(lSchedulable, lVendor+"AMD", lModel+"EPYC-Genoa", lMigration+"EPYC-Genoa",
		lMigration+"EPYC-Milan", lFeature+"ibpb", lFeature+"avx512f", lMachine+machineNew)
	maps.Copy(m, extra)
	return m
}

// withLabels returns m with extra.
func withLabels(m, extra map[string]string) map[string]string {
	m = maps.Clone(m)
	maps.Copy(m, extra)
	return m
}

// without returns m without keys.
func without(m map[string]string, keys ...string) map[string]string {
	m = maps.Clone(m)
	for _, k := range keys {
		delete(m, k)
	}
	return m
}

func placementNodes() []placementNode {
	intel := trueLabels(lSchedulable, lVendor+"Intel", lModel+"Skylake-Server", lMigration+"Skylake-Server",
		lFeature+"ibpb", lMachine+machineNew)
	return []placementNode{
		{name: srcAMD, labels: amdLabels(trueLabels(lHostModel+"EPYC-Genoa", lHostReq+"ibpb")), capacity: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Ti")}},
		{name: srcIntel, labels: withLabels(intel, trueLabels(lHostModel+"Skylake-Server"))},
		{name: amd1, labels: amdLabels(map[string]string{"disk": "ssd", "rack": "r1"})},
		{name: amd2, labels: without(amdLabels(map[string]string{"rack": "r2"}), lFeature+"ibpb")},
		{name: oldAMD, labels: trueLabels(lSchedulable, lVendor+"AMD", lModel+"EPYC-Milan", lMigration+"EPYC-Milan", lMachine+machineOld)},
		{name: intel1, labels: intel},
		{name: noSched, labels: without(amdLabels(nil), lSchedulable)},
		{name: schedFalse, labels: amdLabels(map[string]string{lSchedulable: "false"})},
		{name: cordoned, labels: amdLabels(nil), cordon: true},
		{name: draining, labels: amdLabels(nil), taints: []corev1.Taint{testenv.DrainTaint}},
		{name: tainted, labels: amdLabels(nil), taints: []corev1.Taint{{Key: "dedicated", Value: "vm", Effect: corev1.TaintEffectNoSchedule}}},
		{name: memNode, labels: amdLabels(nil), capacity: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1124Mi")}},
		{name: cpuNode, labels: amdLabels(nil), capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
		{name: pairNode, labels: amdLabels(nil), capacity: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("500Gi")}},
		{name: noKVM, labels: amdLabels(nil), without: []corev1.ResourceName{"devices.kubevirt.io/kvm"}},
	}
}

// kubevirtDevices are the device-plugin resources virt-handler announces
// on every node it runs on.
var kubevirtDevices = []corev1.ResourceName{"devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net"}

func (n placementNode) resources() corev1.ResourceList {
	r := testenv.DefaultNodeCapacity()
	for _, d := range kubevirtDevices {
		r[d] = resource.MustParse("1k")
	}
	maps.Copy(r, n.capacity)
	for _, d := range n.without {
		delete(r, d)
	}
	return r
}

// placementBed is a control plane with the VMI CRD, the Nodes of
// placementNodes (and no other), the namespace vms and two pods the
// affinity cases refer to.
type placementBed struct {
	env   *testenv.Env
	c     kubernetes.Interface
	dyn   dynamic.Interface
	nodes []placementNode
}

func newPlacementBed(t *testing.T) *placementBed {
	t.Helper()
	env, dyn := vmiEnv(t)
	b := &placementBed{env: env, c: env.Client(), dyn: dyn, nodes: placementNodes()}
	for _, n := range b.nodes {
		opts := []testenv.NodeOption{testenv.WithNodeLabels(n.labels), testenv.WithNodeCapacity(n.resources())}
		if len(n.taints) > 0 {
			opts = append(opts, testenv.WithNodeTaints(n.taints...))
		}
		if err := env.AddNode(t.Context(), n.name, opts...); err != nil {
			t.Fatal(err)
		}
		if n.cordon {
			if err := mergePatchNode(t, b.c, n.name, map[string]any{"spec": map[string]any{"unschedulable": true}}, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := env.CreateNamespace(t.Context(), vmNamespace); err != nil {
		t.Fatal(err)
	}
	// The pod the (anti-)affinity cases name, and one that the topology
	// spread case counts, both on amd-1.
	b.runPod(t, "db", amd1, map[string]string{"app": "db"})
	b.runPod(t, "spread-1", amd1, map[string]string{"spread": "s"})
	// The node lifecycle controller taints the cordoned node; wait for it
	// so that every later read sees the same Nodes.
	testenv.WaitFor(t, time.Minute, "the unschedulable taint on "+cordoned, func() (bool, error) {
		return testenv.HasTaint(getNode(t, b.c, cordoned), corev1.Taint{Key: corev1.TaintNodeUnschedulable}), nil
	})
	return b
}

// runPod binds a small pod with labels to node.
func (b *placementBed) runPod(t *testing.T, name, node string, labels map[string]string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vmNamespace, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: []corev1.Toleration{testenv.KwokToleration()},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}}},
	}
	if _, err := b.c.CoreV1().Pods(vmNamespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createVM creates a running VMI on source (testenv.CreateVMI) with
// labels and, when machine is set, status.machine.type; then its
// virt-launcher pod on source (launcherPod). It returns the VMI's UID.
func (b *placementBed) createVM(t *testing.T, name, source string, spec map[string]any, labels map[string]string, machine string, selector map[string]string) types.UID {
	t.Helper()
	ctx := t.Context()
	testenv.CreateVMI(ctx, t, b.dyn, vmNamespace, name, source, spec, true, nil)
	vmis := b.dyn.Resource(vmdrain.GVR).Namespace(vmNamespace)
	if len(labels) > 0 {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		if _, err := vmis.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if machine != "" {
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"machine": map[string]any{"type": machine}}})
		if _, err := vmis.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	u, err := vmis.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	guest, _, _ := unstructured.NestedString(u.Object, "spec", "domain", "memory", "guest")
	pod := launcherPod(name, source, u.GetUID(), u.GetLabels(), guest, selector)
	if _, err := b.c.CoreV1().Pods(vmNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return u.GetUID()
}

// launcherPod is the virt-launcher pod of a running VMI as the bed shows
// it: bound to node, labelled as KubeVirt labels it (the VMI's labels, then
// kubevirt.io=virt-launcher and kubevirt.io/created-by), with a compute
// container asking for the guest memory and about KubeVirt's overhead, a
// tenth of a CPU and the KVM devices, and selector as its node selector.
func launcherPod(vmi, node string, uid types.UID, vmiLabels map[string]string, guest string, selector map[string]string) *corev1.Pod {
	labels := maps.Clone(vmiLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["kubevirt.io"] = "virt-launcher"
	labels["kubevirt.io/created-by"] = string(uid)
	mem := resource.MustParse("1Gi")
	if guest != "" {
		mem = resource.MustParse(guest)
	}
	mem.Add(resource.MustParse("300Mi"))
	devices := corev1.ResourceList{}
	for _, d := range kubevirtDevices {
		devices[d] = resource.MustParse("1")
	}
	requests := maps.Clone(devices)
	requests[corev1.ResourceCPU] = resource.MustParse("100m")
	requests[corev1.ResourceMemory] = mem
	requests[corev1.ResourceEphemeralStorage] = resource.MustParse("50M")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-" + vmi, Namespace: vmNamespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:     node,
			NodeSelector: selector,
			Tolerations:  []corev1.Toleration{testenv.KwokToleration()},
			Containers: []corev1.Container{{Name: "compute", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: devices}}},
		},
	}
}

// outcome is what kube-scheduler did with a pod: bound it to Node, or
// left it Pending with Message (PodScheduled=False, reason Unschedulable).
type outcome struct {
	Node, Message string
	Pod           string
}

func (o outcome) String() string {
	if o.Node != "" {
		return "bound to " + o.Node
	}
	return "pending: " + o.Message
}

// schedule creates pod unbound (its containers given an image, which a
// rendered pod leaves out) and waits for kube-scheduler's decision. Unless
// keep, the pod is deleted again, and gone, before schedule returns.
func (b *placementBed) schedule(t *testing.T, pod *corev1.Pod, keep bool) outcome {
	t.Helper()
	ctx := t.Context()
	p := pod.DeepCopy()
	p.Spec.NodeName = ""
	p.ResourceVersion = ""
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Image == "" {
				cs[i].Image = "registry.k8s.io/pause:3.10"
			}
		}
	}
	created, err := b.c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s%s: %v", p.Name, p.GenerateName, err)
	}
	var out outcome
	testenv.WaitFor(t, time.Minute, "kube-scheduler's decision on "+created.Name, func() (bool, error) {
		got, err := b.c.CoreV1().Pods(created.Namespace).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Spec.NodeName != "" {
			out = outcome{Node: got.Spec.NodeName}
			return true, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				out = outcome{Message: c.Message}
				return true, nil
			}
		}
		return false, nil
	})
	out.Pod = created.Name
	if !keep {
		b.deletePod(t, created.Name)
	}
	return out
}

// deletePod deletes a pod of vms at once and waits until it is gone, so
// that kube-scheduler no longer counts it.
func (b *placementBed) deletePod(t *testing.T, name string) {
	t.Helper()
	ctx := t.Context()
	err := b.c.CoreV1().Pods(vmNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "pod "+name+" gone", func() (bool, error) {
		_, err := b.c.CoreV1().Pods(vmNamespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// filterPart is the part of kube-scheduler's PodScheduled=False message
// that says why each node was filtered out: "0/N nodes are available:
// <count> <reason>, ...", without its full stop and without what the
// post-filter plugins add after it (". no new claims to deallocate,
// preemption: ..."). It cuts at the first ". " and not at the first ".",
// as a reason such as "Insufficient devices.kubevirt.io/kvm" has dots of
// its own.
func filterPart(msg string) string {
	msg = strings.TrimSpace(msg)
	if i := strings.Index(msg, ". "); i >= 0 {
		msg = msg[:i]
	}
	return strings.TrimSuffix(msg, ".")
}

// nodeVersions returns, for every Node, what a maintenance could change:
// its labels, annotations, spec (cordon, taints) and conditions other than
// the kubelet's (kwok's) own heartbeat times; the resourceVersion too, for
// the message.
func (b *placementBed) nodeVersions(t *testing.T) map[string]string {
	t.Helper()
	list, err := b.c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range list.Items {
		conds := make([]string, 0, len(n.Status.Conditions))
		for _, c := range n.Status.Conditions {
			conds = append(conds, string(c.Type)+"="+string(c.Status)+" "+c.Reason+" "+c.Message)
		}
		data, err := json.Marshal([]any{n.Labels, n.Annotations, n.Spec, conds})
		if err != nil {
			t.Fatal(err)
		}
		out[n.Name] = string(data)
	}
	return out
}

// dryRunChangesNothing runs `maintenance start src-amd --dry-run` with the
// built node-agent and checks that no Node changed.
func (b *placementBed) dryRunChangesNothing(t *testing.T) {
	t.Helper()
	before := b.nodeVersions(t)
	cmd := exec.CommandContext(t.Context(), agentBinary, "maintenance", "start", srcAMD, "--dry-run", "--kubeconfig", b.env.KubeconfigPath())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("maintenance start --dry-run: %v\n%s", err, stderr.String())
	}
	t.Logf("maintenance start %s --dry-run (%v):\n%s%s", srcAMD, err, out, stderr.String())
	time.Sleep(time.Second) // a late write would show too
	after := b.nodeVersions(t)
	for name, rv := range before {
		if after[name] != rv {
			t.Errorf("Node %s changed during a dry run:\n%s\nwas\n%s", name, after[name], rv)
		}
	}
}

// TestVMPlacementBed checks the bed itself with hand-made pods: the
// scheduler sees exactly the bed's Nodes, binds a plain launcher-like pod
// pinned to amd-1, leaves one pinned to the draining node Pending with
// the taint as reason, and keeps a pod off the node of a launcher pod it
// is anti-affine to by kubevirt.io/created-by. A dry run changes no Node.
func TestVMPlacementBed(t *testing.T) {
	b := newPlacementBed(t)
	uid := b.createVM(t, "hand", srcAMD, nil, nil, "", nil)
	pin := func(node string) *corev1.Pod {
		p := launcherPod("target", node, uid, nil, "", map[string]string{corev1.LabelHostname: node})
		p.Name, p.GenerateName = "", "target-"
		return p
	}
	if o := b.schedule(t, pin(amd1), false); o.Node != amd1 {
		t.Errorf("pinned to %s: %s", amd1, o)
	}
	o := b.schedule(t, pin(draining), false)
	t.Logf("pinned to %s: %s", draining, o)
	// The draining and the tainted node fail on their taints, the cordoned
	// one on its cordon, every other on the pod's node selector.
	want := "0/15 nodes are available: 1 node(s) were unschedulable, 12 node(s) didn't match Pod's node affinity/selector, 2 node(s) had untolerated taint(s)"
	if filterPart(o.Message) != want {
		t.Errorf("pinned to %s: filter part %q, want %q", draining, filterPart(o.Message), want)
	}
	anti := pin(srcAMD)
	anti.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey:   corev1.LabelHostname,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubevirt.io/created-by": string(uid)}},
	}}}}
	o = b.schedule(t, anti, false)
	t.Logf("pinned to the source, anti-affine to its launcher: %s", o)
	if !strings.Contains(o.Message, "1 node(s) didn't match pod anti-affinity rules") {
		t.Errorf("anti-affinity to the source launcher: %s", o)
	}
	b.dryRunChangesNothing(t)
}
