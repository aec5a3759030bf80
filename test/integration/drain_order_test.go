package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/selfdrain/podorder"
	"github.com/node-agent/node-agent/test/testenv"
)

// orderRules are the drain.podRules of TestDrainOrderAndWaitCompleted.
const orderRules = `[` +
	`{"name":"front","podSelector":"tier=front","behavior":"Drain","order":-10},` +
	`{"name":"db","namespaces":["work"],"podSelector":"app=db","behavior":"Drain","order":10},` +
	`{"name":"batch","podSelector":"kind=batch","behavior":"WaitCompleted"}]`

// orderGroups are its pods that are evicted, by order group, in the order
// the groups must leave: front (-10, a rule), web (0, no rule), late (5,
// the pod's own annotation), db (10, a rule).
var orderGroups = [][]string{{"front-1", "front-2"}, {"web-1", "web-2"}, {"late-1"}, {"db-1", "db-2"}}

// TestDrainOrderAndWaitCompleted is issue 44's acceptance of item 4 on the
// real control plane: pods with order rules leave in that order, each group
// gone before the next is evicted, as the apiserver's audit log shows; a
// WaitCompleted pod (by a rule, and by its own annotation) is never evicted,
// and the drain ends (Succeeded) only once each has completed; a Skip pod
// stays and does not hold the drain.
func TestDrainOrderAndWaitCompleted(t *testing.T) {
	env, auditLog := auditedOrderBed(t)
	ctx := t.Context()
	c := env.Client()
	const ns = orderNamespace

	// Each evicted pod takes two seconds to go once its eviction is
	// accepted (kwok's pod-delete Stage waits): a drain that started a
	// group before the previous one was gone would evict it within
	// milliseconds of that group's evictions, before their deletions.
	gone := map[string]string{testenv.PodDeleteDelayAnnotation: "2s"}
	pods := []*corev1.Pod{
		orderPod(ns, "front-1", map[string]string{"tier": "front"}, gone),
		orderPod(ns, "front-2", map[string]string{"tier": "front"}, gone),
		orderPod(ns, "web-1", map[string]string{"app": "web"}, gone),
		orderPod(ns, "web-2", map[string]string{"app": "web"}, gone),
		orderPod(ns, "late-1", nil, merge(gone, map[string]string{podorder.DrainOrderAnnotation: "5"})),
		orderPod(ns, "db-1", map[string]string{"app": "db"}, gone),
		orderPod(ns, "db-2", map[string]string{"app": "db"}, gone),
		orderPod(ns, "job-rule", map[string]string{"kind": "batch"}, nil),
		orderPod(ns, "job-annotated", nil, map[string]string{podorder.DrainBehaviorAnnotation: "WaitCompleted"}),
		orderPod(ns, "skip-1", nil, map[string]string{podorder.DrainBehaviorAnnotation: "Skip"}),
	}
	for _, p := range pods {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitRunningOn(ctx, t, c, ns, "node-1", len(pods))

	agent := startAgent(t, env, "node-1", "--drain-pod-rules", orderRules)
	agent.WaitReady(t)
	if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "order test"); err != nil {
		t.Fatal(err)
	}

	// Every pod the drain evicts is gone, and the drain, still Running,
	// says it waits for the two WaitCompleted pods.
	var st *selfdrain.Status
	testenv.WaitFor(t, 3*time.Minute, "the evicted pods gone and the drain waiting for the WaitCompleted pods", func() (bool, error) {
		left, err := testenv.PodsOn(ctx, c, ns, "node-1")
		if err != nil {
			return false, err
		}
		st = nodeStatus(t, c, "node-1")
		if st == nil || len(left) != 3 {
			return false, nil
		}
		if st.Phase == selfdrain.PhaseSucceeded || st.Phase == selfdrain.PhaseFailed {
			return false, testenv.StopPolling(fmt.Errorf("phase %s with the WaitCompleted pods still running: %s", st.Phase, st.Encode()))
		}
		if st.Phase != selfdrain.PhaseRunning {
			return false, nil
		}
		return slices.Equal(st.PendingPods, []string{ns + "/job-annotated", ns + "/job-rule"}) &&
			strings.Contains(st.LastError, "WaitCompleted pods to complete: "+ns+"/job-annotated, "+ns+"/job-rule") &&
			len(st.Blockers) == 2 && st.Blockers[0].Reason == selfdrain.BlockerWaitCompleted && st.Blockers[1].Reason == selfdrain.BlockerWaitCompleted, nil
	})
	t.Logf("waiting for the WaitCompleted pods: %s", st.Encode())

	// One completes: the drain goes on waiting for the other.
	complete(t, c, ns, "job-rule", corev1.PodSucceeded)
	testenv.WaitFor(t, time.Minute, "the drain waiting for job-annotated alone", func() (bool, error) {
		st = nodeStatus(t, c, "node-1")
		if st.Phase != selfdrain.PhaseRunning {
			return false, testenv.StopPolling(fmt.Errorf("phase %s with job-annotated still running: %s", st.Phase, st.Encode()))
		}
		return slices.Equal(st.PendingPods, []string{ns + "/job-annotated"}), nil
	})
	// The other fails, which completes it too: the drain ends.
	complete(t, c, ns, "job-annotated", corev1.PodFailed)
	testenv.WaitFor(t, time.Minute, "phase Succeeded", func() (bool, error) {
		st = nodeStatus(t, c, "node-1")
		return st.Phase == selfdrain.PhaseSucceeded, nil
	})
	t.Logf("drained: %s", st.Encode())
	if st.LastError != "" || len(st.PendingPods) != 0 || st.EvictionPods != 9 {
		t.Errorf("final record %s: want no error, nothing pending, 9 pods to evict or wait for (the Skip pod not counted)", st.Encode())
	}
	if _, err := c.CoreV1().Pods(ns).Get(ctx, "skip-1", metav1.GetOptions{}); err != nil {
		t.Errorf("the Skip pod: %v, want it left on node-1", err)
	}

	// The audit log: who was evicted, when, and when each pod went.
	audit := testenv.NewAuditReader(auditLog, "")
	var tl map[string]*testenv.PodTimeline
	testenv.WaitFor(t, 30*time.Second, "every evicted pod's deletion in the audit log", func() (bool, error) {
		if err := audit.Read(); err != nil {
			return false, err
		}
		tl = testenv.PodTimelines(audit.Events(), ns)
		for _, g := range orderGroups {
			for _, name := range g {
				if tl[name] == nil || tl[name].Deleted.IsZero() {
					return false, nil
				}
			}
		}
		return true, nil
	})
	for _, name := range []string{"job-rule", "job-annotated", "skip-1"} {
		if p := tl[name]; p != nil && (len(p.Evicted) > 0 || p.Refused > 0) {
			t.Errorf("%s was asked to leave (%d accepted, %d refused evictions); it must never be", name, len(p.Evicted), p.Refused)
		}
	}
	var lines []string
	for i, g := range orderGroups {
		for _, name := range g {
			p := tl[name]
			lines = append(lines, fmt.Sprintf("  group %d  %-8s evicted %s  deleted %s", i, name, p.FirstEvicted().Format("15:04:05.000000"), p.Deleted.Format("15:04:05.000000")))
			if len(p.Evicted) == 0 {
				t.Errorf("%s: no accepted eviction in the audit log", name)
			}
		}
	}
	t.Logf("audit log, evictions and deletions by order group:\n%s", strings.Join(lines, "\n"))
	for i := 1; i < len(orderGroups); i++ {
		var lastGone time.Time
		var lastName string
		for _, name := range orderGroups[i-1] {
			if d := tl[name].Deleted; d.After(lastGone) {
				lastGone, lastName = d, name
			}
		}
		for _, name := range orderGroups[i] {
			if first := tl[name].FirstEvicted(); !first.After(lastGone) {
				t.Errorf("%s (group %d) was evicted at %s, before %s of group %d was deleted at %s",
					name, i, first.Format(time.StampMicro), lastName, i-1, lastGone.Format(time.StampMicro))
			}
		}
	}
}

// orderPod is a bare pod on node-1, which a drain evicts (--force).
func orderPod(ns, name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}},
			Tolerations: []corev1.Toleration{testenv.KwokToleration()}},
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// complete sets the pod's phase to Succeeded or Failed through the status
// subresource, as kwok would for a pod whose containers ended.
func complete(t *testing.T, c kubernetes.Interface, ns, name string, phase corev1.PodPhase) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "pod "+name+" marked "+string(phase), func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p.Status.Phase = phase
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		if _, err := c.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			return false, nil // kwok wrote it meanwhile: read it again
		} else if err != nil {
			return false, err
		}
		return true, nil
	})
}

// TestDrainDoNotDrain: a pod's opt-out (node-agent.io/do-not-drain) holds
// its eviction until its end, counted from the pod's creation and cut to
// drain.doNotDrainBound, as the audit log shows; meanwhile the record says
// what the drain waits for; a malformed opt-out holds nothing, and a
// Warning Event says so.
func TestDrainDoNotDrain(t *testing.T) {
	// In parallel (main_test.go): most of it is waiting out the bound.
	t.Parallel()
	env, auditLog := auditedOrderBed(t)
	ctx := t.Context()
	c := env.Client()
	const ns = orderNamespace
	const bound = 30 * time.Second
	agent := startAgent(t, env, "node-1", "--drain-do-not-drain-bound", bound.String())
	agent.WaitReady(t)

	// Four hours asked, the bound honoured.
	held := orderPod(ns, "held", nil, map[string]string{podorder.DoNotDrainAnnotation: "4h"})
	bad := orderPod(ns, "bad", nil, map[string]string{podorder.DoNotDrainAnnotation: "forever"})
	for _, p := range []*corev1.Pod{bad, held} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitRunningOn(ctx, t, c, ns, "node-1", 2)
	if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "opt-out test"); err != nil {
		t.Fatal(err)
	}
	created, err := c.CoreV1().Pods(ns).Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	until := created.CreationTimestamp.Add(bound)

	// bad is evicted at once; held stays, and the record says until when.
	var st *selfdrain.Status
	testenv.WaitFor(t, time.Minute, "bad gone, held opted out", func() (bool, error) {
		if _, err := c.CoreV1().Pods(ns).Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, err
		}
		st = nodeStatus(t, c, "node-1")
		if st == nil || st.Phase != selfdrain.PhaseRunning {
			if st != nil && st.Phase == selfdrain.PhaseSucceeded {
				return false, testenv.StopPolling(fmt.Errorf("the drain ended before held's opt-out was seen: %s", st.Encode()))
			}
			return false, nil
		}
		return len(st.Blockers) == 1 && st.Blockers[0].Pod == ns+"/held" && st.Blockers[0].Reason == selfdrain.BlockerDoNotDrain &&
			strings.Contains(st.LastError, "opt-outs (node-agent.io/do-not-drain) to end: "+ns+"/held (until "+until.UTC().Format(time.RFC3339)+")"), nil
	})
	t.Logf("while held is opted out: %s", st.Encode())
	testenv.WaitFor(t, 2*time.Minute, "phase Succeeded", func() (bool, error) {
		st = nodeStatus(t, c, "node-1")
		return st.Phase == selfdrain.PhaseSucceeded, nil
	})

	audit := testenv.NewAuditReader(auditLog, "")
	var tl map[string]*testenv.PodTimeline
	testenv.WaitFor(t, 30*time.Second, "both evictions in the audit log", func() (bool, error) {
		if err := audit.Read(); err != nil {
			return false, err
		}
		tl = testenv.PodTimelines(audit.Events(), ns)
		return !tl["held"].FirstEvicted().IsZero() && !tl["bad"].FirstEvicted().IsZero(), nil
	})
	t.Logf("held created %s, opt-out cut to %s; first eviction of held received %s, of bad %s",
		created.CreationTimestamp.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339),
		tl["held"].FirstEvicted().UTC().Format(time.RFC3339Nano), tl["bad"].FirstEvicted().UTC().Format(time.RFC3339Nano))
	// creationTimestamp has whole seconds: held was created within the
	// second before it says.
	if first := tl["held"].FirstEvicted(); first.Before(until) {
		t.Errorf("held was evicted at %s, before its opt-out ended at %s", first.UTC().Format(time.RFC3339Nano), until.UTC().Format(time.RFC3339))
	}
	if r := tl["held"].Refused + tl["bad"].Refused; r != 0 {
		t.Errorf("%d evictions refused; none was asked before its time", r)
	}
	testenv.WaitFor(t, 30*time.Second, "a Warning PodAnnotationIgnored naming bad and the cut opt-out", func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node-1,reason=PodAnnotationIgnored"})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, `pod work/bad: node-agent.io/do-not-drain "forever" ignored`) &&
				strings.Contains(ev.Message, `pod work/held: node-agent.io/do-not-drain "4h" cut to drain.doNotDrainBound 30s`) {
				t.Logf("Event: %s", ev.Message)
				return true, nil
			}
		}
		return false, nil
	})
}

// orderNamespace holds the pods of the drain order tests.
const orderNamespace = "work"

// auditedOrderBed starts a control plane whose audit log records the pods'
// evictions and deletions, with the agent's identity installed, the
// namespace orderNamespace and the node node-1; it returns the audit log's
// path.
func auditedOrderBed(t *testing.T) (*testenv.Env, string) {
	t.Helper()
	opts := testenv.Options{Controllers: true, Scheduler: true, Kwok: true}
	var auditLog string
	var err error
	if opts.APIServerArgs, auditLog, err = testenv.AuditLog(t.TempDir(), testenv.PodsAuditPolicy); err != nil {
		t.Fatal(err)
	}
	env := testenv.StartForTest(t, opts)
	if _, err := env.CreateNamespace(t.Context(), orderNamespace); err != nil {
		t.Fatal(err)
	}
	installAgentIdentity(t, env)
	if err := env.AddNode(t.Context(), "node-1"); err != nil {
		t.Fatal(err)
	}
	return env, auditLog
}
