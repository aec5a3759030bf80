package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/confinement"
	"github.com/node-agent/node-agent/pkg/hooks"
	"github.com/node-agent/node-agent/pkg/kubevirtcr"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// The identity deploy/ gives the agent.
const (
	agentNamespace      = "node-agent"
	agentServiceAccount = "node-agent"
	agentUser           = "system:serviceaccount:" + agentNamespace + ":" + agentServiceAccount
	agentPolicy         = "node-agent-own-node"
	// nodeNameExtra is where the apiserver puts the node of the pod a
	// service-account token is bound to.
	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// kubectlBinary returns bin/kubectl, skipping or failing as for the other
// control-plane binaries when it is missing.
func kubectlBinary(t *testing.T, opts testenv.Options) string {
	t.Helper()
	return toolBinary(t, opts, testenv.BinKubectl)
}

// toolBinary returns the path of a binary hack/build-tools.sh puts into
// bin/, skipping or failing as for the control-plane binaries when it is
// missing.
func toolBinary(t *testing.T, opts testenv.Options, name string) string {
	t.Helper()
	testenv.RequireBinaries(t, opts, name)
	dir := opts.BinDir
	if dir == "" {
		dir = os.Getenv(testenv.BinDirEnv)
	}
	if dir == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "bin")
	}
	return filepath.Join(dir, name)
}

// deployBed is a control plane with node-1..3 and deploy/ applied.
type deployBed struct {
	env      *testenv.Env
	c        kubernetes.Interface
	kubectl  string
	auditLog string
	// coordinator grants the drain slots from "agent" on (runCoordinator).
	coordinator *deployedCoordinator
}

// applyComponent applies a component of deploy/components that carries
// its own objects (rbac.yaml, then admission-policy.yaml) with the
// install's field manager.
func (b *deployBed) applyComponent(t *testing.T, name string) {
	t.Helper()
	for _, f := range []string{"rbac.yaml", "admission-policy.yaml"} {
		data, err := os.ReadFile(filepath.Join(testenv.DeployDir(t), "components", name, f))
		if f != "rbac.yaml" && errors.Is(err, fs.ErrNotExist) {
			continue // a component of RBAC alone
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := b.run(t, data, "apply", "--server-side", "--field-manager=node-agent-install", "-f", "-")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("components/%s/%s:\n%s", name, f, strings.TrimSpace(string(out)))
	}
}

func (b *deployBed) run(t *testing.T, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), b.kubectl, append([]string{"--kubeconfig", b.env.KubeconfigPath()}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out, nil
}

// TestDeploy is issue 7's acceptance 1, 2 and 3 on the real control plane:
// deploy/ applies; the agent's identity, with a token bound to a pod on
// node-1, can change node-1's own parts and nothing else; and `node-agent
// run` with exactly that identity labels and drains without a single 403.
// Since issue 30 the drain needs node-agent-coordinator, which runs as
// deploy/coordinator.yaml runs it (a token bound to one of its Deployment's
// pods): its identity may write the drain slot grant and the slot Leases
// and nothing else, and it grants the agents' slots without a single 403.
func TestDeploy(t *testing.T) {
	opts := testenv.DefaultOptions()
	b := &deployBed{kubectl: kubectlBinary(t, opts)}
	var err error
	if opts.APIServerArgs, b.auditLog, err = testenv.AuditLog(t.TempDir(), usersAuditPolicy(agentUser, coordinatorUser)); err != nil {
		t.Fatal(err)
	}
	b.env = testenv.StartForTest(t, opts)
	// The coordinator is deploy/'s, run as its own ServiceAccount
	// (runCoordinator), never the harness's admin one.
	withoutCoordinator(t, b.env)
	b.c = b.env.Client()
	if err := b.env.AddNodes(t.Context(), []string{"node-1", "node-2", "node-3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.env.CreateNamespace(t.Context(), "work"); err != nil {
		t.Fatal(err)
	}

	if !t.Run("apply", b.testApply) {
		t.FailNow()
	}
	if !t.Run("privilege", b.testPrivilege) {
		t.FailNow()
	}
	t.Run("reboot privilege", b.testRebootPrivilege)
	t.Run("reboot-pending taint privilege", b.testRebootPendingTaintPrivilege)
	t.Run("nodemaintenance privilege", b.testNodeMaintenancePrivilege)
	t.Run("slot privilege", b.testSlotPrivilege)
	t.Run("slot leases denied by the policy alone", b.testSlotLeasePolicy)
	t.Run("events only about its own node", b.testEventsOnlyAboutItsNode)
	t.Run("admin intent wins", b.testAdminIntentWins)
	t.Run("node fields as an allow-list", b.testNodeAllowList)
	t.Run("lifecycle conditions only its own", b.testLifecycleConditionsOnlyItsOwn)
	t.Run("renamed install", b.testRenamedInstall)
	t.Run("own node read as the node", b.testOwnNodeReadAsNode)
	t.Run("configmap writer", b.testConfigMapWriter)
	if !t.Run("coordinator privilege", b.testCoordinatorPrivilege) {
		t.FailNow()
	}
	// From here on the agents drain, so the coordinator runs.
	began := time.Now()
	b.runCoordinator(t)
	t.Run("coordinator records its events", b.testCoordinatorRecordsItsEvents)
	t.Run("agent", b.testAgent)
	t.Run("tenant", b.testTenant)
	t.Run("without impersonation", b.testWithoutImpersonation)
	t.Run("flow control", b.testFlowControl)
	t.Run("coordinator", func(t *testing.T) { b.checkCoordinator(t, began) })
}

// usersAuditPolicy records every request of users at the Metadata level,
// once complete, and nothing else (testenv.UserAuditPolicy for several).
func usersAuditPolicy(users ...string) string {
	quoted := make([]string, len(users))
	for i, u := range users {
		quoted[i] = strconv.Quote(u)
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: [` + strings.Join(quoted, ", ") + `]
  - level: None
`
}

// testApply is acceptance 1: `kubectl kustomize deploy/` applies with a
// server-side dry run, then for real.
func (b *deployBed) testApply(t *testing.T) {
	manifests, err := b.run(t, nil, "kustomize", testenv.DeployDir(t))
	if err != nil {
		t.Fatal(err)
	}
	objs := testenv.DecodeObjects(t, manifests)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
	}
	t.Logf("kubectl kustomize deploy/: %d objects: %s", len(objs), strings.Join(kinds, " "))

	// A dry run creates nothing, so the objects inside the new namespace
	// cannot be dry-run before the namespace exists: the apiserver answers
	// NotFound for each, whatever the object. So: first a dry run of what
	// does not live in it, then the Namespace for real, then a dry run of
	// everything, then everything for real.
	var outside, namespace []*unstructured.Unstructured
	for _, o := range objs {
		switch {
		case o.GetKind() == "Namespace" && o.GetName() == agentNamespace:
			namespace = append(namespace, o)
			outside = append(outside, o)
		case o.GetNamespace() != agentNamespace:
			outside = append(outside, o)
		}
	}
	out, err := b.run(t, asList(t, outside), "apply", "--server-side", "--dry-run=server", "--field-manager=node-agent-install", "-f", "-")
	if err != nil {
		t.Fatalf("server-side dry run of the objects outside namespace %s: %v", agentNamespace, err)
	}
	t.Logf("server-side dry run, objects outside namespace %s:\n%s", agentNamespace, strings.TrimSpace(string(out)))
	if _, err := b.c.CoreV1().Namespaces().Get(t.Context(), agentNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s exists after a dry run (err %v)", agentNamespace, err)
	}
	if _, err := b.run(t, asList(t, namespace), "apply", "--server-side", "--field-manager=node-agent-install", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	out, err = b.run(t, manifests, "apply", "--server-side", "--dry-run=server", "--field-manager=node-agent-install", "-f", "-")
	if err != nil {
		t.Fatalf("server-side dry run: %v", err)
	}
	t.Logf("server-side dry run, everything:\n%s", strings.TrimSpace(string(out)))
	if _, err := b.c.AppsV1().DaemonSets(agentNamespace).Get(t.Context(), "node-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet exists after a dry run (err %v)", err)
	}

	out, err = b.run(t, manifests, "apply", "--server-side", "--field-manager=node-agent-install", "-f", "-")
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	t.Logf("apply:\n%s", strings.TrimSpace(string(out)))

	// The kvm component renders and applies too (dry run).
	overlay := t.TempDir()
	base, err := filepath.Rel(overlay, testenv.DeployDir(t)) // kustomize takes relative paths only
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(fmt.Sprintf(
		"resources: [%q]\ncomponents: [%q]\n", base, filepath.Join(base, "components", "kvm"))), 0o600); err != nil {
		t.Fatal(err)
	}
	kvm, err := b.run(t, nil, "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(kvm, []byte("devices.kubevirt.io/kvm")) {
		t.Errorf("the kvm component does not request devices.kubevirt.io/kvm")
	}
	if _, err := b.run(t, kvm, "apply", "--server-side", "--dry-run=server", "--field-manager=node-agent-install", "-f", "-"); err != nil {
		t.Errorf("the kvm component, server-side dry run: %v", err)
	}

	// The nodemaintenance component renders, passes a server-side dry run,
	// and then goes in for real: its CRDs are what `kubectl get nm` and the
	// NodeMaintenance privilege test need.
	b.applyNodeMaintenanceComponent(t, overlay, base)

	// The reboot component renders and applies (dry run).
	b.applyRebootComponent(t, overlay, base)

	// The apiserver type-checks each policy's CEL against the schema of
	// what it matches; a warning means an expression that would fail at
	// admission time.
	for _, name := range []string{agentPolicy, nmPolicy, slotLeasePolicy, coordinatorPolicy} {
		testenv.WaitFor(t, time.Minute, "policy "+name+" type-checked", func() (bool, error) {
			p, err := b.c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.ObservedGeneration != p.Generation {
				return false, nil
			}
			if p.Status.TypeChecking != nil {
				for _, w := range p.Status.TypeChecking.ExpressionWarnings {
					t.Errorf("policy %s: %s: %s", name, w.FieldRef, w.Warning)
				}
			}
			return true, nil
		})
	}

	// kwok runs the DaemonSet's pods (no image is pulled), one per node.
	testenv.WaitFor(t, 2*time.Minute, "a running node-agent pod on every node", func() (bool, error) {
		pods, err := b.c.CoreV1().Pods(agentNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=node-agent"})
		if err != nil {
			return false, err
		}
		return testenv.RunningPods(pods.Items) == 3, nil
	})

	// And the coordinator's Deployment, once placed (placeCoordinator).
	b.placeCoordinator(t)
}

// asList encodes objs as one v1 List for kubectl.
func asList(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	items := make([]map[string]any, len(objs))
	for i, o := range objs {
		items[i] = o.Object
	}
	b, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// agentFiles writes into dir what the DaemonSet gives node's agent: the
// shipped config file, as mounted from the ConfigMap, and a kubeconfig with
// a token bound to the agent's pod on node. It returns their paths.
func (b *deployBed) agentFiles(t *testing.T, dir, node string) (cfgFile, kubeconfig string) {
	t.Helper()
	var cm corev1.ConfigMap
	testenv.DeployObject(t, testenv.ReadDeployObjects(t), "ConfigMap", agentNamespace, "node-agent-config", &cm)
	cfgFile = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig = filepath.Join(dir, node+".kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, b.env.TokenConfig(b.boundToken(t, b.agentPod(t, node)))); err != nil {
		t.Fatal(err)
	}
	return cfgFile, kubeconfig
}

// agentPod returns the running node-agent DaemonSet pod on node.
func (b *deployBed) agentPod(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	pods, err := b.c.CoreV1().Pods(agentNamespace).List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=node-agent", FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p
		}
	}
	t.Fatalf("no running node-agent pod on %s", node)
	return nil
}

// boundToken issues a token of the agent's ServiceAccount bound to pod, as
// the kubelet mounts into it. pod nil gives a token bound to nothing.
func (b *deployBed) boundToken(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := b.c.CoreV1().ServiceAccounts(agentNamespace).CreateToken(t.Context(), agentServiceAccount, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func (b *deployBed) tokenClient(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(b.env.TokenConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *deployBed) tokenDynamic(t *testing.T, token string) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(b.env.TokenConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantAllowedNotServed expects a request on a resource the cluster does not
// serve to pass authorization: no error, or the 404 that follows it.
func wantAllowedNotServed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("%s: %v, want allowed (404 without the CRD)", what, err)
		return
	}
	t.Logf("allowed: %s (%v)", what, err)
}

// impersonatingClient sends token and impersonates node, the user only (no
// Impersonate-Group header), as pkg/podaccess does.
func (b *deployBed) impersonatingClient(t *testing.T, token, node string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(podaccess.NodeConfig(b.env.TokenConfig(token), node))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func whoAmI(t *testing.T, c kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.UserInfo
}

func mergePatchNode(t *testing.T, c kubernetes.Interface, node string, patch any, dryRun bool) error {
	t.Helper()
	data, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.PatchOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, data, opts)
	return err
}

type obj = map[string]any

func wantAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want allowed", what, err)
		return
	}
	t.Logf("allowed: %s", what)
}

// wantDenied expects a 403 whose message contains msg.
func wantDenied(t *testing.T, what string, err error, msg string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want 403", what)
	case !apierrors.IsForbidden(err):
		t.Errorf("%s: %v, want 403 Forbidden", what, err)
	case !strings.Contains(err.Error(), msg):
		t.Errorf("%s: %v, want a message with %q", what, err, msg)
	default:
		t.Logf("denied:  %s: %v", what, err)
	}
}

// Messages of the two layers that refuse.
const (
	byRBAC   = `User "` + agentUser + `" cannot`
	byPolicy = `ValidatingAdmissionPolicy '` + agentPolicy + `'`
)

// testPrivilege is acceptance 2: with a token bound to the node-agent pod on
// node-1, the agent's identity can change node-1's own parts, and nothing of
// node-2, no other part of node-1, and no Node's existence.
func (b *deployBed) testPrivilege(t *testing.T) {
	ctx := t.Context()
	drainTaint := testenv.DrainTaint.Key
	pod := b.agentPod(t, "node-1")
	token := b.boundToken(t, pod)
	sa := b.tokenClient(t, token)
	// node1 is the same token impersonating node-1, as pkg/podaccess does.
	node1 := b.impersonatingClient(t, token, "node-1")
	who := whoAmI(t, sa)
	t.Logf("token bound to pod %s/%s authenticates as %s, groups %v, %s=%v", pod.Namespace, pod.Name, who.Username, who.Groups, nodeNameExtra, who.Extra[nodeNameExtra])
	if who.Username != agentUser || !slices.Equal(who.Extra[nodeNameExtra], []string{"node-1"}) {
		t.Fatalf("token user %s extra %v, want %s on node-1", who.Username, who.Extra, agentUser)
	}

	// The policy is in force once the apiserver's admission plugin has
	// loaded it; a dry run cannot change node-2 meanwhile.
	testenv.WaitFor(t, time.Minute, "the admission policy in force", func() (bool, error) {
		err := mergePatchNode(t, sa, "node-2", obj{"metadata": obj{"labels": obj{kubevirtlabels.CPUVendorLabelPrefix + "Probe": "true"}}}, true)
		return err != nil && strings.Contains(err.Error(), byPolicy), nil
	})
	node2Before := getNode(t, b.c, "node-2")

	t.Run("allowed on its own node", func(t *testing.T) {
		owned := obj{}
		for _, p := range labeller.OwnedPrefixes() {
			owned[p+"DeployTest"] = "true"
		}
		owned[kubevirtlabels.ObsoleteHostModelLabel] = "true"
		wantAllowed(t, "label node-1 under every owned prefix", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"labels": owned}}, false))
		for k := range owned {
			owned[k] = nil
		}
		wantAllowed(t, "remove those labels again", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"labels": owned}}, false))

		// Cordon and taint as the drain engine does: the whole taint list,
		// conditional on the resourceVersion read.
		n := getNode(t, sa, "node-1")
		taints := append(slices.Clone(n.Spec.Taints), corev1.Taint{Key: drainTaint, Value: selfdrain.TaintValue, Effect: corev1.TaintEffectNoSchedule, TimeAdded: ptr.To(metav1.Now())})
		wantAllowed(t, "cordon node-1 and add the drain taint", mergePatchNode(t, sa, "node-1", obj{
			"metadata": obj{"resourceVersion": n.ResourceVersion, "annotations": obj{selfdrain.StatusAnnotation: `{"phase":"Running","cordonedByAgent":true,"taintedByAgent":true}`}},
			"spec":     obj{"unschedulable": true, "taints": taints},
		}, false))
		cond := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"Draining","message":"deploy test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
			selfdrain.ConditionType, time.Now().UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
		_, err := sa.CoreV1().Nodes().PatchStatus(ctx, "node-1", []byte(cond))
		wantAllowed(t, "set the UnderMaintenance condition on node-1", err)

		// Evict a pod bound to node-1.
		victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "evictee", Namespace: "work"},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}},
				Tolerations: []corev1.Toleration{testenv.KwokToleration()}}}
		if _, err := b.c.CoreV1().Pods("work").Create(ctx, victim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, time.Minute, "pod evictee running", func() (bool, error) {
			p, err := b.c.CoreV1().Pods("work").Get(ctx, "evictee", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
		err = sa.PolicyV1().Evictions("work").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "evictee", Namespace: "work"}})
		wantDenied(t, "evict pod work/evictee on node-1 without impersonation", err, byRBAC+` create resource "pods/eviction"`)
		err = node1.PolicyV1().Evictions("work").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "evictee", Namespace: "work"}})
		wantAllowed(t, "evict pod work/evictee on node-1 as node-1", err)
		testenv.WaitFor(t, time.Minute, "pod evictee gone", func() (bool, error) {
			_, err := b.c.CoreV1().Pods("work").Get(ctx, "evictee", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})

		// Undo: uncordon, drop the taint, the annotation and the condition;
		// on a conflict read again, as the agent does (the node lifecycle
		// controller adds and removes its own unschedulable taint).
		undo := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n := getNode(t, sa, "node-1")
			kept := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == drainTaint })
			return mergePatchNode(t, sa, "node-1", obj{
				"metadata": obj{"resourceVersion": n.ResourceVersion, "annotations": obj{selfdrain.StatusAnnotation: nil}},
				"spec":     obj{"unschedulable": false, "taints": kept},
			}, false)
		})
		wantAllowed(t, "uncordon node-1 and remove the drain taint", undo)
		_, err = sa.CoreV1().Nodes().PatchStatus(ctx, "node-1", []byte(fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"$patch":"delete"}]}}`, selfdrain.ConditionType)))
		wantAllowed(t, "remove the UnderMaintenance condition", err)

		// The other verbs of the ClusterRole and the Role of Events.
		_, err = node1.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
		wantAllowed(t, "list the pods on node-1 as node-1", err)
		w, err := node1.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
		wantAllowed(t, "watch the pods on node-1 as node-1", err)
		if err == nil {
			w.Stop()
		}
		// Reads are as narrow as writes: the drain tells a DaemonSet's pods
		// by their controller reference, so no DaemonSet is readable.
		_, err = sa.AppsV1().DaemonSets(agentNamespace).Get(ctx, "node-agent", metav1.GetOptions{})
		wantDenied(t, "get a DaemonSet", err, "forbidden")
		_, err = node1.AppsV1().DaemonSets(agentNamespace).Get(ctx, "node-agent", metav1.GetOptions{})
		wantDenied(t, "get a DaemonSet as node-1", err, "forbidden")

		// The KubeVirt CR, read only (pkg/kubevirtcr). No CRD is installed
		// here: an allowed request passes authorization and meets the 404
		// of a resource not served; a refused one stops at 403.
		kvs := b.tokenDynamic(t, token).Resource(kubevirtcr.GVR)
		_, err = kvs.List(ctx, metav1.ListOptions{})
		wantAllowedNotServed(t, "list the KubeVirt CRs of every namespace", err)
		kw, err := kvs.Watch(ctx, metav1.ListOptions{})
		wantAllowedNotServed(t, "watch them", err)
		if err == nil {
			kw.Stop()
		}

		// A drain slot is asked for on the agent's own Node, and only there
		// (pkg/slots Requester: a merge patch to ask, a JSON patch with a
		// test op to withdraw).
		request := (&slots.Request{Purpose: slots.PurposeMaintenance, ID: "deploy-test", RequestedAt: time.Now().UTC().Truncate(time.Second)}).Encode()
		wantAllowed(t, "ask for a drain slot on node-1", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"annotations": obj{slots.RequestAnnotation: request}}}, false))
		withdraw := fmt.Sprintf(`[{"op":"test","path":"/metadata/annotations/%s","value":%q},{"op":"remove","path":"/metadata/annotations/%[1]s"}]`,
			strings.ReplaceAll(slots.RequestAnnotation, "/", "~1"), request)
		_, err = sa.CoreV1().Nodes().Patch(ctx, "node-1", types.JSONPatchType, []byte(withdraw), metav1.PatchOptions{})
		wantAllowed(t, "withdraw it (JSON patch)", err)
		// Who holds the maintenance, written beside the drain's record
		// (pkg/maintenance requesters), and removed when it ends.
		holders := `[{"kind":"owner","name":"network-team","reason":"deploy test"}]`
		wantAllowed(t, "list node-1's maintenance requesters", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"annotations": obj{maintenance.RequestersAnnotation: holders}}}, false))
		wantAllowed(t, "remove that list", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"annotations": obj{maintenance.RequestersAnnotation: nil}}}, false))
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-1.", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-1", UID: "node-1"}, Reason: "DeployTest", Message: "deploy test", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "node-agent", Host: "node-1"}}
		_, err = sa.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
		wantAllowed(t, "create an Event about node-1 in default", err)
	})

	t.Run("denied", func(t *testing.T) {
		label := func(key string) obj { return obj{"metadata": obj{"labels": obj{key: "true"}}} }
		wantDenied(t, "label node-2 under an owned prefix", mergePatchNode(t, sa, "node-2", label(kubevirtlabels.CPUModelLabelPrefix+"DeployTest"), false), "may change only that Node, not node-2")
		wantDenied(t, "cordon node-2", mergePatchNode(t, sa, "node-2", obj{"spec": obj{"unschedulable": true}}, false), "may change only that Node, not node-2")
		_, err := sa.CoreV1().Nodes().PatchStatus(ctx, "node-2", []byte(fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"x"}]}}`, selfdrain.ConditionType)))
		wantDenied(t, "set UnderMaintenance on node-2", err, "may change only that Node, not node-2")

		wantDenied(t, "label node-1 outside the owned prefixes", mergePatchNode(t, sa, "node-1", label("team"), false), "only labels under its own prefixes")
		wantDenied(t, "a look-alike of an owned prefix", mergePatchNode(t, sa, "node-1", label("cpu-model.node.kubevirt.io.example/x"), false), "only labels under its own prefixes")
		wantDenied(t, "remove node-1's hostname label", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"labels": obj{corev1.LabelHostname: nil}}}, false), "only labels under its own prefixes")

		n := getNode(t, sa, "node-1")
		var foreign []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != testenv.KwokTaintKey {
				foreign = append(foreign, tn)
			}
		}
		if len(foreign) == len(n.Spec.Taints) {
			t.Fatalf("node-1 has no %s taint to remove: %v", testenv.KwokTaintKey, n.Spec.Taints)
		}
		wantDenied(t, "remove node-1's foreign taint "+testenv.KwokTaintKey, mergePatchNode(t, sa, "node-1", obj{
			"metadata": obj{"resourceVersion": n.ResourceVersion}, "spec": obj{"taints": append([]corev1.Taint{}, foreign...)}}, false), "other taints must stay")
		withNoExecute := append(slices.Clone(n.Spec.Taints), corev1.Taint{Key: drainTaint, Effect: corev1.TaintEffectNoExecute})
		wantDenied(t, "a NoExecute drain taint on node-1", mergePatchNode(t, sa, "node-1", obj{"spec": obj{"taints": withNoExecute}}, false), "other taints must stay")

		wantDenied(t, "request maintenance on node-1 (the admins' annotation)", mergePatchNode(t, sa, "node-1",
			obj{"metadata": obj{"annotations": obj{selfdrain.MaintenanceAnnotation: "self-inflicted"}}}, false), "only the annotations "+selfdrain.StatusAnnotation)
		// The owners' requests are the admins' and outside controllers':
		// the agent's token may not add one, nor change or remove one an
		// owner holds (each requester ends its own request).
		ownerKey, err := maintenance.OwnerKey("deploy-test")
		if err != nil {
			t.Fatal(err)
		}
		wantDenied(t, "request maintenance on node-1 as an owner", mergePatchNode(t, sa, "node-1",
			obj{"metadata": obj{"annotations": obj{ownerKey: "self-inflicted"}}}, false), "only the annotations "+selfdrain.StatusAnnotation)
		if err := mergePatchNode(t, b.c, "node-1", obj{"metadata": obj{"annotations": obj{ownerKey: "admin's request"}}}, false); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, "change an owner's request on node-1", mergePatchNode(t, sa, "node-1",
			obj{"metadata": obj{"annotations": obj{ownerKey: "false"}}}, false), "only the annotations "+selfdrain.StatusAnnotation)
		wantDenied(t, "end an owner's request on node-1", mergePatchNode(t, sa, "node-1",
			obj{"metadata": obj{"annotations": obj{ownerKey: nil}}}, false), "only the annotations "+selfdrain.StatusAnnotation)
		if err := mergePatchNode(t, b.c, "node-1", obj{"metadata": obj{"annotations": obj{ownerKey: nil}}}, false); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, "list node-2's maintenance requesters", mergePatchNode(t, sa, "node-2",
			obj{"metadata": obj{"annotations": obj{maintenance.RequestersAnnotation: "[]"}}}, false), "may change only that Node, not node-2")
		// The hooks are an outside controller's hold on the node: the agent
		// may neither hold itself nor let itself go.
		for _, phase := range hooks.Phases {
			key := phase.Prefix() + "deploy-test"
			wantDenied(t, "add a "+string(phase)+" hook to node-1", mergePatchNode(t, sa, "node-1",
				obj{"metadata": obj{"annotations": obj{key: "self-held"}}}, false), "only the annotations "+selfdrain.StatusAnnotation)
			if err := mergePatchNode(t, b.c, "node-1", obj{"metadata": obj{"annotations": obj{key: "an admin"}}}, false); err != nil {
				t.Fatal(err)
			}
			wantDenied(t, "remove an admin's "+string(phase)+" hook from node-1", mergePatchNode(t, sa, "node-1",
				obj{"metadata": obj{"annotations": obj{key: nil}}}, false), "only the annotations "+selfdrain.StatusAnnotation)
			wantDenied(t, "rewrite an admin's "+string(phase)+" hook on node-1", mergePatchNode(t, sa, "node-1",
				obj{"metadata": obj{"annotations": obj{key: "the agent"}}}, false), "only the annotations "+selfdrain.StatusAnnotation)
			if err := mergePatchNode(t, b.c, "node-1", obj{"metadata": obj{"annotations": obj{key: nil}}}, false); err != nil {
				t.Fatal(err)
			}
		}
		wantDenied(t, "change node-1's foreign annotation "+testenv.KwokNodeAnnotation, mergePatchNode(t, sa, "node-1",
			obj{"metadata": obj{"annotations": obj{testenv.KwokNodeAnnotation: nil}}}, false), "only the annotations "+selfdrain.StatusAnnotation)
		wantDenied(t, "add a finalizer to node-1", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"finalizers": []string{"example.com/hold"}}}, false), "finalizers")
		if n.Spec.ProviderID == "" {
			wantDenied(t, "set node-1's providerID", mergePatchNode(t, sa, "node-1", obj{"spec": obj{"providerID": "kwok://elsewhere"}}, false), "only spec.unschedulable")
		}

		_, err = sa.CoreV1().Nodes().PatchStatus(ctx, "node-1", []byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"NodeAgentSaysSo"}]}}`))
		wantDenied(t, "mark node-1 not Ready", err, "only the UnderMaintenance, NodeShuttingDown and RebootRequired conditions")
		_, err = sa.CoreV1().Nodes().PatchStatus(ctx, "node-1", []byte(`{"status":{"allocatable":{"pods":"0"}}}`))
		wantDenied(t, "change node-1's allocatable", err, "only its own conditions")
		_, err = sa.CoreV1().Nodes().PatchStatus(ctx, "node-1", []byte(`{"metadata":{"labels":{"team":"virt"}}}`))
		wantDenied(t, "a foreign label through nodes/status", err, "only labels under its own prefixes")

		err = sa.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{})
		wantDenied(t, "delete node-2", err, byRBAC+" delete resource \"nodes\"")
		err = sa.CoreV1().Nodes().Delete(ctx, "node-1", metav1.DeleteOptions{})
		wantDenied(t, "delete its own node-1", err, byRBAC+" delete resource \"nodes\"")
		_, err = sa.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		wantDenied(t, "update (not patch) node-1", err, byRBAC+" update resource \"nodes\"")
		_, err = sa.CoreV1().Pods("work").Get(ctx, "anything", metav1.GetOptions{})
		wantDenied(t, "get a pod", err, byRBAC+" get resource \"pods\"")
		err = sa.CoreV1().Pods(agentNamespace).Delete(ctx, b.agentPod(t, "node-2").Name, metav1.DeleteOptions{})
		wantDenied(t, "delete a pod (drain.deleteAfter is off)", err, byRBAC+" delete resource \"pods\"")
		// No Lease right at all: not the slots, not the election.
		for _, name := range []string{slots.LeaseName("node-1"), coordinatorElectionLease} {
			_, err = sa.CoordinationV1().Leases(agentNamespace).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1")}}, metav1.CreateOptions{})
			wantDenied(t, "create the Lease "+name, err, byRBAC+" create resource \"leases\"")
		}
		_, err = sa.CoordinationV1().Leases(agentNamespace).List(ctx, metav1.ListOptions{})
		wantDenied(t, "list the Leases of node-agent", err, byRBAC+" list resource \"leases\"")
		_, err = sa.CoordinationV1().Leases("work").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		wantDenied(t, "create a Lease outside node-agent", err, byRBAC+" create resource \"leases\"")

		// The grant is the coordinator's: the agent may neither grant itself
		// a slot nor take back or rewrite one it was given.
		granted := (&slots.Grant{ID: "deploy-test", Purpose: slots.PurposeMaintenance, State: slots.Granted, Slot: slots.LeaseName("node-1"), Time: time.Now().UTC().Truncate(time.Second)}).Encode()
		const byCoordinatorOnly = "drain slots are granted only by node-agent-coordinator"
		wantDenied(t, "grant node-1 a drain slot", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: granted}}}, false), byCoordinatorOnly)
		request := (&slots.Request{Purpose: slots.PurposeMaintenance, ID: "deploy-test", RequestedAt: time.Now().UTC().Truncate(time.Second)}).Encode()
		wantDenied(t, "ask for a drain slot on node-2", mergePatchNode(t, sa, "node-2", obj{"metadata": obj{"annotations": obj{slots.RequestAnnotation: request}}}, false), "may change only that Node, not node-2")
		if err := mergePatchNode(t, b.c, "node-1", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: granted}}}, false); err != nil {
			t.Fatal(err)
		}
		queued := (&slots.Grant{ID: "deploy-test", Purpose: slots.PurposeMaintenance, State: slots.Queued, Time: time.Now().UTC().Truncate(time.Second)}).Encode()
		wantDenied(t, "rewrite node-1's grant", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: queued}}}, false), byCoordinatorOnly)
		wantDenied(t, "remove node-1's grant", mergePatchNode(t, sa, "node-1", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: nil}}}, false), byCoordinatorOnly)
		if err := mergePatchNode(t, b.c, "node-1", obj{"metadata": obj{"annotations": obj{slots.GrantAnnotation: nil}}}, false); err != nil {
			t.Fatal(err)
		}
		kvs := b.tokenDynamic(t, token).Resource(kubevirtcr.GVR).Namespace("kubevirt")
		_, err = kvs.Get(ctx, "kubevirt", metav1.GetOptions{})
		wantDenied(t, "get a KubeVirt CR (list and watch are enough)", err, byRBAC+` get resource "kubevirts"`)
		_, err = kvs.Create(ctx, &unstructured.Unstructured{Object: obj{"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": obj{"name": "kubevirt"}}}, metav1.CreateOptions{})
		wantDenied(t, "create a KubeVirt CR", err, byRBAC+` create resource "kubevirts"`)
		_, err = kvs.Patch(ctx, "kubevirt", types.MergePatchType, []byte(`{"spec":{"configuration":{"obsoleteCPUModels":{"Haswell":true}}}}`), metav1.PatchOptions{})
		wantDenied(t, "patch a KubeVirt CR", err, byRBAC+` patch resource "kubevirts"`)
		err = kvs.Delete(ctx, "kubevirt", metav1.DeleteOptions{})
		wantDenied(t, "delete a KubeVirt CR", err, byRBAC+` delete resource "kubevirts"`)

		_, err = sa.CoreV1().Events("work").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "x."},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "work", Name: "x"}}, metav1.CreateOptions{})
		wantDenied(t, "create an Event outside default", err, byRBAC+" create resource \"events\"")

		// A token of the same ServiceAccount not bound to a pod names no
		// node, so it may change no Node.
		unbound := b.tokenClient(t, b.boundToken(t, nil))
		if extra := whoAmI(t, unbound).Extra[nodeNameExtra]; len(extra) != 0 {
			t.Errorf("unbound token carries %s=%v", nodeNameExtra, extra)
		}
		wantDenied(t, "an unbound token labels node-1 under an owned prefix", mergePatchNode(t, unbound, "node-1",
			label(kubevirtlabels.CPUModelLabelPrefix+"DeployTest"), false), "this token names no node")
	})

	// Pods only as its own node (issue 22): the token reaches pods only by
	// impersonating the node its pod is bound to, and then only that node's
	// pods; without impersonation it reaches none.
	t.Run("pods only as its own node", func(t *testing.T) {
		other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "work"},
			Spec: corev1.PodSpec{NodeName: "node-2", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}},
				Tolerations: []corev1.Toleration{testenv.KwokToleration()}}}
		if _, err := b.c.CoreV1().Pods("work").Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.c.CoreV1().Pods("work").Delete(context.Background(), other.Name, metav1.DeleteOptions{}) }()
		// NodeRestriction reads the pod from the apiserver's informer: an
		// eviction asked before that informer has the pod is answered 404,
		// not 403 (seen once under load). Running means kwok saw it, and
		// so has the apiserver's cache.
		testenv.WaitFor(t, time.Minute, "pod elsewhere running", func() (bool, error) {
			p, err := b.c.CoreV1().Pods("work").Get(ctx, other.Name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
		evict := func(c kubernetes.Interface, name string) error {
			return c.PolicyV1().Evictions("work").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "work"}})
		}
		wantDenied(t, "evict a pod of node-2 as node-1", evict(node1, other.Name), "node-1 can only evict pods with spec.nodeName set to itself")
		wantDenied(t, "delete a pod of node-2 as node-1", node1.CoreV1().Pods("work").Delete(ctx, other.Name, metav1.DeleteOptions{}), `node "node-1" can only delete pods with spec.nodeName set to itself`)
		_, err := node1.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-2"})
		wantDenied(t, "list node-2's pods as node-1", err, "can only list/watch pods with spec.nodeName field selector")
		_, err = node1.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		wantDenied(t, "list every pod as node-1", err, `User "system:node:node-1" cannot list resource "pods"`)

		node2 := b.impersonatingClient(t, token, "node-2")
		wantDenied(t, "evict a pod of node-2 as node-2", evict(node2, other.Name), byRBAC+` impersonate-on:arbitrary-node:create resource "pods/eviction"`)
		_, err = node2.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-2"})
		wantDenied(t, "list node-2's pods as node-2", err, byRBAC+` impersonate-on:arbitrary-node:list resource "pods"`)

		wantDenied(t, "evict a pod of node-2 without impersonation", evict(sa, other.Name), byRBAC+` create resource "pods/eviction"`)
		_, err = sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
		wantDenied(t, "list node-1's pods without impersonation", err, byRBAC+` list resource "pods"`)

		// A token not bound to a pod is associated with no node.
		unbound := b.impersonatingClient(t, b.boundToken(t, nil), "node-1")
		_, err = unbound.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
		wantDenied(t, "an unbound token lists node-1's pods as node-1", err, byRBAC+` impersonate-on:arbitrary-node:list`)

		if _, err := b.c.CoreV1().Pods("work").Get(ctx, other.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("node-2's pod is gone: %v", err)
		}

		// What an admin checks with kubectl: the ServiceAccount itself may
		// not evict, delete or list pods anywhere.
		for _, args := range [][]string{
			{"create", "pods/eviction", "-n", "work"},
			{"delete", "pods", "-n", "work"},
			{"list", "pods", "--all-namespaces"},
			{"create", "pods/eviction", "--all-namespaces"},
		} {
			out, err := b.run(t, nil, append([]string{"auth", "can-i", "--as", agentUser}, args...)...)
			if got := strings.TrimSpace(string(out)); got != "no" || err == nil {
				t.Errorf("kubectl auth can-i %s as the ServiceAccount: %q (%v), want no", strings.Join(args, " "), got, err)
			} else {
				t.Logf("kubectl auth can-i %s --as %s: no", strings.Join(args, " "), agentUser)
			}
		}
	})

	// The policy refuses DELETE on its own, should RBAC ever allow it: grant
	// delete for a moment and try with a dry run.
	t.Run("denied delete by the policy alone", func(t *testing.T) {
		grant := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-delete-nodes"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"delete"}}}}
		bind := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "deploy-test-delete-nodes"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: grant.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentNamespace, Name: agentServiceAccount}}}
		if _, err := b.c.RbacV1().ClusterRoles().Create(ctx, grant, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.RbacV1().ClusterRoleBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = b.c.RbacV1().ClusterRoleBindings().Delete(ctx, bind.Name, metav1.DeleteOptions{})
			_ = b.c.RbacV1().ClusterRoles().Delete(ctx, grant.Name, metav1.DeleteOptions{})
		}()
		var last error
		testenv.WaitFor(t, 30*time.Second, "RBAC to allow the delete", func() (bool, error) {
			last = sa.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			return last == nil || !strings.Contains(last.Error(), byRBAC), nil
		})
		wantDenied(t, "delete node-2 with RBAC allowing it (dry run)", last, "never deletes Nodes")
	})

	// Nothing of node-2 changed, and node-1 kept its foreign parts.
	node2 := getNode(t, b.c, "node-2")
	if !maps.Equal(node2.Labels, node2Before.Labels) || node2.Spec.Unschedulable || !slices.EqualFunc(node2.Spec.Taints, node2Before.Spec.Taints, func(a, b corev1.Taint) bool { return a.Key == b.Key && a.Effect == b.Effect }) {
		t.Errorf("node-2 changed: labels %v unschedulable %t taints %v", node2.Labels, node2.Spec.Unschedulable, node2.Spec.Taints)
	}
	n1 := getNode(t, b.c, "node-1")
	if n1.Labels["team"] != "" || n1.Annotations[testenv.KwokNodeAnnotation] != testenv.KwokNodeValue || !slices.ContainsFunc(n1.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == testenv.KwokTaintKey }) ||
		n1.Spec.Unschedulable || testenv.HasTaint(n1, testenv.DrainTaint) || len(testenv.OwnedLabels(n1.Labels)) != 0 {
		t.Errorf("node-1 not as before: labels %v annotations %v taints %v unschedulable %t", n1.Labels, n1.Annotations, n1.Spec.Taints, n1.Spec.Unschedulable)
	}
}

// testAgent is acceptance 3: `node-agent run` with the ServiceAccount's
// token bound to its pod on node-1, with the shipped config file, labels
// node-1 from the real embedded libvirt and drains it on the maintenance
// annotation, without a single refused request.
func (b *deployBed) testAgent(t *testing.T) {
	requireLibvirt(t)
	ctx := t.Context()
	c := b.c
	dir := t.TempDir()

	cfgFile, kubeconfig := b.agentFiles(t, dir, "node-1")

	// A small Deployment on node-1: keep the other nodes cordoned while it
	// settles.
	for _, n := range []string{"node-2", "node-3"} {
		if err := patchNode(c, n, `{"spec":{"unschedulable":true}}`); err != nil {
			t.Fatal(err)
		}
	}
	const replicas = 4
	testenv.CreateDeployment(ctx, t, c, "work", "web", replicas, "node-1")
	testenv.WaitRunningOn(ctx, t, c, "work", "node-1", replicas)
	for _, n := range []string{"node-2", "node-3"} {
		if err := patchNode(c, n, `{"spec":{"unschedulable":false}}`); err != nil {
			t.Fatal(err)
		}
	}

	// libvirt's QEMU monitor socket lives under the root; a t.TempDir()
	// named after this test would exceed a socket path's 108 bytes.
	short, err := os.MkdirTemp("", "na-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	began := time.Now()
	uri := "qemu:///embed?root=" + filepath.Join(short, "libvirt")
	agent := startAgent(t, b.env, "node-1", "--config", cfgFile, "--kubeconfig", kubeconfig, "--libvirt-uri", uri, "--shutdown-enabled=false")
	usage := watchUsage(agent.Cmd.Process.Pid, short)
	defer usage.stop()
	agent.WaitReady(t)
	// Its start check finds the shipped policy holding it (pkg/confinement).
	testenv.WaitFor(t, time.Minute, "the agent's confinement check", func() (bool, error) {
		return scrape(t, agent.MetricsAddr, "node_agent_admission_policy_enforced") != -1, nil
	})
	if v := scrape(t, agent.MetricsAddr, "node_agent_admission_policy_enforced"); v != 1 {
		t.Errorf("node_agent_admission_policy_enforced = %v with deploy/ as shipped, want 1", v)
	}

	var labels map[string]string
	testenv.WaitFor(t, 3*time.Minute, "CPU labels on node-1", func() (bool, error) {
		labels = testenv.OwnedLabels(getNode(t, c, "node-1").Labels)
		// The host model is labelled whatever this host's CPU; which
		// models are usable depends on it.
		for k := range labels {
			if strings.HasPrefix(k, kubevirtlabels.HostModelCPULabelPrefix) {
				return true, nil
			}
		}
		return false, nil
	})
	labelled := usage.sample()
	t.Logf("node-1 labelled after %s: %d owned labels, for example %s", time.Since(began).Round(time.Second), len(labels), strings.Join(firstKeys(labels, 4), " "))

	// Steady state: what the agent costs between events.
	const idleWindow = 10 * time.Second
	time.Sleep(idleWindow)
	idle := usage.sample()

	out, err := cli(t, b.env, "start", "node-1", "--reason", "deploy test", "--wait")
	t.Logf("maintenance start --wait:\n%s", out)
	if err != nil {
		t.Fatalf("maintenance start --wait: %v", err)
	}
	drained := usage.sample()
	st := nodeStatus(t, c, "node-1")
	t.Logf("status: %s", st.Encode())
	if st.Phase != selfdrain.PhaseSucceeded || st.EvictionPods != replicas {
		t.Errorf("phase %s after %d evictions, want Succeeded after %d", st.Phase, st.EvictionPods, replicas)
	}
	node := getNode(t, c, "node-1")
	if !node.Spec.Unschedulable || !testenv.HasTaint(node, testenv.DrainTaint) {
		t.Errorf("node-1 not cordoned and tainted: unschedulable=%t taints=%v", node.Spec.Unschedulable, node.Spec.Taints)
	}
	// The condition follows the status annotation.
	testenv.WaitFor(t, 30*time.Second, "condition UnderMaintenance=True Drained", func() (bool, error) {
		cond := nodeCondition(getNode(t, c, "node-1"))
		return cond != nil && cond.Status == corev1.ConditionTrue && cond.Reason == selfdrain.ReasonDrained, nil
	})
	left, err := testenv.PodsOn(ctx, c, "work", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range left {
		if p.Labels["app"] == "web" {
			t.Errorf("pod %s still on node-1", p.Name)
		}
	}
	testenv.WaitDeploymentAvailable(ctx, t, c, "work", "web", replicas)
	testenv.WaitFor(t, time.Minute, "the agent's Events on node-1", func() (bool, error) {
		evs, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=node-1,source=node-agent"})
		if err != nil {
			return false, err
		}
		seen := map[string]bool{}
		for _, e := range evs.Items {
			seen[e.Reason] = true
		}
		return seen["CPULabelsChanged"] && seen["MaintenanceStarted"] && seen["DrainSucceeded"], nil
	})

	out, err = cli(t, b.env, "stop", "node-1", "--wait")
	t.Logf("maintenance stop --wait:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	node = getNode(t, c, "node-1")
	if node.Spec.Unschedulable || testenv.HasTaint(node, testenv.DrainTaint) || nodeCondition(node) != nil {
		t.Errorf("after stop: unschedulable=%t taints=%v condition=%+v", node.Spec.Unschedulable, node.Spec.Taints, nodeCondition(node))
	}

	heap := scrape(t, agent.MetricsAddr, "go_memstats_heap_inuse_bytes")
	if err := agent.Stop(t); err != nil {
		t.Errorf("node-agent exited with %v after SIGTERM", err)
	}
	usage.stop()
	final := usage.sample()
	log := agent.Log()
	for _, bad := range []string{"forbidden", "Forbidden", " 403", "Unauthorized", "is invalid"} {
		if strings.Contains(log, bad) {
			t.Errorf("the agent's log contains %q:\n%s", bad, grepLines(log, bad, 10))
		}
	}

	// The apiserver's own record of every request the agent made.
	b.checkAudit(t, began)

	t.Logf("resources of node-agent run (the agent, and the agent with its QEMU probes), %d samples 100ms apart:", final.samples)
	t.Logf("  RSS: agent %.0f MiB when labelled, %.0f MiB idle, %.0f MiB drained; peak: agent %.0f MiB, with its QEMU probes %.0f MiB",
		mib(labelled.agentRSS), mib(idle.agentRSS), mib(drained.agentRSS), mib(final.peakAgentRSS), mib(final.peakTreeRSS))
	t.Logf("  Go heap in use after the drain: %.0f MiB", heap/(1<<20))
	t.Logf("  CPU, start to labelled (%s): %.2f s (%.0f millicores)", labelled.at.Sub(usage.start).Round(time.Second), labelled.cpu.Seconds(),
		millicores(labelled.cpu, labelled.at.Sub(usage.start)))
	t.Logf("  CPU, idle (%s after labelling): %.3f s (%.1f millicores)", idle.at.Sub(labelled.at).Round(time.Second), (idle.cpu - labelled.cpu).Seconds(),
		millicores(idle.cpu-labelled.cpu, idle.at.Sub(labelled.at)))
	t.Logf("  CPU, maintenance start to drained (%s, %d pods): %.3f s (%.0f millicores)", drained.at.Sub(idle.at).Round(time.Second), replicas,
		(drained.cpu - idle.cpu).Seconds(), millicores(drained.cpu-idle.cpu, drained.at.Sub(idle.at)))
	t.Logf("  CPU, whole run (%s): %.2f s", final.at.Sub(usage.start).Round(time.Second), final.cpu.Seconds())
}

func firstKeys(m map[string]string, n int) []string {
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) > n {
		keys = keys[:n]
	}
	return keys
}

func grepLines(s, sub string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// checkAudit reads the apiserver's audit log: every request `node-agent run`
// (user agent node-agent/node-1) made since began must be one the
// ClusterRole or Roles deploy/ binds to the agent's ServiceAccount grant, and
// none may have been refused (401, 403, or 422, the code of an admission
// denial without a reason).
func (b *deployBed) checkAudit(t *testing.T, began time.Time) {
	t.Helper()
	audit := testenv.NewAuditReader(b.auditLog, "")
	if err := audit.Read(); err != nil {
		t.Fatal(err)
	}
	last := map[string]testenv.AuditEvent{}
	for _, e := range audit.Events() {
		if e.User.Username != agentUser || !strings.HasPrefix(e.UserAgent, "node-agent/node-1") || e.Received.Time.Before(began) || e.ObjectRef == nil {
			continue
		}
		last[e.AuditID] = e // the latest stage of each request
	}
	if len(last) == 0 {
		t.Fatal("the audit log has no request of node-agent/node-1")
	}

	granted := b.grantedByDeploy(t, agentServiceAccount)
	tally := map[string]map[int]int{}
	impersonated := map[string]int{}
	for _, e := range last {
		res := e.Resource()
		if e.ObjectRef.APIGroup != "" {
			res = e.ObjectRef.APIGroup + "/" + res
		}
		key := e.Verb + " " + res
		if e.ObjectRef.Namespace != "" {
			key += " in " + e.ObjectRef.Namespace
		}
		code := e.Code()
		if tally[key] == nil {
			tally[key] = map[int]int{}
		}
		tally[key][code]++
		// The start check's dry runs (pkg/confinement) are meant to be
		// refused; CheckConfinementProbes checks them below.
		if confinement.IsProbe(e.RequestURI) {
			continue
		}
		switch code {
		case 401, 403, 422:
			msg := ""
			if e.ResponseStatus != nil {
				msg = e.ResponseStatus.Message
			}
			t.Errorf("the apiserver refused the agent's %s with %d: %s", key, code, msg)
		}
		verb := e.Verb
		if e.ImpersonatedUser != nil {
			// Pods are reached as the node (pkg/podaccess), and only as
			// the agent's own node.
			if e.ImpersonatedUser.Username != podaccess.NodeUser("node-1") {
				t.Errorf("the agent's %s impersonated %s, want %s", key, e.ImpersonatedUser.Username, podaccess.NodeUser("node-1"))
			}
			verb = "impersonate-on:associated-node:" + verb
			impersonated[key]++
		} else if e.ObjectRef.Resource == "pods" {
			t.Errorf("the agent's %s went out as the ServiceAccount itself, not as its node", key)
		} else if e.ObjectRef.Resource == "nodes" && e.ObjectRef.Subresource == "" && slices.Contains([]string{"get", "list", "watch"}, e.Verb) {
			// Its own Node is read as the node too (OwnNodeReads).
			t.Errorf("the agent's %s of Node %q went out as the ServiceAccount itself, not as its node", key, e.ObjectRef.Name)
		}
		if !granted(verb, e.ObjectRef.APIGroup, res, e.ObjectRef.Namespace, e.ObjectRef.Name) {
			t.Errorf("the agent made a request deploy/rbac.yaml does not grant: %s (as %s)", key, verb)
		}
	}
	if _, _, err := testenv.CheckConfinementProbes(slices.Collect(maps.Values(last))); err != nil {
		t.Error(err)
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(tally)) {
		var codes []string
		for _, code := range slices.Sorted(maps.Keys(tally[k])) {
			codes = append(codes, fmt.Sprintf("%d×%d", tally[k][code], code))
		}
		lines = append(lines, fmt.Sprintf("  %-52s %s", k, strings.Join(codes, " ")))
	}
	t.Logf("audit log: %d requests of node-agent run, by verb and resource (count×status):\n%s", len(last), strings.Join(lines, "\n"))
	t.Logf("made as %s by the ServiceAccount: %v", podaccess.NodeUser("node-1"), impersonated)
	evictions := 0
	for k, n := range impersonated {
		if strings.HasPrefix(k, "create pods/eviction") {
			evictions += n
		}
	}
	if evictions == 0 {
		t.Errorf("no eviction in the audit log was made as %s", podaccess.NodeUser("node-1"))
	}
}

// grantedByDeploy returns whether the rules deploy/ binds to the
// ServiceAccount sa of the namespace node-agent allow a request.
func (b *deployBed) grantedByDeploy(t *testing.T, sa string) func(verb, group, resource, namespace, name string) bool {
	t.Helper()
	type rule struct {
		namespace string // "" for a ClusterRole
		r         rbacv1.PolicyRule
	}
	type ref struct{ kind, namespace, name string }
	objs := testenv.ReadDeployObjects(t)
	roles := map[ref][]rbacv1.PolicyRule{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "Role":
			var role rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
			roles[ref{o.GetKind(), o.GetNamespace(), o.GetName()}] = role.Rules
		}
	}
	var rules []rule
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRoleBinding", "RoleBinding":
			var rb rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &rb); err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == agentNamespace && s.Name == sa
			}) {
				continue
			}
			// A RoleBinding grants in its own namespace, whatever it refers to.
			roleNamespace, grantNamespace := o.GetNamespace(), o.GetNamespace()
			if rb.RoleRef.Kind == "ClusterRole" {
				roleNamespace = ""
			}
			for _, r := range roles[ref{rb.RoleRef.Kind, roleNamespace, rb.RoleRef.Name}] {
				rules = append(rules, rule{namespace: grantNamespace, r: r})
			}
		}
	}
	if len(rules) == 0 {
		t.Fatalf("deploy/ grants the ServiceAccount %s nothing", sa)
	}
	return func(verb, group, resource, namespace, name string) bool {
		resource = strings.TrimPrefix(resource, group+"/")
		for _, r := range rules {
			if r.namespace != "" && r.namespace != namespace {
				continue
			}
			if len(r.r.ResourceNames) > 0 && !slices.Contains(r.r.ResourceNames, name) {
				continue
			}
			if slices.Contains(r.r.APIGroups, group) && slices.Contains(r.r.Resources, resource) && slices.Contains(r.r.Verbs, verb) {
				return true
			}
		}
		return false
	}
}

// usageWatcher samples the resident memory and CPU time of the agent and
// of the QEMU processes its embedded libvirt starts to probe QEMU, from
// /proc. Those QEMUs daemonize, so they are found by their command line
// (which names the libvirt root, marker), not only as descendants. In a pod
// they all count against the container's limits.
type usageWatcher struct {
	pid    int
	marker string
	start  time.Time
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu                        sync.Mutex
	peakAgentRSS, peakTreeRSS int64
	samples                   int
	agentCPU                  time.Duration         // agent plus its reaped children
	detachedCPU               map[int]time.Duration // daemonized QEMUs, by pid
}

type usageSample struct {
	at                        time.Time
	agentRSS                  int64 // now
	cpu                       time.Duration
	peakAgentRSS, peakTreeRSS int64
	samples                   int
}

func watchUsage(pid int, marker string) *usageWatcher {
	w := &usageWatcher{pid: pid, marker: marker, start: time.Now(), done: make(chan struct{}), detachedCPU: map[int]time.Duration{}}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			w.poll()
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *usageWatcher) poll() {
	stats := map[int][]string{}
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(pid); f != nil {
			stats[pid] = f
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	if stats[w.pid] == nil {
		return // exited
	}
	agentRSS := procRSS(w.pid)
	tree := map[int]bool{}
	queue := []int{w.pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		tree[p] = true
	}
	total := int64(0)
	detached := map[int]time.Duration{}
	for pid, f := range stats {
		if tree[pid] {
			total += procRSS(pid)
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if w.marker != "" && bytes.Contains(cmdline, []byte(w.marker)) {
			total += procRSS(pid)
			detached[pid] = ticks(f[11:13])
		}
	}
	// Fields 14-17 of /proc/PID/stat (index 11 on, after pid and comm):
	// utime, stime, cutime, cstime.
	agentCPU := ticks(stats[w.pid][11:15])
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	w.peakAgentRSS = max(w.peakAgentRSS, agentRSS)
	w.peakTreeRSS = max(w.peakTreeRSS, total)
	w.agentCPU = max(w.agentCPU, agentCPU)
	for pid, c := range detached {
		w.detachedCPU[pid] = max(w.detachedCPU[pid], c)
	}
}

// ticks sums /proc stat fields in clock ticks (USER_HZ, 100 on Linux).
func ticks(fields []string) time.Duration {
	var d time.Duration
	for _, s := range fields {
		v, _ := strconv.ParseInt(s, 10, 64)
		d += time.Duration(v) * 10 * time.Millisecond
	}
	return d
}

func (w *usageWatcher) sample() usageSample {
	w.poll()
	w.mu.Lock()
	defer w.mu.Unlock()
	cpu := w.agentCPU
	for _, c := range w.detachedCPU {
		cpu += c
	}
	return usageSample{at: time.Now(), agentRSS: procRSS(w.pid), cpu: cpu, peakAgentRSS: w.peakAgentRSS, peakTreeRSS: w.peakTreeRSS, samples: w.samples}
}

func (w *usageWatcher) stop() {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
}

// procStat returns the fields of /proc/PID/stat after "pid (comm)": state,
// ppid, ...
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return nil
	}
	return f
}

// procRSS returns the resident set size of pid in bytes, 0 when it is gone.
func procRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func millicores(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 1000 * cpu.Seconds() / wall.Seconds()
}
