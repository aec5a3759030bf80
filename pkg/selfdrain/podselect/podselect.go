// Package podselect chooses the pods a drain evicts, as kubectl drain with
// --force --ignore-daemonsets --delete-emptydir-data does, and says why each
// other pod stays (Choose, Finished), and plans a drain for a dry run
// (Plan). It reads pods and PodDisruptionBudgets and writes nothing.
package podselect

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file chooses the pods a drain evicts. It makes the same choice as
// kubectl's drain.Helper.GetPodsForDeletion (k8s.io/kubectl v0.36) with
// Force, IgnoreAllDaemonSets and DeleteEmptyDirData set, that is
// `kubectl drain --force --ignore-daemonsets --delete-emptydir-data`,
// without importing k8s.io/kubectl, which drags kustomize and cli-runtime
// into the binary. podselect_test.go checks the parity against kubectl.
//
// For one pod, kubectl's filters run in this order and the first that keeps
// the pod decides:
//
//  1. a pod whose controller is an apps/v1 DaemonSet and that has not
//     finished is looked up: the DaemonSet exists → kept; NotFound → evicted
//     (an orphan, with --force); any other error → an error for the pod;
//  2. a mirror (static) pod → kept, whatever its phase;
//  3. a pod with an emptyDir volume → evicted (--delete-emptydir-data);
//  4. a pod with no controller → evicted (--force).
//
// Everything else is evicted, including finished pods (Succeeded or Failed)
// and pods already being deleted.

// daemonSetLookup reports whether the DaemonSet namespace/name exists: nil
// if it does, the API error otherwise, as returned (the filter tells a
// missing DaemonSet by apierrors.IsNotFound). With a clientset:
//
//	func(ctx context.Context, ns, name string) error {
//		_, err := client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
//		return err
//	}
type daemonSetLookup func(ctx context.Context, namespace, name string) error

// controllerRefOnly is the drain's DaemonSet lookup: it reads nothing, and
// takes an unfinished pod's controller reference to an apps/v1 DaemonSet at
// its word. kubectl drain gets the DaemonSet to tell a managed pod from an
// orphan; node-agent's token may not read DaemonSets (issue 40: reads are as
// narrow as writes; RBAC cannot narrow a get to the DaemonSets of one
// node's pods), and the garbage collector makes the read unnecessary:
//   - a DaemonSet deleted with --cascade=orphan has its pods' owner
//     references removed, so they have no controller and are evicted, as
//     kubectl evicts them (--force);
//   - a DaemonSet deleted otherwise has its pods deleted by the collector;
//     until it gets to them they are left alone, where kubectl would evict
//     them;
//   - a controller reference to a DaemonSet that does not exist (a tenant
//     may write one into its own pod) is a dangling owner, and the collector
//     deletes that pod, checking the owner's UID.
//
// The result differs from kubectl's only for a pod whose DaemonSet is being
// deleted; podselect_test.go checks the parity with the lookup kubectl makes.
func controllerRefOnly(context.Context, string, string) error { return nil }

// Why judgePod keeps a pod.
const (
	keepDaemonSetPod = "DaemonSet pod"
	keepMirrorPod    = "mirror (static) pod"
)

// podVerdict is the drain's decision on one pod: exactly one of Evict, Keep
// and Err is set.
type podVerdict struct {
	// Evict is true if the drain evicts the pod.
	Evict bool
	// Keep, when not empty, says why the drain leaves the pod alone:
	// keepDaemonSetPod or keepMirrorPod.
	Keep string
	// Err is the error of the DaemonSet lookup (other than NotFound): the
	// pod can be neither evicted nor left alone, and the drain cannot start.
	Err error
}

// Finished reports whether the pod is Succeeded or Failed.
func Finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// daemonSetController returns the pod's controller reference if it names an
// apps/v1 DaemonSet, nil otherwise. Like kubectl it compares the apiVersion
// exactly: a controller reference to an extensions/v1beta1 or apps/v1beta2
// DaemonSet is treated as any other controller, so its pod is evicted.
func daemonSetController(p *corev1.Pod) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || ref.APIVersion != "apps/v1" || ref.Kind != "DaemonSet" {
		return nil
	}
	return ref
}

// judgePod decides what the drain does with pod. It calls daemonSetExists
// (which must not be nil) only for an unfinished pod controlled by a
// DaemonSet, in the pod's namespace: owner references do not cross
// namespaces.
func judgePod(ctx context.Context, pod *corev1.Pod, daemonSetExists daemonSetLookup) podVerdict {
	// kubectl's first filter skips pods deleted longer than
	// SkipWaitForDeleteTimeoutSeconds ago; that option is 0 (off) here, so
	// pods being deleted are judged like the others.
	if ref := daemonSetController(pod); ref != nil && !Finished(pod) {
		err := daemonSetExists(ctx, pod.Namespace, ref.Name)
		switch {
		case err == nil:
			return podVerdict{Keep: keepDaemonSetPod}
		case !apierrors.IsNotFound(err):
			return podVerdict{Err: err}
		}
		// The DaemonSet is gone: the pod is an orphan, which --force evicts
		// if no later rule keeps it.
	}
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return podVerdict{Keep: keepMirrorPod}
	}
	// Pods with emptyDir volumes (--delete-emptydir-data) and pods with no
	// controller (--force) are evicted too, so every other pod is.
	return podVerdict{Evict: true}
}

// podsToEvict returns the pods `kubectl drain --force --ignore-daemonsets
// --delete-emptydir-data` would delete, in input order, with Kind and
// APIVersion set as kubectl sets them, and the errors that would stop it.
// pods is what the caller listed: the pods on the node that match the pod
// selector (Choose). Finished pods are among those returned.
//
// Like kubectl, the pods whose DaemonSet lookup failed are grouped by error
// message, one error per message: "cannot delete <message>: ns/a, ns/b"
// (kubectl's order of the groups is random, here it is the order of first
// appearance). Each error wraps the first pod's lookup error, so
// apierrors.IsForbidden and the like work on it. A caller that gets errors
// must not evict: kubectl drain stops there.
func podsToEvict(ctx context.Context, pods []corev1.Pod, daemonSetExists daemonSetLookup) (evict []corev1.Pod, errs []error) {
	var failed []*podFilterError
	byMessage := map[string]*podFilterError{}
	for i := range pods {
		v := judgePod(ctx, &pods[i], daemonSetExists)
		switch {
		case v.Err != nil:
			msg := v.Err.Error()
			if msg == "" {
				msg = "unexpected error"
			}
			e := byMessage[msg]
			if e == nil {
				e = &podFilterError{message: msg, err: v.Err}
				byMessage[msg] = e
				failed = append(failed, e)
			}
			e.pods = append(e.pods, pods[i].Namespace+"/"+pods[i].Name)
		case v.Evict:
			p := pods[i]
			p.Kind, p.APIVersion = "Pod", "v1"
			evict = append(evict, p)
		}
	}
	for _, e := range failed {
		errs = append(errs, e)
	}
	return evict, errs
}

// podFilterError is one of podsToEvict's errors: the pods whose DaemonSet
// lookup failed with the same message.
type podFilterError struct {
	message string
	pods    []string // namespace/name
	err     error    // the first pod's error
}

func (e *podFilterError) Error() string {
	return fmt.Sprintf("cannot delete %s: %s", e.message, strings.Join(e.pods, ", "))
}

func (e *podFilterError) Unwrap() error { return e.err }
