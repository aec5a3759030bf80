package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/events"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestKubeClient runs every call of pkg/kube's own client (the one the agent
// ships with, not client-go's clientset) against a real kube-apiserver, and
// reads each effect back through client-go's clientset.
func TestKubeClient(t *testing.T) {
	env := testenv.StartForTest(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := env.Client()
	cfg := env.RESTConfig()
	cfg.QPS, cfg.Burst = 50, 100
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const ns, node = "kube-client", "kube-client-node"
	if _, err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// No kube-controller-manager here to make the default ServiceAccount
	// that pods need.
	if _, err := ref.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := ref.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("nodes", func(t *testing.T) {
		w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != node {
			t.Fatalf("List = %v, %v; want the one Node %s", list, err, node)
		}
		if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"metadata":{"labels":{"kube-client":"patched"}}}`), metav1.PatchOptions{FieldManager: "kube-client-test"}); err != nil {
			t.Fatal(err)
		}
		status, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: "KubeClientTest", Status: corev1.ConditionTrue, Reason: "Patched", LastTransitionTime: metav1.Now()}}}})
		if _, err := c.CoreV1().Nodes().PatchStatus(ctx, node, status); err != nil {
			t.Fatal(err)
		}
		got, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		back, err := ref.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != back.ResourceVersion || back.Labels["kube-client"] != "patched" || len(back.Status.Conditions) != 1 || back.Status.Conditions[0].Reason != "Patched" {
			t.Fatalf("after Patch and PatchStatus: Get rv %s, clientset rv %s, labels %v, conditions %v", got.ResourceVersion, back.ResourceVersion, back.Labels, back.Status.Conditions)
		}
		select {
		case ev := <-w.ResultChan():
			if n, ok := ev.Object.(*corev1.Node); ev.Type != watch.Added || !ok || n.Name != node {
				t.Fatalf("first watch event = %s %T, want ADDED *v1.Node %s", ev.Type, ev.Object, node)
			}
		case <-ctx.Done():
			t.Fatal("no watch event")
		}
	})

	t.Run("pods, eviction and budgets", func(t *testing.T) {
		for _, name := range []string{"evicted", "deleted"} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "kube-client"}},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}}}
			if _, err := ref.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "kube-client", Namespace: ns},
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}}}
		if _, err := ref.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, LabelSelector: "app=kube-client"})
		if err != nil || len(pods.Items) != 2 {
			t.Fatalf("List pods on %s = %v, %v; want 2", node, pods, err)
		}
		pdbs, err := c.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil || len(pdbs.Items) != 1 || pdbs.Items[0].Name != "kube-client" {
			t.Fatalf("List PodDisruptionBudgets = %v, %v; want kube-client", pdbs, err)
		}
		// No budget selects the pod: the eviction is granted and deletes it.
		if err := c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "evicted", Namespace: ns}}); err != nil {
			t.Fatalf("Evict: %v", err)
		}
		uid := pods.Items[1].UID
		if pods.Items[1].Name != "deleted" {
			uid = pods.Items[0].UID
		}
		if err := c.CoreV1().Pods(ns).Delete(ctx, "deleted", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"evicted", "deleted"} {
			p, err := ref.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) && (err != nil || p.DeletionTimestamp == nil) {
				t.Errorf("pod %s after eviction or deletion: %v, deletionTimestamp %v", name, err, p.DeletionTimestamp)
			}
		}
		if err := c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "never-was", Namespace: ns}}); !apierrors.IsNotFound(err) {
			t.Errorf("Evict of a missing pod = %v, want NotFound", err)
		}
	})

	t.Run("leases", func(t *testing.T) {
		// What the coordinator does with the slot Leases: create one whole,
		// list them by label, delete one.
		leases := c.CoordinationV1().Leases(ns)
		slot := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "slot", Labels: map[string]string{"slot": "true"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a")}}
		if _, err := leases.Create(ctx, slot, metav1.CreateOptions{FieldManager: "kube-client"}); err != nil {
			t.Fatal(err)
		}
		if _, err := leases.Create(ctx, slot, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Errorf("Create of an existing Lease = %v, want AlreadyExists", err)
		}
		other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
		if _, err := leases.Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: "slot=true"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != "slot" || ptr.Deref(list.Items[0].Spec.HolderIdentity, "") != "a" {
			t.Fatalf("List by label = %v, %v; want the Lease slot, held by a", list, err)
		}
		if err := leases.Delete(ctx, "slot", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := leases.Delete(ctx, "slot", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Delete of a deleted Lease = %v, want NotFound", err)
		}
		if _, err := ref.CoordinationV1().Leases(ns).Get(ctx, "slot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the deleted Lease: %v, want NotFound", err)
		}
	})

	t.Run("daemonsets", func(t *testing.T) {
		if _, err := c.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Get of a missing DaemonSet = %v, want NotFound", err)
		}
		if _, err := ref.AppsV1().DaemonSets(ns).Create(ctx, testenv.NewDaemonSet(ns, "agent"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ds, err := c.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil || ds.Name != "agent" {
			t.Fatalf("Get = %v, %v", ds, err)
		}
	})

	t.Run("events", func(t *testing.T) {
		// A Node's Events go to the namespace of the Event, whatever the
		// namespace of the client (the writer asks for ""); a repeat is
		// counted into the Event already written, by a patch.
		w := events.NewWriter(events.Options{Sink: c.CoreV1().Events(""), Source: corev1.EventSource{Component: "node-agent", Host: node}})
		w.Start(ctx)
		w.Event(kube.NodeReference(node), corev1.EventTypeNormal, "KubeClientTest", "first")
		w.Event(kube.NodeReference(node), corev1.EventTypeNormal, "KubeClientTest", "first")
		w.Event(kube.NodeReference(node), corev1.EventTypeWarning, "KubeClientTest", "second")
		w.Stop()
		list, err := ref.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "reason=KubeClientTest"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int32{}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != node || ev.Source.Host != node || ev.ReportingController != "node-agent" {
				t.Errorf("Event %s: involved %+v, source %+v, reporting %q", ev.Name, ev.InvolvedObject, ev.Source, ev.ReportingController)
			}
			got[ev.Type+" "+ev.Message] += ev.Count
		}
		if len(list.Items) != 2 || got["Normal first"] != 2 || got["Warning second"] != 1 {
			t.Fatalf("Events %v in %d objects; want first counted twice in one and second once", got, len(list.Items))
		}
	})

	t.Run("discovery", func(t *testing.T) {
		list, err := c.Discovery().ServerResourcesForGroupVersion("coordination.k8s.io/v1")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range list.APIResources {
			found = found || r.Name == "leases"
		}
		if !found || list.GroupVersion != "coordination.k8s.io/v1" {
			t.Fatalf("coordination.k8s.io/v1 resources = %+v; want leases", list)
		}
		if _, err := c.Discovery().ServerResourcesForGroupVersion("v1"); err != nil {
			t.Fatalf("core v1: %v", err)
		}
		if _, err := c.Discovery().ServerResourcesForGroupVersion("nodemaintenance.medik8s.io/v1beta1"); !apierrors.IsNotFound(err) {
			t.Fatalf("a group the cluster does not serve = %v, want NotFound", err)
		}
	})
}
