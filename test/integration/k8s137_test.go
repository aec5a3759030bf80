package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/evictionrequest"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/nodelifecycle"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// The 1.37 gates the tests turn on, and the API version EvictionRequests
// need on top of theirs.
var (
	gates137 = "--feature-gates=NodeLifecycleConditions=true,EvictionRequestAPI=true"
	erGVR    = evictionrequest.GroupVersion.WithResource(evictionrequest.Resource)
	podGVR   = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// testResponder is the eviction responder the test's pods name: a stand-in
// for one that moves a workload away first (a VM's live migration), then
// lets the pod go.
const testResponder = "test.node-agent.io/responder"

// TestKubernetes137MaintenanceAPIs runs a maintenance on kube-apiserver
// v1.37.2 with the NodeLifecycleConditions and EvictionRequestAPI gates on
// and drain.evictionAPI evictionRequest, as deploy/ and
// deploy/components/eviction-requests ship it:
//   - the KEP-5683 conditions appear on the Node during the drain
//     (MaintenanceInProgress, DrainInProgress), Drained once it is done, and
//     disappear when the maintenance ends, while an admin's condition of the
//     same family stays as it was throughout;
//   - every pod goes through an EvictionRequest made by node-agent's
//     requester: those naming a responder are left to it (the test's
//     responder deletes them after a delay), the others node-agent evicts
//     itself, as 1.37.2 ships no controller that would;
//   - a token bound to node-1's agent pod cannot request the eviction of a
//     pod on node-2, nor as another requester.
func TestKubernetes137MaintenanceAPIs(t *testing.T) {
	opts := testenv.DefaultOptions()
	opts.KubernetesVersion = testenv.NextKubernetesVersion
	opts.APIServerArgs = []string{gates137, "--runtime-config=lifecycle.k8s.io/v1alpha1=true"}
	opts.ControllerManagerArgs = []string{gates137}
	env := testenv.StartForTest(t, opts)
	ctx := t.Context()
	c := env.Client()
	if v, err := c.Discovery().ServerVersion(); err != nil || v.GitVersion != testenv.NextKubernetesVersion {
		t.Fatalf("apiserver version %v (%v), want %s", v, err, testenv.NextKubernetesVersion)
	}
	if _, err := env.CreateNamespace(ctx, "work"); err != nil {
		t.Fatal(err)
	}
	installAgentIdentity(t, env)
	bed, _ := identities.Load(env)
	dep := bed.(*deployBed)
	dep.applyComponent(t, "eviction-requests")
	if err := env.AddNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	// An admin's condition of the family, which node-agent must leave be.
	admin := fmt.Appendf(nil, `{"status":{"conditions":[{"type":%q,"status":"True","reason":"ChangeTicket42","message":"planned by the admin"}]}}`, nodelifecycle.MaintenancePlanned)
	if _, err := kubetest.Wrap(c).CoreV1().Nodes().PatchStatus(ctx, "node-1", admin); err != nil {
		t.Fatal(err)
	}

	// Four pods with no responder of their own, two that name one.
	testenv.CreateDeployment(ctx, t, c, "work", "web", 4, "node-1")
	for _, name := range []string{"vm-a", "vm-b"} {
		createPodWithResponder(t, dyn, "work", name, "node-1")
	}
	testenv.WaitRunningOn(ctx, t, c, "work", "node-1", 6)
	if err := env.AddNodes(ctx, []string{"node-2", "node-3"}); err != nil {
		t.Fatal(err)
	}
	createPodWithResponder(t, dyn, "work", "elsewhere", "node-2")

	resp := startTestResponder(t, dyn, "work", 3*time.Second)
	watcher := watchLifecycleConditions(t, c.CoreV1().Nodes(), "node-1")

	t.Run("a stolen token cannot request another node's evictions", func(t *testing.T) {
		token := dep.boundToken(t, dep.agentPod(t, "node-1"))
		cfg := env.TokenConfig(token)
		asNode, err := dynamic.NewForConfig(podaccess.NodeConfig(cfg, "node-1"))
		if err != nil {
			t.Fatal(err)
		}
		other, err := c.CoreV1().Pods("work").Get(ctx, "elsewhere", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		own, err := c.CoreV1().Pods("work").Get(ctx, "vm-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		// The policy is in force once the apiserver's admission plugin has
		// loaded it; a dry run changes nothing meanwhile.
		testenv.WaitFor(t, time.Minute, "the eviction-requests policy in force", func() (bool, error) {
			_, err := asNode.Resource(erGVR).Namespace("work").Create(ctx, erObject(t, evictionrequest.For(other)), dry)
			return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'node-agent-node-eviction-requests'"), nil
		})
		_, err = asNode.Resource(erGVR).Namespace("work").Create(ctx, erObject(t, evictionrequest.For(other)), dry)
		wantDenied(t, "node-1 requests the eviction of a pod on node-2", err, "may request the eviction of its own pods only")
		forged := evictionrequest.For(own)
		forged.Spec.Requester = "example.com/someone-else"
		_, err = asNode.Resource(erGVR).Namespace("work").Create(ctx, erObject(t, forged), dry)
		wantDenied(t, "node-1 requests an eviction as another requester", err, "only as node-agent's requester")
		_, err = asNode.Resource(erGVR).Namespace("work").Create(ctx, erObject(t, evictionrequest.For(own)), dry)
		wantAllowed(t, "node-1 requests the eviction of its own pod (dry run)", err)
		// The ServiceAccount itself, not impersonating: no right at all.
		asSA, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = asSA.Resource(erGVR).Namespace("work").Create(ctx, erObject(t, evictionrequest.For(own)), dry)
		wantDenied(t, "the ServiceAccount requests an eviction as itself", err, byRBAC)
	})

	agent := startAgent(t, env, "node-1", "--drain-eviction-api=evictionRequest")
	agent.WaitReady(t)
	if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "1.37 test"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 3*time.Minute, "phase Succeeded", func() (bool, error) {
		st, err := selfdrain.ParseStatus(getNode(t, c, "node-1"))
		return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
	})
	drained := lifecycleTypes(getNode(t, c, "node-1"))
	if _, err := maintenance.EndMaintenance(ctx, kubetest.Wrap(c), "node-1"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "node-agent's lifecycle conditions gone", func() (bool, error) {
		return slices.Equal(lifecycleTypes(getNode(t, c, "node-1")), []string{"MaintenancePlanned=ChangeTicket42"}), nil
	})
	seen := watcher.stop()

	t.Run("conditions", func(t *testing.T) {
		t.Logf("node-1's lifecycle conditions, each state seen in turn: %q", seen)
		want := []string{"DrainInProgress=NodeAgentDraining", "MaintenanceInProgress=NodeAgentDraining"}
		if !slices.ContainsFunc(seen, func(s []string) bool { return containsAll(s, want) }) {
			t.Errorf("never saw %v while draining", want)
		}
		if !containsAll(drained, []string{"Drained=NodeAgentDrained", "MaintenanceInProgress=NodeAgentDrained"}) || slices.Contains(drained, "DrainInProgress=NodeAgentDraining") {
			t.Errorf("when drained: %v, want Drained and MaintenanceInProgress, without DrainInProgress", drained)
		}
		for _, s := range seen {
			if !slices.Contains(s, "MaintenancePlanned=ChangeTicket42") {
				t.Errorf("the admin's MaintenancePlanned was changed or removed: %v", s)
			}
		}
	})

	t.Run("eviction requests", func(t *testing.T) {
		pods, err := c.CoreV1().Pods("work").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 0 {
			t.Errorf("%d pods left on node-1", len(pods.Items))
		}
		got := resp.results()
		t.Logf("EvictionRequests seen: %v", got.requests)
		t.Logf("deleted by the test's responder: %v", got.deletedByResponder)
		if len(got.requests) != 6 {
			t.Errorf("%d EvictionRequests, want one for each of node-1's 6 pods", len(got.requests))
		}
		for name, requester := range got.requests {
			if requester != evictionrequest.Requester || !strings.HasPrefix(name, evictionrequest.NamePrefix) {
				t.Errorf("EvictionRequest %s by %q, want node-agent's", name, requester)
			}
		}
		if !slices.Equal(got.deletedByResponder, []string{"vm-a", "vm-b"}) {
			t.Errorf("the responder let go of %v, want vm-a and vm-b: node-agent must leave pods that name a responder to it", got.deletedByResponder)
		}
		if _, err := c.CoreV1().Pods("work").Get(ctx, "elsewhere", metav1.GetOptions{}); err != nil {
			t.Errorf("node-2's pod: %v", err)
		}
	})

	// A pod whose responder never acts holds the drain, which says so; ending
	// the maintenance withdraws its request, so no responder goes on moving
	// it once the node is given back.
	t.Run("withdrawn when the maintenance ends", func(t *testing.T) {
		createPodNamingResponder(t, dyn, "work", "vm-stuck", "node-1", "test.node-agent.io/never")
		testenv.WaitRunningOn(ctx, t, c, "work", "node-1", 1)
		if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "1.37 test, again"); err != nil {
			t.Fatal(err)
		}
		var st *selfdrain.Status
		testenv.WaitFor(t, 2*time.Minute, "the drain waiting for vm-stuck's responder", func() (bool, error) {
			var err error
			st, err = selfdrain.ParseStatus(getNode(t, c, "node-1"))
			return err == nil && st != nil && strings.Contains(st.LastError, "waiting for its eviction responder test.node-agent.io/never"), err
		})
		t.Logf("while the responder does not act: lastError %q", st.LastError)
		pod, err := c.CoreV1().Pods("work").Get(ctx, "vm-stuck", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		name := evictionrequest.Name(pod)
		if _, err := maintenance.EndMaintenance(ctx, kubetest.Wrap(c), "node-1"); err != nil {
			t.Fatal(err)
		}
		waitIntent(t, dyn, "work", name, evictionrequest.IntentWithdrawn, time.Minute)
		if _, err := c.CoreV1().Pods("work").Get(ctx, "vm-stuck", metav1.GetOptions{}); err != nil {
			t.Errorf("vm-stuck: %v, want it left on the node", err)
		}
	})

	// The next maintenance finds the request the last one withdrew (it is
	// named after the pod) and asks for the eviction again: a responder
	// acts only on intent Eviction.
	t.Run("asked for again by the next maintenance", func(t *testing.T) {
		pod, err := c.CoreV1().Pods("work").Get(ctx, "vm-stuck", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		name := evictionrequest.Name(pod)
		if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "1.37 test, a third time"); err != nil {
			t.Fatal(err)
		}
		waitIntent(t, dyn, "work", name, evictionrequest.IntentEviction, 2*time.Minute)
		if _, err := maintenance.EndMaintenance(ctx, kubetest.Wrap(c), "node-1"); err != nil {
			t.Fatal(err)
		}
		waitIntent(t, dyn, "work", name, evictionrequest.IntentWithdrawn, time.Minute)
	})

	// A tenant who may create EvictionRequests in its namespace makes one
	// under node-agent's name first, withdrawn, for a pod whose responder
	// never acts. Adopting it would hold the drain until drain.timeout;
	// node-agent leaves it alone and evicts the pod through pods/eviction.
	t.Run("a tenant's request under node-agent's name is not used", func(t *testing.T) {
		zero := int64(0)
		if err := c.CoreV1().Pods("work").Delete(ctx, "vm-stuck", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		createPodNamingResponder(t, dyn, "work", "vm-squat", "node-1", "test.node-agent.io/never")
		testenv.WaitFor(t, time.Minute, "vm-stuck gone and vm-squat running", func() (bool, error) {
			pods, err := testenv.PodsOn(ctx, c, "work", "node-1")
			return err == nil && len(pods) == 1 && pods[0].Name == "vm-squat" && pods[0].Status.Phase == corev1.PodRunning, err
		})
		pod, err := c.CoreV1().Pods("work").Get(ctx, "vm-squat", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		squatter := squatterClient(t, env)
		squat := evictionrequest.For(pod)
		squat.Spec.Requester = "tenant.example.com/hold"
		squat.Spec.Intent = evictionrequest.IntentWithdrawn
		// Not owned by the pod, so that it outlives the pod's eviction
		// and the test can read it afterwards.
		squat.OwnerReferences = nil
		// The tenant's Role takes a moment to reach the authorizer.
		testenv.WaitFor(t, 30*time.Second, "the tenant creates "+squat.Name, func() (bool, error) {
			_, err := squatter.Resource(erGVR).Namespace("work").Create(ctx, erObject(t, squat), metav1.CreateOptions{})
			if apierrors.IsForbidden(err) {
				return false, nil
			}
			return err == nil, err
		})
		if _, err := maintenance.RequestMaintenance(ctx, kubetest.Wrap(c), "node-1", "1.37 test, squatted"); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 2*time.Minute, "phase Succeeded", func() (bool, error) {
			st, err := selfdrain.ParseStatus(getNode(t, c, "node-1"))
			return err == nil && st != nil && st.Phase == selfdrain.PhaseSucceeded, err
		})
		er, err := dyn.Resource(erGVR).Namespace("work").Get(ctx, squat.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		requester, _, _ := unstructured.NestedString(er.Object, "spec", "requester")
		intent, _, _ := unstructured.NestedString(er.Object, "spec", "intent")
		if requester != squat.Spec.Requester || intent != evictionrequest.IntentWithdrawn {
			t.Errorf("the tenant's request is now %q, %q; want it as the tenant left it", requester, intent)
		}
		evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=node-1,reason=EvictionRequestNotOwn"})
		if err != nil || len(evs.Items) == 0 {
			t.Fatalf("no EvictionRequestNotOwn Event on node-1: %v", err)
		}
		t.Logf("Event %s: %s", evs.Items[0].Reason, evs.Items[0].Message)
		if !strings.Contains(evs.Items[0].Message, "tenant.example.com/hold") {
			t.Errorf("the Event does not name the tenant's requester: %s", evs.Items[0].Message)
		}
		if _, err := maintenance.EndMaintenance(ctx, kubetest.Wrap(c), "node-1"); err != nil {
			t.Fatal(err)
		}
	})
}

// waitIntent waits until the EvictionRequest ns/name has intent.
func waitIntent(t *testing.T, dyn dynamic.Interface, ns, name, intent string, d time.Duration) {
	t.Helper()
	testenv.WaitFor(t, d, "EvictionRequest "+ns+"/"+name+" with intent "+intent, func() (bool, error) {
		er, err := dyn.Resource(erGVR).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got, _, _ := unstructured.NestedString(er.Object, "spec", "intent")
		return got == intent, nil
	})
}

// squatterClient is a tenant of the namespace work that may create and read
// EvictionRequests there, and nothing else.
func squatterClient(t *testing.T, env *testenv.Env) dynamic.Interface {
	t.Helper()
	ctx := t.Context()
	c := env.Client()
	const name = "squatter"
	if _, err := c.CoreV1().ServiceAccounts("work").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().Roles("work").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{erGVR.Group}, Resources: []string{erGVR.Resource}, Verbs: []string{"get", "create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings("work").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "work"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.CoreV1().ServiceAccounts("work").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dynamic.NewForConfig(env.TokenConfig(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// createPodWithResponder creates a pod on node that names testResponder in
// spec.evictionResponders (Kubernetes 1.37), which the corev1 types this
// module builds with do not know, so through the dynamic client.
func createPodWithResponder(t *testing.T, dyn dynamic.Interface, ns, name, node string) {
	t.Helper()
	createPodNamingResponder(t, dyn, ns, name, node, testResponder)
}

// namesResponder reports whether the pod p names responder.
func namesResponder(p *unstructured.Unstructured, responder string) bool {
	rs, _, _ := unstructured.NestedSlice(p.Object, "spec", "evictionResponders")
	return slices.ContainsFunc(rs, func(r any) bool {
		m, _ := r.(map[string]any)
		return m["name"] == responder
	})
}

// createPodNamingResponder creates a pod on node that names responder.
func createPodNamingResponder(t *testing.T, dyn dynamic.Interface, ns, name, node, responder string) {
	t.Helper()
	pod := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"nodeName":           node,
			"containers":         []any{map[string]any{"name": "c", "image": "registry.invalid/vm:1"}},
			"tolerations":        []any{map[string]any{"key": testenv.KwokToleration().Key, "operator": "Exists", "effect": "NoSchedule"}},
			"evictionResponders": []any{map[string]any{"name": responder, "priority": int64(10000)}},
		},
	}}
	got, err := dyn.Resource(podGVR).Namespace(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedSlice(got.Object, "spec", "evictionResponders"); len(r) != 1 {
		t.Fatalf("pod %s kept no eviction responder (the EvictionRequestAPI gate is off?): %v", name, got.Object["spec"])
	}
}

func erObject(t *testing.T, er *evictionrequest.EvictionRequest) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(er)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// responderResults is what the test's responder saw.
type responderResults struct {
	requests           map[string]string // name: requester
	deletedByResponder []string          // pods it deleted, sorted
}

type testResponderRun struct {
	mu  sync.Mutex
	res responderResults
}

func (r *testResponderRun) results() responderResults {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := responderResults{requests: maps.Clone(r.res.requests), deletedByResponder: slices.Clone(r.res.deletedByResponder)}
	slices.Sort(out.deletedByResponder)
	return out
}

// startTestResponder watches EvictionRequests in ns and records each; for
// a target pod that names testResponder it waits delay (the workload
// moving away), then deletes the pod, as a responder does when done.
func startTestResponder(t *testing.T, dyn dynamic.Interface, ns string, delay time.Duration) *testResponderRun {
	t.Helper()
	r := &testResponderRun{res: responderResults{requests: map[string]string{}}}
	w, err := dyn.Resource(erGVR).Namespace(ns).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { w.Stop(); wg.Wait() })
	wg.Go(func() {
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type != watch.Added {
				continue
			}
			requester, _, _ := unstructured.NestedString(u.Object, "spec", "requester")
			pod, _, _ := unstructured.NestedString(u.Object, "spec", "target", "pod", "name")
			r.mu.Lock()
			r.res.requests[u.GetName()] = requester
			r.mu.Unlock()
			p, err := dyn.Resource(podGVR).Namespace(ns).Get(context.Background(), pod, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if !namesResponder(p, testResponder) {
				continue
			}
			wg.Go(func() {
				select {
				case <-time.After(delay):
				case <-t.Context().Done():
					return
				}
				uid := p.GetUID()
				err := dyn.Resource(podGVR).Namespace(ns).Delete(context.Background(), pod, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
				if err == nil {
					r.mu.Lock()
					r.res.deletedByResponder = append(r.res.deletedByResponder, pod)
					r.mu.Unlock()
				} else if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					t.Errorf("the test's responder could not delete %s: %v", pod, err)
				}
			})
		}
	})
	return r
}

// lifecycleTypes lists node's conditions of the KEP-5683 family as
// type=reason, sorted.
func lifecycleTypes(n *corev1.Node) []string {
	var out []string
	for _, c := range n.Status.Conditions {
		if slices.Contains(nodelifecycle.Types, c.Type) {
			out = append(out, string(c.Type)+"="+c.Reason)
		}
	}
	slices.Sort(out)
	return out
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// conditionWatcher records each distinct set of lifecycle conditions a
// Node passes through, from a watch, so a short state is not missed.
type conditionWatcher struct {
	mu   sync.Mutex
	seen [][]string
	stop func() [][]string
}

type nodeWatcher interface {
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

func watchLifecycleConditions(t *testing.T, nodes nodeWatcher, name string) *conditionWatcher {
	t.Helper()
	w, err := nodes.Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	cw := &conditionWatcher{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			s := lifecycleTypes(n)
			cw.mu.Lock()
			if len(cw.seen) == 0 || !slices.Equal(cw.seen[len(cw.seen)-1], s) {
				cw.seen = append(cw.seen, s)
			}
			cw.mu.Unlock()
		}
	}()
	cw.stop = func() [][]string {
		w.Stop()
		<-done
		cw.mu.Lock()
		defer cw.mu.Unlock()
		return slices.Clone(cw.seen)
	}
	t.Cleanup(func() { cw.stop() })
	return cw
}
