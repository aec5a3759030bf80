package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/ownnode"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/test/testenv"
)

// The reboot controller's part of deploy/: its component, and what the
// admission policy lets the agent change on its Node for it.

// rebootMountPath is where deploy/components/reboot mounts the host's /run.
const rebootMountPath = "/host/run"

// applyRebootComponent renders deploy/ with components/reboot, checks the
// DaemonSet it makes, and dry-runs it server-side (not for real: the new
// flags would restart the agents' pods that the next subtests use). overlay
// is a scratch directory and base the path of deploy/ relative to it.
func (b *deployBed) applyRebootComponent(t *testing.T, overlay, base string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(fmt.Sprintf(
		"resources: [%q]\ncomponents: [%q]\n", base, filepath.Join(base, "components", "reboot"))), 0o600); err != nil {
		t.Fatal(err)
	}
	rendered, err := b.run(t, nil, "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	testenv.DeployObject(t, testenv.DecodeObjects(t, rendered), "DaemonSet", agentNamespace, "node-agent", &ds)
	ctr := ds.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"--reboot-enabled=true", "--reboot-sentinel-file=" + rebootMountPath + "/reboot-required"} {
		if !slices.Contains(ctr.Args, arg) {
			t.Errorf("the reboot component's DaemonSet args %q lack %s", ctr.Args, arg)
		}
	}
	// The coordinator refuses reboot slots while reboots are off in its
	// configuration: the component turns them on there too.
	var coord appsv1.Deployment
	testenv.DeployObject(t, testenv.DecodeObjects(t, rendered), "Deployment", agentNamespace, "node-agent-coordinator", &coord)
	if args := coord.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--reboot-enabled=true") {
		t.Errorf("the reboot component's coordinator args %q lack --reboot-enabled=true: it would refuse every reboot slot", args)
	}
	i := slices.IndexFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == rebootMountPath })
	if i < 0 {
		t.Fatalf("the reboot component's DaemonSet mounts nothing at %s: %+v", rebootMountPath, ctr.VolumeMounts)
	}
	m := ctr.VolumeMounts[i]
	j := slices.IndexFunc(ds.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
	if j < 0 {
		t.Fatalf("volume %s of the mount at %s is missing", m.Name, rebootMountPath)
	}
	if v := ds.Spec.Template.Spec.Volumes[j]; v.HostPath == nil || v.HostPath.Path != "/run" || !m.ReadOnly {
		t.Errorf("the mount at %s is not the host's /run read-only: %+v, %+v", rebootMountPath, m, v)
	}
	out, err := b.run(t, rendered, "apply", "--server-side", "--dry-run=server", "--field-manager=node-agent-install", "-f", "-")
	if err != nil {
		t.Fatalf("the reboot component, server-side dry run: %v", err)
	}
	t.Logf("reboot component, server-side dry run:\n%s", grepLines(string(out), "daemonset", 5))
}

// testRebootPrivilege: with a token bound to the agent's pod on node-1, the
// agent may write the coordinator's record and condition on node-1 and
// remove a reboot request there, and may neither ask for a reboot itself
// (set or change the request) nor touch node-2.
func (b *deployBed) testRebootPrivilege(t *testing.T) {
	ctx := t.Context()
	sa := b.tokenClient(t, b.boundToken(t, b.agentPod(t, "node-1")))
	annotate := func(key string, value any) any { return obj{"metadata": obj{"annotations": obj{key: value}}} }
	now := time.Now().UTC().Format(time.RFC3339)
	condition := func(status corev1.ConditionStatus, reason string) []byte {
		return fmt.Appendf(nil, `{"status":{"conditions":[{"type":%q,"status":%q,"reason":%q,"message":"deploy test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
			reboot.ConditionType, status, reason, now, now)
	}
	record := (&reboot.Record{State: reboot.Pending, Reason: string(reboot.WaitingForSlot), Message: "deploy test"}).Encode()
	const denied = "may only remove " + reboot.RequestAnnotation

	t.Run("allowed on its own node", func(t *testing.T) {
		wantAllowed(t, "write the reboot record on node-1", mergePatchNode(t, sa, "node-1", annotate(reboot.RecordAnnotation, record), false))
		_, err := sa.CoreV1().Nodes().PatchStatus(ctx, "node-1", condition(corev1.ConditionTrue, string(reboot.WaitingForSlot)))
		wantAllowed(t, "set the RebootRequired condition on node-1", err)

		// An admin asks for the reboot; the agent answers the request by
		// removing it.
		if err := mergePatchNode(t, b.c, "node-1", annotate(reboot.RequestAnnotation, "deploy test"), false); err != nil {
			t.Fatal(err)
		}
		wantAllowed(t, "remove the reboot request from node-1", mergePatchNode(t, sa, "node-1", annotate(reboot.RequestAnnotation, nil), false))
		if v, ok := getNode(t, b.c, "node-1").Annotations[reboot.RequestAnnotation]; ok {
			t.Errorf("the reboot request is still on node-1: %q", v)
		}

		wantAllowed(t, "remove the reboot record from node-1", mergePatchNode(t, sa, "node-1", annotate(reboot.RecordAnnotation, nil), false))
		_, err = sa.CoreV1().Nodes().PatchStatus(ctx, "node-1", fmt.Appendf(nil, `{"status":{"conditions":[{"type":%q,"$patch":"delete"}]}}`, reboot.ConditionType))
		wantAllowed(t, "remove the RebootRequired condition from node-1", err)
	})

	t.Run("denied", func(t *testing.T) {
		wantDenied(t, "ask for node-1's reboot (the admins' annotation)",
			mergePatchNode(t, sa, "node-1", annotate(reboot.RequestAnnotation, "self-inflicted"), false), denied)

		if err := mergePatchNode(t, b.c, "node-1", annotate(reboot.RequestAnnotation, "by an admin"), false); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, "change an admin's reboot request on node-1",
			mergePatchNode(t, sa, "node-1", annotate(reboot.RequestAnnotation, "by the agent"), false), denied)
		if v := getNode(t, b.c, "node-1").Annotations[reboot.RequestAnnotation]; v != "by an admin" {
			t.Errorf("node-1's reboot request is %q, want the admin's", v)
		}
		if err := mergePatchNode(t, b.c, "node-1", annotate(reboot.RequestAnnotation, nil), false); err != nil {
			t.Fatal(err)
		}

		wantDenied(t, "write the reboot record on node-2",
			mergePatchNode(t, sa, "node-2", annotate(reboot.RecordAnnotation, record), false), "may change only that Node, not node-2")
		_, err := sa.CoreV1().Nodes().PatchStatus(ctx, "node-2", condition(corev1.ConditionTrue, string(reboot.Rebooting)))
		wantDenied(t, "set RebootRequired on node-2", err, "may change only that Node, not node-2")
		if err := mergePatchNode(t, b.c, "node-2", annotate(reboot.RequestAnnotation, "by an admin"), false); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, "remove node-2's reboot request",
			mergePatchNode(t, sa, "node-2", annotate(reboot.RequestAnnotation, nil), false), "may change only that Node, not node-2")
		if err := mergePatchNode(t, b.c, "node-2", annotate(reboot.RequestAnnotation, nil), false); err != nil {
			t.Fatal(err)
		}
	})

	n1 := getNode(t, b.c, "node-1")
	for _, k := range []string{reboot.RecordAnnotation, reboot.RequestAnnotation} {
		if v, ok := n1.Annotations[k]; ok {
			t.Errorf("node-1 keeps %s=%q after the test", k, v)
		}
	}
	if slices.ContainsFunc(n1.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == reboot.ConditionType }) {
		t.Errorf("node-1 keeps the %s condition after the test", reboot.ConditionType)
	}
}

// testRebootPendingTaintPrivilege: with a token bound to the agent's pod on
// node-1, the agent may add and remove the reboot controller's taint
// (reboot.PendingTaintKey, PreferNoSchedule) on node-1 with the very write
// the controller makes (pkg/ownnode: the whole taint list, conditional on
// the resourceVersion), and may add no other key with PreferNoSchedule,
// not that key with another effect, nor that taint on node-2.
func (b *deployBed) testRebootPendingTaintPrivilege(t *testing.T) {
	ctx := t.Context()
	nodes := kubetest.Wrap(b.tokenClient(t, b.boundToken(t, b.agentPod(t, "node-1")))).CoreV1().Nodes()
	pending := corev1.Taint{Key: reboot.PendingTaintKey, Effect: reboot.PendingTaintEffect}
	write := func(node string, mutate func(*corev1.Node) bool) error {
		_, err := ownnode.Update(ctx, nodes, node, nil, ownnode.Write{FieldManager: reboot.FieldManager},
			func(n *corev1.Node) (bool, error) { return mutate(n), nil })
		return err
	}
	has := func(node string, key string, effect corev1.TaintEffect) bool {
		return ownnode.HasTaint(getNode(t, b.c, node), key, effect)
	}
	before := getNode(t, b.c, "node-1").Spec.Taints
	if len(before) == 0 || has("node-1", pending.Key, pending.Effect) {
		t.Fatalf("node-1's taints %v: want someone else's to keep (so that the test shows they stay), and no %s yet", before, pending.Key)
	}

	t.Run("allowed on its own node", func(t *testing.T) {
		wantAllowed(t, "add the reboot-pending taint to node-1", write("node-1", func(n *corev1.Node) bool { return ownnode.AddTaint(n, pending) }))
		if !has("node-1", pending.Key, pending.Effect) {
			t.Fatalf("node-1 lacks %s:%s after the write", pending.Key, pending.Effect)
		}
		wantAllowed(t, "remove it again", write("node-1", func(n *corev1.Node) bool { return ownnode.RemoveTaint(n, pending.Key, pending.Effect) }))
		if has("node-1", pending.Key, pending.Effect) {
			t.Fatalf("node-1 keeps %s:%s after its removal", pending.Key, pending.Effect)
		}
	})

	t.Run("denied", func(t *testing.T) {
		const others = "other taints must stay as they are"
		for _, taint := range []corev1.Taint{
			{Key: "example.com/reboot-pending", Effect: corev1.TaintEffectPreferNoSchedule},
			{Key: pending.Key, Effect: corev1.TaintEffectNoSchedule},
			{Key: pending.Key, Effect: corev1.TaintEffectNoExecute},
		} {
			wantDenied(t, fmt.Sprintf("add %s:%s to node-1", taint.Key, taint.Effect),
				write("node-1", func(n *corev1.Node) bool { return ownnode.AddTaint(n, taint) }), others)
		}
		// An admin's PreferNoSchedule taint of another key, and the key
		// with NoSchedule, are not the agent's to remove.
		admin := []corev1.Taint{{Key: "example.com/soft", Effect: corev1.TaintEffectPreferNoSchedule}, {Key: pending.Key, Effect: corev1.TaintEffectNoSchedule}}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n := getNode(t, b.c, "node-1")
			n.Spec.Taints = append(n.Spec.Taints, admin...)
			_, err := b.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, taint := range admin {
			wantDenied(t, fmt.Sprintf("remove an admin's %s:%s from node-1", taint.Key, taint.Effect),
				write("node-1", func(n *corev1.Node) bool { return ownnode.RemoveTaint(n, taint.Key, taint.Effect) }), others)
		}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n := getNode(t, b.c, "node-1")
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(x corev1.Taint) bool { return slices.Contains(admin, corev1.Taint{Key: x.Key, Effect: x.Effect}) })
			_, err := b.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}

		const other = "may change only that Node, not node-2"
		wantDenied(t, "add the reboot-pending taint to node-2", write("node-2", func(n *corev1.Node) bool { return ownnode.AddTaint(n, pending) }), other)
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n := getNode(t, b.c, "node-2")
			ownnode.AddTaint(n, pending)
			_, err := b.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, "remove node-2's reboot-pending taint", write("node-2", func(n *corev1.Node) bool { return ownnode.RemoveTaint(n, pending.Key, pending.Effect) }), other)
		if !has("node-2", pending.Key, pending.Effect) {
			t.Error("node-2 lost its reboot-pending taint to node-1's token")
		}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n := getNode(t, b.c, "node-2")
			ownnode.RemoveTaint(n, pending.Key, pending.Effect)
			_, err := b.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	})

	// Other controllers may change their own taints meanwhile; none of
	// this test's is left.
	for _, x := range getNode(t, b.c, "node-1").Spec.Taints {
		if x.Key == pending.Key || strings.HasPrefix(x.Key, "example.com/") {
			t.Errorf("node-1 keeps %s:%s after the test", x.Key, x.Effect)
		}
	}
}
