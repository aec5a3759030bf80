package ownnode

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

func node(taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1", Annotations: map[string]string{"a": "old", "other": "keep"}},
		Spec:       corev1.NodeSpec{Taints: taints},
	}
}

var (
	admin   = corev1.Taint{Key: "admin", Effect: corev1.TaintEffectNoSchedule}
	drain   = corev1.Taint{Key: "kubevirt.io/drain", Value: "draining", Effect: corev1.TaintEffectNoSchedule}
	pending = corev1.Taint{Key: "node-agent.io/reboot-pending", Effect: corev1.TaintEffectPreferNoSchedule}
)

// patches records the merge patches sent to the fake clientset.
func patches(cs *fake.Clientset) *[]map[string]any {
	var out []map[string]any
	cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var m map[string]any
		_ = json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &m)
		out = append(out, m)
		return false, nil, nil
	})
	return &out
}

func TestUpdateWritesOnlySpecAndTheNamedAnnotations(t *testing.T) {
	cs := fake.NewClientset(node(admin))
	sent := patches(cs)
	out, err := Update(t.Context(), kubetest.Wrap(cs).CoreV1().Nodes(), "n", nil, Write{FieldManager: "fm", Cordon: true, Annotations: []string{"a"}},
		func(n *corev1.Node) (bool, error) {
			n.Spec.Unschedulable = true
			n.Annotations["a"] = "new"
			n.Annotations["other"] = "changed, not sent"
			n.Labels = map[string]string{"not": "sent"}
			return AddTaint(n, drain), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(*sent) != 1 {
		t.Fatalf("%d patches, want 1", len(*sent))
	}
	p := (*sent)[0]
	meta := p["metadata"].(map[string]any)
	if meta["resourceVersion"] == nil || meta["labels"] != nil {
		t.Errorf("metadata patched: %v; want the resourceVersion and the named annotation only", meta)
	}
	if a := meta["annotations"].(map[string]any); len(a) != 1 || a["a"] != "new" {
		t.Errorf("annotations patched: %v; want only a=new", a)
	}
	if !out.Spec.Unschedulable || len(out.Spec.Taints) != 2 || out.Spec.Taints[0].Key != "admin" || out.Spec.Taints[1].Key != drain.Key {
		t.Errorf("Node after the write: %+v; want cordoned, the admin's taint then the drain taint", out.Spec)
	}
	if out.Annotations["other"] != "keep" || out.Labels["not"] != "" {
		t.Errorf("a field the write does not own changed: %v %v", out.Annotations, out.Labels)
	}
}

// Without Cordon and annotations, only the taints are sent: a writer that
// owns no cordon cannot write back one it read before it changed.
func TestUpdateWithoutCordonAndAnnotationsSendsTheTaintsAlone(t *testing.T) {
	cs := fake.NewClientset(node(admin, pending))
	sent := patches(cs)
	out, err := Update(t.Context(), kubetest.Wrap(cs).CoreV1().Nodes(), "n", nil, Write{FieldManager: "fm"},
		func(n *corev1.Node) (bool, error) { return RemoveTaint(n, pending.Key, pending.Effect), nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := (*sent)[0]["metadata"].(map[string]any)["annotations"]; ok {
		t.Errorf("annotations sent: %v", (*sent)[0])
	}
	if spec := (*sent)[0]["spec"].(map[string]any); len(spec) != 1 || spec["taints"] == nil {
		t.Errorf("spec sent: %v; want the taints alone", spec)
	}
	if len(out.Spec.Taints) != 1 || out.Spec.Taints[0].Key != "admin" {
		t.Errorf("taints: %+v; want the admin's alone", out.Spec.Taints)
	}
	// The last taint removed: the list is sent empty, not left out, so that
	// the merge patch clears it.
	if _, err := Update(t.Context(), kubetest.Wrap(cs).CoreV1().Nodes(), "n", nil, Write{},
		func(n *corev1.Node) (bool, error) { return RemoveTaint(n, "admin", corev1.TaintEffectNoSchedule), nil }); err != nil {
		t.Fatal(err)
	}
	if taints := (*sent)[1]["spec"].(map[string]any)["taints"]; taints == nil || len(taints.([]any)) != 0 {
		t.Errorf("taints sent: %v; want []", taints)
	}
}

func TestUpdateSkipsTheWriteWhenMutateSaysSo(t *testing.T) {
	cs := fake.NewClientset(node())
	sent := patches(cs)
	out, err := Update(t.Context(), kubetest.Wrap(cs).CoreV1().Nodes(), "n", nil, Write{},
		func(n *corev1.Node) (bool, error) { return RemoveTaint(n, pending.Key, pending.Effect), nil })
	if err != nil || out == nil || len(*sent) != 0 {
		t.Fatalf("Update = %v, %v with %d patches; want the Node read, no patch", out, err, len(*sent))
	}
	boom := errors.New("boom")
	if _, err := Update(t.Context(), kubetest.Wrap(cs).CoreV1().Nodes(), "n", nil, Write{},
		func(*corev1.Node) (bool, error) { return true, boom }); !errors.Is(err, boom) || len(*sent) != 0 {
		t.Errorf("mutate's error: %v, %d patches; want it returned, no patch", err, len(*sent))
	}
}

// A stale first copy costs one conflict; the retry reads the Node and
// mutates that, so the other writer's change stays.
func TestUpdateRetriesAConflictFromTheNodeRead(t *testing.T) {
	cs := fake.NewClientset(node(admin))
	conflicts := 1
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n", errors.New("stale"))
		}
		return false, nil, nil
	})
	stale := node()
	calls := 0
	out, err := Update(t.Context(), kubetest.Wrap(cs).CoreV1().Nodes(), "n", stale, Write{},
		func(n *corev1.Node) (bool, error) { calls++; return AddTaint(n, pending), nil })
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || len(out.Spec.Taints) != 2 || out.Spec.Taints[0].Key != "admin" {
		t.Errorf("after a conflict: %d mutations, taints %+v; want 2, the admin's kept", calls, out.Spec.Taints)
	}
	if len(stale.Spec.Taints) != 0 {
		t.Errorf("first was changed in place: %+v", stale.Spec.Taints)
	}
	if _, err := Update(t.Context(), kubetest.Wrap(cs).CoreV1().Nodes(), "missing", nil, Write{},
		func(*corev1.Node) (bool, error) { return true, nil }); err == nil || !strings.Contains(err.Error(), "updating Node missing") {
		t.Errorf("a missing Node: %v", err)
	}
}

func TestTaintHelpers(t *testing.T) {
	n := node(admin)
	if !AddTaint(n, pending) || AddTaint(n, corev1.Taint{Key: pending.Key, Value: "other", Effect: pending.Effect}) {
		t.Fatal("AddTaint: want added once, whatever the value")
	}
	if !HasTaint(n, pending.Key, corev1.TaintEffectPreferNoSchedule) || HasTaint(n, pending.Key, corev1.TaintEffectNoSchedule) {
		t.Error("HasTaint must match key and effect")
	}
	// The same key with another effect is another taint: kept.
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: pending.Key, Effect: corev1.TaintEffectNoExecute})
	if !RemoveTaint(n, pending.Key, pending.Effect) || RemoveTaint(n, pending.Key, pending.Effect) {
		t.Fatal("RemoveTaint: want removed once")
	}
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[0] != admin || n.Spec.Taints[1].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("taints left: %+v", n.Spec.Taints)
	}
	n = node(pending)
	if RemoveTaint(n, pending.Key, pending.Effect); n.Spec.Taints != nil {
		t.Errorf("the last taint removed leaves %+v; want nil", n.Spec.Taints)
	}
}
