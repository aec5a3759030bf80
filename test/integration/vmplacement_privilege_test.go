package integration

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/placement"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/vmdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestVMPlacementComponentPrivilege: what a token bound to node-1's agent
// pod may read for a VM's plan, without and with
// deploy/components/vm-placement, and what that component does not give.
// node-2 is full (a pod there requests nearly all its memory):
//   - without the component, the agent's own plan cannot see that, and says
//     so: node-2 is a target whose capacity is not checked;
//   - with it, the agent's plan rejects node-2 by NodeResourcesFit, as the
//     scheduler would;
//   - the component lets the token list pods and Namespaces, and nothing
//     more: no get, delete or eviction of another node's pod, no Secret, no
//     write to a Namespace.
func TestVMPlacementComponentPrivilege(t *testing.T) {
	b := newVMBed(t)
	dep := b.installAgent(t)
	ctx := t.Context()
	// node-2 takes Skylake-Server guests by its labels, but a pod there
	// leaves it 1Gi of memory.
	n2 := getNode(t, b.c, "node-2")
	left := n2.Status.Allocatable.Memory().DeepCopy()
	left.Sub(resource.MustParse("1Gi"))
	filler := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "vms"}, Spec: corev1.PodSpec{
		NodeName: "node-2", Tolerations: []corev1.Toleration{testenv.KwokToleration()},
		Containers: []corev1.Container{{Name: "c", Image: "filler", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: left}}}}}}
	if _, err := b.c.CoreV1().Pods("vms").Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.vmi(t, "big", "node-1", map[string]any{"evictionStrategy": "LiveMigrate",
		"domain": map[string]any{"cpu": map[string]any{"model": "Skylake-Server"},
			"resources": map[string]any{"requests": map[string]any{"memory": "4Gi"}}}}, true)

	token := dep.boundToken(t, dep.agentPod(t, "node-1"))
	ids, err := podaccess.NewIdentities(b.env.TokenConfig(token), "node-1", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	asSA := dep.tokenClient(t, token)
	dyn := dep.tokenDynamic(t, token)
	plan := func(t *testing.T) vmdrain.Report {
		t.Helper()
		r, err := vmdrain.Read(ctx, ids.ServiceAccount, dyn, "node-1", ids.Node)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Plans) != 1 {
			t.Fatalf("plans %+v, want one", r.Plans)
		}
		t.Logf("the agent's plan: %s %s targets %v: %s; note: %s", r.Plans[0].VM.Key(), r.Plans[0].Way, r.Plans[0].Targets, r.Plans[0].Why, r.Note)
		return r
	}

	t.Run("without the component", func(t *testing.T) {
		_, err := asSA.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		wantDenied(t, "list every pod", err, "forbidden")
		r := plan(t)
		p := r.Plans[0]
		if !slices.Contains(p.Targets, "node-2") || len(p.Placement.Unverified["node-2"]) == 0 {
			t.Errorf("targets %v, unverified %v: want node-2, its capacity not checked", p.Targets, p.Placement.Unverified)
		}
		if !strings.Contains(r.Note, "components/vm-placement") {
			t.Errorf("note %q does not say what the plan could not read", r.Note)
		}
	})

	dep.applyComponent(t, "vm-placement")
	testenv.WaitFor(t, time.Minute, "the vm-placement grant in force", func() (bool, error) {
		_, err := asSA.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})

	t.Run("with the component", func(t *testing.T) {
		r := plan(t)
		p := r.Plans[0]
		i := slices.IndexFunc(p.Placement.Rejected, func(rj placement.Rejection) bool { return rj.Node == "node-2" })
		if slices.Contains(p.Targets, "node-2") || i < 0 || p.Placement.Rejected[i].Plugin != placement.NodeResourcesFit {
			t.Errorf("targets %v, rejected %+v: want node-2 rejected by NodeResourcesFit", p.Targets, p.Placement.Rejected)
		}
		if strings.Contains(r.Note, "components/vm-placement") {
			t.Errorf("note %q: the plan still says it cannot read the pods", r.Note)
		}
	})

	t.Run("what the component does not give", func(t *testing.T) {
		_, err := asSA.CoreV1().Pods("vms").Get(ctx, "filler", metav1.GetOptions{})
		wantDenied(t, "get node-2's pod", err, "forbidden")
		dry := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		err = asSA.CoreV1().Pods("vms").Delete(ctx, "filler", dry)
		wantDenied(t, "delete node-2's pod", err, "forbidden")
		err = asSA.CoreV1().Pods("vms").EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "vms"},
			DeleteOptions: &dry})
		wantDenied(t, "evict node-2's pod", err, "forbidden")
		_, err = asSA.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		wantDenied(t, "list Secrets", err, "forbidden")
		_, err = asSA.CoreV1().Namespaces().Patch(ctx, "vms", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		wantDenied(t, "label a Namespace", err, "forbidden")
		_, err = asSA.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
		wantDenied(t, "watch every pod", err, "forbidden")
	})
}
