//go:build linux

package e2e

// The drain watcher: what the apiserver showed of node-1 and its pods during
// a reboot, each change stamped with its resourceVersion.

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// stamp is when the test saw a change, and the resourceVersion that made it.
type stamp struct {
	At time.Time
	RV uint64
}

func (s stamp) seen() bool { return !s.At.IsZero() }

// before reports whether a happened before b in the apiserver. The test's
// apiserver stores in etcd, whose resourceVersions are one revision counter
// across all objects, so they order a pod's deletion against a Node update
// exactly; times seen through two watches could be skewed by a loaded
// machine. (Clients of an arbitrary apiserver must treat resourceVersion as
// opaque; this test knows its backend.)
func before(a, b stamp) bool {
	if a.RV != 0 && b.RV != 0 {
		return a.RV < b.RV
	}
	return !a.At.After(b.At)
}

// drainWatch follows node-1 and the workload's pods through a shutdown drain.
// It keeps its own copy of the pods from the events, in order, rather than
// reading the informer's store, which may already be ahead of the event
// being handled and would hide a dip in the available pods.
type drainWatch struct {
	mu    sync.Mutex
	armed bool
	pods  map[types.UID]*corev1.Pod
	drainSnapshot
}

type drainSnapshot struct {
	cordoned, firstPodGone, lastPodGone, succeeded, failed stamp
	// onNode is the Deployment's pods still bound to node-1.
	onNode int
	// minAvailable is the fewest ready Deployment pods at any event since
	// arm.
	minAvailable, samples int
}

func watchDrain(ctx context.Context, t *testing.T, client kubernetes.Interface) *drainWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w := &drainWatch{pods: map[types.UID]*corev1.Pod{}}
	nodes := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + rebootNode
	}))
	pods := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(rebootNS))
	nodeInf := nodes.Core().V1().Nodes().Informer()
	podInf := pods.Core().V1().Pods().Informer()
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.node,
		UpdateFunc: func(_, obj any) { w.node(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.pod(obj, false) },
		UpdateFunc: func(_, obj any) { w.pod(obj, false) },
		DeleteFunc: func(obj any) { w.pod(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	nodes.Start(ctx.Done())
	pods.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		nodes.Shutdown()
		pods.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.HasSynced, podInf.HasSynced) {
		t.Fatal("watches of node-1 and its pods did not sync")
	}
	return w
}

// arm starts recording the drain's steps (the available pods are sampled
// from the start).
func (w *drainWatch) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = true
	w.minAvailable = w.available()
}

// settle waits until the watch has seen what cond wants: events that
// happened before the container exited may reach the test later on a loaded
// machine. The steps are ordered by resourceVersion, so a late arrival does
// not change the verdict.
func (w *drainWatch) settle(ctx context.Context, t *testing.T, what string, cond func(drainSnapshot) bool) drainSnapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var snap drainSnapshot
	waitFor(ctx, t, what, func() (bool, error) {
		snap = w.snapshot()
		return cond(snap), nil
	})
	return snap
}

func (w *drainWatch) snapshot() drainSnapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.drainSnapshot
}

func (w *drainWatch) node(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s := stamp{At: time.Now(), RV: resourceVersion(n.ObjectMeta)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed {
		return
	}
	if n.Spec.Unschedulable && !w.cordoned.seen() {
		w.cordoned = s
	}
	st, err := selfdrain.ParseStatus(n)
	if err != nil || st == nil || st.Trigger != selfdrain.TriggerShutdown || st.EndTime != nil {
		return
	}
	switch {
	case st.Phase == selfdrain.PhaseSucceeded && !w.succeeded.seen():
		w.succeeded = s
	case st.Phase == selfdrain.PhaseFailed && !w.failed.seen():
		w.failed = s
	}
}

func (w *drainWatch) pod(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Labels["app"] != rebootApp {
		return
	}
	s := stamp{At: time.Now(), RV: resourceVersion(p.ObjectMeta)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if deleted {
		delete(w.pods, p.UID)
	} else {
		w.pods[p.UID] = p
	}
	w.onNode = 0
	for _, q := range w.pods {
		if q.Spec.NodeName == rebootNode {
			w.onNode++
		}
	}
	// Sampled only once armed: while the informer syncs, its Add events
	// count the pods up from zero.
	if !w.armed {
		return
	}
	w.samples++
	w.minAvailable = min(w.minAvailable, w.available())
	if !deleted || p.Spec.NodeName != rebootNode {
		return
	}
	if !w.firstPodGone.seen() {
		w.firstPodGone = s
	}
	if w.onNode == 0 && !w.lastPodGone.seen() {
		w.lastPodGone = s
	}
}

// available counts the ready Deployment pods; w.mu is held.
func (w *drainWatch) available() int {
	n := 0
	for _, q := range w.pods {
		if testenv.PodReady(q) {
			n++
		}
	}
	return n
}

func resourceVersion(m metav1.ObjectMeta) uint64 {
	rv, _ := strconv.ParseUint(m.ResourceVersion, 10, 64)
	return rv
}
