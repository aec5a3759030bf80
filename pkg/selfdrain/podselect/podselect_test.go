package podselect

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/kubectl/pkg/drain"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// The cluster the pod filter tests run against: which DaemonSets exist, and
// which lookups fail.
var (
	pfDaemonSets = []string{"ns/ds", "ns/ds-old-api", "other/ds-elsewhere"}
	// pfLookupErrors are the DaemonSet lookups that fail with an error other
	// than NotFound.
	pfLookupErrors = map[string]error{
		"ds-forbidden": apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "ds-forbidden", errors.New("RBAC says no")),
		"ds-blank":     errors.New(""),
	}
)

const pfNode = "pf-node"

type pfOption func(*corev1.Pod)

// pfPod returns a Running pod ns/name on pfNode, changed by opts.
func pfPod(name string, opts ...pfOption) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: pfNode, Containers: []corev1.Container{{Name: "c", Image: "img"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func pfOwner(apiVersion, kind, name string, controller *bool) pfOption {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: controller})
	}
}

func pfDS(name string) pfOption { return pfOwner("apps/v1", "DaemonSet", name, ptrTo(true)) }

func pfRS(name string) pfOption { return pfOwner("apps/v1", "ReplicaSet", name, ptrTo(true)) }

func pfPhase(ph corev1.PodPhase) pfOption { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func pfNamespace(ns string) pfOption { return func(p *corev1.Pod) { p.Namespace = ns } }

func pfMirror(value string) pfOption {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[corev1.MirrorPodAnnotationKey] = value
	}
}

func pfVolume(v corev1.VolumeSource) pfOption {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "v" + string(rune('0'+len(p.Spec.Volumes))), VolumeSource: v})
	}
}

var pfEmptyDir = pfVolume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})

func pfLabel(k, v string) pfOption {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
}

// pfCase is one pod and what the drain does with it: "evict", "error", or
// the reason it is kept.
type pfCase struct {
	pod  corev1.Pod
	want string
	// lookups is how many DaemonSet lookups judging the pod takes.
	lookups int
}

func pfCases() []pfCase {
	deleting := func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(-time.Hour).Truncate(time.Second)}
		p.Finalizers = []string{"example.com/hold"}
	}
	return []pfCase{
		{pod: pfPod("bare"), want: "evict"},
		{pod: pfPod("bare-pending", pfPhase(corev1.PodPending)), want: "evict"},
		{pod: pfPod("bare-unknown-phase", pfPhase(corev1.PodUnknown)), want: "evict"},
		{pod: pfPod("replicaset", pfRS("rs")), want: "evict"},
		{pod: pfPod("statefulset", pfOwner("apps/v1", "StatefulSet", "sts", ptrTo(true))), want: "evict"},
		{pod: pfPod("job", pfOwner("batch/v1", "Job", "job", ptrTo(true))), want: "evict"},
		{pod: pfPod("ds-present", pfDS("ds")), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("ds-present-pending", pfDS("ds"), pfPhase(corev1.PodPending)), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("ds-present-unknown-phase", pfDS("ds"), pfPhase(corev1.PodUnknown)), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("ds-present-emptydir", pfDS("ds"), pfEmptyDir), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("ds-notfound", pfDS("ds-gone")), want: "evict", lookups: 1},
		{pod: pfPod("ds-notfound-emptydir", pfDS("ds-gone"), pfEmptyDir), want: "evict", lookups: 1},
		{pod: pfPod("ds-forbidden", pfDS("ds-forbidden")), want: "error", lookups: 1},
		{pod: pfPod("ds-forbidden-too", pfDS("ds-forbidden")), want: "error", lookups: 1},
		{pod: pfPod("ds-blank-error", pfDS("ds-blank")), want: "error", lookups: 1},
		{pod: pfPod("ds-present-succeeded", pfDS("ds"), pfPhase(corev1.PodSucceeded)), want: "evict"},
		{pod: pfPod("ds-present-failed", pfDS("ds"), pfPhase(corev1.PodFailed)), want: "evict"},
		{pod: pfPod("ds-forbidden-failed", pfDS("ds-forbidden"), pfPhase(corev1.PodFailed)), want: "evict"},
		// The DaemonSet is looked up in the pod's namespace: one of that
		// name in another namespace does not count.
		{pod: pfPod("ds-in-other-namespace", pfDS("ds-elsewhere")), want: "evict", lookups: 1},
		{pod: pfPod("ds-elsewhere-here", pfNamespace("other"), pfDS("ds-elsewhere")), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("ds-ns-other", pfNamespace("other"), pfDS("ds")), want: "evict", lookups: 1},
		// Only a controller reference to an apps/v1 DaemonSet counts.
		{pod: pfPod("ds-old-api", pfOwner("extensions/v1beta1", "DaemonSet", "ds-old-api", ptrTo(true))), want: "evict"},
		{pod: pfPod("ds-v1beta2", pfOwner("apps/v1beta2", "DaemonSet", "ds", ptrTo(true))), want: "evict"},
		{pod: pfPod("ds-kind-case", pfOwner("apps/v1", "daemonset", "ds", ptrTo(true))), want: "evict"},
		{pod: pfPod("ds-not-controller", pfOwner("apps/v1", "DaemonSet", "ds", ptrTo(false))), want: "evict"},
		{pod: pfPod("ds-controller-unset", pfOwner("apps/v1", "DaemonSet", "ds", nil)), want: "evict"},
		{pod: pfPod("rs-owner-not-controller", pfOwner("apps/v1", "ReplicaSet", "rs", nil)), want: "evict"},
		{pod: pfPod("ds-owner-then-rs-controller", pfOwner("apps/v1", "DaemonSet", "ds", nil), pfRS("rs")), want: "evict"},
		{pod: pfPod("rs-owner-then-ds-controller", pfOwner("apps/v1", "ReplicaSet", "rs", ptrTo(false)), pfDS("ds")), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("mirror", pfMirror("abc")), want: keepMirrorPod},
		{pod: pfPod("mirror-empty-annotation", pfMirror("")), want: keepMirrorPod},
		{pod: pfPod("mirror-succeeded", pfMirror("abc"), pfPhase(corev1.PodSucceeded)), want: keepMirrorPod},
		{pod: pfPod("mirror-failed", pfMirror("abc"), pfPhase(corev1.PodFailed)), want: keepMirrorPod},
		{pod: pfPod("mirror-emptydir", pfMirror("abc"), pfEmptyDir), want: keepMirrorPod},
		{pod: pfPod("mirror-node-owned", pfMirror("abc"), pfOwner("v1", "Node", pfNode, ptrTo(true))), want: keepMirrorPod},
		// The DaemonSet rule comes before the mirror rule.
		{pod: pfPod("mirror-ds-present", pfMirror("abc"), pfDS("ds")), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("mirror-ds-notfound", pfMirror("abc"), pfDS("ds-gone")), want: keepMirrorPod, lookups: 1},
		{pod: pfPod("mirror-ds-forbidden", pfMirror("abc"), pfDS("ds-forbidden")), want: "error", lookups: 1},
		{pod: pfPod("other-annotation", func(p *corev1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.source": "file"} }), want: "evict"},
		{pod: pfPod("emptydir", pfEmptyDir), want: "evict"},
		{pod: pfPod("emptydir-memory", pfVolume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}), pfRS("rs")), want: "evict"},
		{pod: pfPod("emptydir-succeeded", pfEmptyDir, pfPhase(corev1.PodSucceeded)), want: "evict"},
		{pod: pfPod("emptydir-failed", pfEmptyDir, pfPhase(corev1.PodFailed), pfRS("rs")), want: "evict"},
		{pod: pfPod("hostpath", pfVolume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var"}})), want: "evict"},
		{pod: pfPod("succeeded", pfPhase(corev1.PodSucceeded)), want: "evict"},
		{pod: pfPod("failed", pfPhase(corev1.PodFailed)), want: "evict"},
		{pod: pfPod("failed-rs", pfPhase(corev1.PodFailed), pfRS("rs")), want: "evict"},
		{pod: pfPod("deleting", deleting), want: "evict"},
		{pod: pfPod("deleting-ds-present", deleting, pfDS("ds")), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("labelled", pfLabel("app", "web"), pfRS("rs")), want: "evict"},
		{pod: pfPod("labelled-ds", pfLabel("app", "web"), pfDS("ds")), want: keepDaemonSetPod, lookups: 1},
		{pod: pfPod("labelled-db", pfLabel("app", "db")), want: "evict"},
	}
}

// pfLookup answers DaemonSet lookups from pfDaemonSets and pfLookupErrors,
// counting them.
func pfLookup(calls *int) daemonSetLookup {
	return func(ctx context.Context, namespace, name string) error {
		*calls++
		if err := pfLookupErrors[name]; err != nil {
			return err
		}
		if slices.Contains(pfDaemonSets, namespace+"/"+name) {
			return nil
		}
		return apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, name)
	}
}

func (v podVerdict) String() string {
	switch {
	case v.Err != nil && (v.Evict || v.Keep != ""), v.Evict && v.Keep != "":
		return "inconsistent"
	case v.Err != nil:
		return "error"
	case v.Evict:
		return "evict"
	case v.Keep != "":
		return v.Keep
	}
	return "nothing"
}

func TestPodFilterJudgePod(t *testing.T) {
	for _, c := range pfCases() {
		t.Run(c.pod.Name, func(t *testing.T) {
			calls := 0
			v := judgePod(context.Background(), &c.pod, pfLookup(&calls))
			if got := v.String(); got != c.want {
				t.Errorf("verdict = %s (%+v), want %s", got, v, c.want)
			}
			if calls != c.lookups {
				t.Errorf("%d DaemonSet lookups, want %d", calls, c.lookups)
			}
		})
	}
}

func TestPodsToEvict(t *testing.T) {
	cases := pfCases()
	pods := make([]corev1.Pod, len(cases))
	var want []string
	for i, c := range cases {
		pods[i] = c.pod
		if c.want == "evict" {
			want = append(want, c.pod.Name)
		}
	}
	before := make([]corev1.Pod, len(pods))
	for i := range pods {
		before[i] = *pods[i].DeepCopy()
	}
	calls := 0
	evict, errs := podsToEvict(context.Background(), pods, pfLookup(&calls))
	var got []string
	for _, p := range evict {
		got = append(got, p.Name)
		if p.Kind != "Pod" || p.APIVersion != "v1" {
			t.Errorf("evicted pod %s has kind %q apiVersion %q, want Pod v1", p.Name, p.Kind, p.APIVersion)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("evicted\n  %v\nwant (in input order)\n  %v", got, want)
	}
	if !reflect.DeepEqual(pods, before) {
		t.Error("podsToEvict changed its input")
	}
	// One error per message, in order of first appearance, naming the pods.
	wantErrs := []string{
		`cannot delete daemonsets.apps "ds-forbidden" is forbidden: RBAC says no: ns/ds-forbidden, ns/ds-forbidden-too, ns/mirror-ds-forbidden`,
		`cannot delete unexpected error: ns/ds-blank-error`,
	}
	var gotErrs []string
	for _, err := range errs {
		gotErrs = append(gotErrs, err.Error())
	}
	if !slices.Equal(gotErrs, wantErrs) {
		t.Errorf("errors\n  %q\nwant\n  %q", gotErrs, wantErrs)
	}
	if len(errs) > 0 && !apierrors.IsForbidden(errs[0]) {
		t.Errorf("apierrors.IsForbidden(%v) = false, want the lookup error wrapped", errs[0])
	}

	evict, errs = podsToEvict(context.Background(), nil, pfLookup(&calls))
	if len(evict) != 0 || errs != nil {
		t.Errorf("podsToEvict(no pods) = %v, %v; want nothing", evict, errs)
	}
	evict, errs = podsToEvict(context.Background(), []corev1.Pod{pfPod("a"), pfPod("b", pfDS("ds")), pfPod("c", pfRS("rs"))}, pfLookup(&calls))
	if len(evict) != 2 || evict[0].Name != "a" || evict[1].Name != "c" || errs != nil {
		t.Errorf("podsToEvict(a, b (DaemonSet), c) = %v, %v; want a and c, no errors", evict, errs)
	}
}

func TestPodFilterPassesTheContext(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "mine")
	seen := 0
	_, errs := podsToEvict(ctx, []corev1.Pod{pfPod("a", pfDS("ds"))}, func(got context.Context, namespace, name string) error {
		seen++
		if got.Value(key{}) != "mine" {
			t.Error("the DaemonSet lookup did not get the caller's context")
		}
		if namespace != "ns" || name != "ds" {
			t.Errorf("looked up DaemonSet %s/%s, want ns/ds", namespace, name)
		}
		return context.Canceled
	})
	if seen != 1 || len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("%d lookups, errors %v; want 1 lookup and an error wrapping context.Canceled", seen, errs)
	}
}

// pfClient returns a fake clientset holding pods and pfDaemonSets whose
// DaemonSet lookups fail as pfLookupErrors says.
func pfClient(pods []corev1.Pod) *fake.Clientset {
	var objs []runtime.Object
	for i := range pods {
		objs = append(objs, pods[i].DeepCopy())
	}
	for _, key := range pfDaemonSets {
		ns, name, _ := strings.Cut(key, "/")
		objs = append(objs, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	client := fake.NewClientset(objs...)
	client.PrependReactor("get", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if err := pfLookupErrors[a.(k8stesting.GetAction).GetName()]; err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	return client
}

// pfOurs runs the pods on client through selectPods and podsToEvict, the
// way the drain does.
func pfOurs(t *testing.T, client *fake.Clientset, selector string) ([]corev1.Pod, []error, error) {
	list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + pfNode})
	if err != nil {
		t.Fatal(err)
	}
	selected, _, err := selectPods(list.Items, selector)
	if err != nil {
		return nil, nil, err
	}
	evict, errs := podsToEvict(context.Background(), selected, kubectlLookup(kubetest.Wrap(client)))
	return evict, errs, nil
}

// kubectlLookup gets the DaemonSet, as kubectl drain does; the drain itself
// reads none (controllerRefOnly), and its parity with kubectl is checked with
// this one.
func kubectlLookup(client kube.Interface) daemonSetLookup {
	return func(ctx context.Context, namespace, name string) error {
		_, err := client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	}
}

// TestControllerRefOnly: the drain's own lookup keeps the pods of a
// DaemonSet from the controller reference alone, orphans (no owner
// reference, as the garbage collector leaves them) are evicted; it takes no
// client, so it reads nothing.
func TestControllerRefOnly(t *testing.T) {
	gone := pfPod("ds-gone", pfDS("deleted-daemonset"))
	orphan := pfPod("orphaned")
	mirror := pfPod("static", pfMirror("x"))
	evict, errs := podsToEvict(context.Background(), []corev1.Pod{gone, orphan, mirror}, controllerRefOnly)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(evict) != 1 || evict[0].Name != "orphaned" {
		t.Errorf("evicted %v, want only the pod without a controller", podNames(evict))
	}
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// pfKubectl runs the pods on client through kubectl's drain.Helper with the
// options the drain used to give it.
func pfKubectl(client *fake.Clientset, selector string) ([]corev1.Pod, []error) {
	h := &drain.Helper{
		Ctx: context.Background(), Client: client, Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		PodSelector: selector, GracePeriodSeconds: -1,
	}
	list, errs := h.GetPodsForDeletion(pfNode)
	if list == nil {
		return nil, errs
	}
	return list.Pods(), errs
}

func pfSortedErrors(errs []error) []string {
	var s []string
	for _, err := range errs {
		s = append(s, err.Error())
	}
	slices.Sort(s)
	return s
}

// pfCompare fails the test unless both chose the same pods, in the same
// order and alike to the last field, and the same errors (kubectl's order of
// the errors is random).
func pfCompare(t *testing.T, what string, ours, theirs []corev1.Pod, ourErrs, theirErrs []error) {
	t.Helper()
	if len(ours) == 0 && len(theirs) == 0 {
		ours, theirs = nil, nil
	}
	if !reflect.DeepEqual(ours, theirs) {
		t.Errorf("%s: podsToEvict evicts %v, kubectl %v", what, pfNames(ours), pfNames(theirs))
	}
	if (len(ourErrs) > 0) != (len(theirErrs) > 0) || !slices.Equal(pfSortedErrors(ourErrs), pfSortedErrors(theirErrs)) {
		t.Errorf("%s: podsToEvict errors %q, kubectl %q", what, pfSortedErrors(ourErrs), pfSortedErrors(theirErrs))
	}
}

func pfNames(pods []corev1.Pod) []string {
	var s []string
	for _, p := range pods {
		s = append(s, p.Namespace+"/"+p.Name)
	}
	return s
}

// TestPodFilterMatchesKubectl runs every pod of the table through
// kubectl's drain.Helper and through podsToEvict, one at a time and all
// together, and with pod selectors.
func TestPodFilterMatchesKubectl(t *testing.T) {
	cases := pfCases()
	for _, c := range cases {
		t.Run(c.pod.Name, func(t *testing.T) {
			client := pfClient([]corev1.Pod{c.pod})
			ours, ourErrs, err := pfOurs(t, client, "")
			if err != nil {
				t.Fatal(err)
			}
			theirs, theirErrs := pfKubectl(client, "")
			pfCompare(t, c.pod.Name, ours, theirs, ourErrs, theirErrs)
			// The table's expectation holds for kubectl too.
			if kubectlEvicts := len(theirs) == 1; kubectlEvicts != (c.want == "evict") || (len(theirErrs) > 0) != (c.want == "error") {
				t.Errorf("kubectl evicts %v with errors %v; the table says %s", pfNames(theirs), theirErrs, c.want)
			}
		})
	}

	var pods []corev1.Pod
	for _, c := range cases {
		pods = append(pods, c.pod)
	}
	client := pfClient(pods)
	for _, sel := range []string{"", "app=web", "app in (web,db)", "app", "!app", "app!=web"} {
		ours, ourErrs, err := pfOurs(t, client, sel)
		if err != nil {
			t.Fatalf("selector %q: %v", sel, err)
		}
		theirs, theirErrs := pfKubectl(client, sel)
		pfCompare(t, "all pods, selector "+sel, ours, theirs, ourErrs, theirErrs)
		if sel == "" && (len(ours) < 10 || len(ourErrs) != 2) {
			t.Errorf("all pods: %d evicted and %d errors, want most evicted and 2 errors", len(ours), len(ourErrs))
		}
	}

	// Without the failing lookups there is no error at all.
	var quiet []corev1.Pod
	for _, c := range cases {
		if c.want != "error" {
			quiet = append(quiet, c.pod)
		}
	}
	client = pfClient(quiet)
	ours, ourErrs, _ := pfOurs(t, client, "")
	theirs, theirErrs := pfKubectl(client, "")
	pfCompare(t, "pods without lookup errors", ours, theirs, ourErrs, theirErrs)
	if theirErrs != nil || ourErrs != nil {
		t.Errorf("errors %v (kubectl %v), want none", ourErrs, theirErrs)
	}

	// An invalid selector is an error for both, before anything is listed.
	if _, _, err := pfOurs(t, client, "app=("); err == nil {
		t.Error("selectPods accepted an invalid selector")
	}
	if list, errs := (&drain.Helper{Ctx: context.Background(), Client: client, PodSelector: "app=("}).GetPodsForDeletion(pfNode); list != nil || len(errs) == 0 {
		t.Error("kubectl accepted an invalid selector: the test's premise is wrong")
	}
}

func ptrTo[T any](v T) *T { return &v }
