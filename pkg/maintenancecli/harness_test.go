package maintenancecli

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// The tests' one harness: a fake clientset and a fake dynamic client (for
// NodeMaintenance objects), a fake clock, and a Client on them whose output
// goes to buffers.

// medik8s is the NodeMaintenance group the harness serves when asked to.
const medik8s = "nodemaintenance.medik8s.io"

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

type harness struct {
	t        *testing.T
	kube     *fake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	clock    *clocktesting.FakeClock
	out, err bytes.Buffer
	client   *Client
	// dynamicCalls counts the calls of Client.Dynamic.
	dynamicCalls int
}

// newHarness returns a harness holding objs; it serves the medik8s
// NodeMaintenance group when served.
func newHarness(t *testing.T, served bool, objs ...runtime.Object) *harness {
	t.Helper()
	var typed, nms []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*unstructured.Unstructured); ok {
			nms = append(nms, o)
		} else {
			typed = append(typed, o)
		}
	}
	h := &harness{
		t:     t,
		kube:  fake.NewClientset(typed...),
		clock: clocktesting.NewFakeClock(t0),
		dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
			maintenance.NodeMaintenanceGVR(medik8s):                       "NodeMaintenanceList",
			maintenance.NodeMaintenanceGVR("nodemaintenance.kubevirt.io"): "NodeMaintenanceList",
		}, nms...),
	}
	if served {
		h.kube.Resources = []*metav1.APIResourceList{{
			GroupVersion: medik8s + "/" + maintenance.NodeMaintenanceVersion,
			APIResources: []metav1.APIResource{{Name: maintenance.NodeMaintenanceResource}},
		}}
	}
	h.client = &Client{
		Kube: kubetest.Wrap(h.kube),
		Dynamic: func() (dynamic.Interface, error) {
			h.dynamicCalls++
			return h.dyn, nil
		},
		Out: &h.out, Err: &h.err, Clock: h.clock,
	}
	return h
}

// watchNodes makes every watch of Nodes read from the returned watcher,
// so a test hands the client each change in order, once it is watching.
func (h *harness) watchNodes() *watch.FakeWatcher {
	w := watch.NewFake()
	h.kube.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, w, nil
	})
	return w
}

// node returns a Node with the given resourceVersion (a watch needs one),
// maintenance annotation (none when empty) and status (none when nil).
func node(name, rv, requested string, st *selfdrain.Status) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Annotations: map[string]string{}}}
	if requested != "" {
		n.Annotations[selfdrain.MaintenanceAnnotation] = requested
	}
	if st != nil {
		n.Annotations[selfdrain.StatusAnnotation] = st.Encode()
	}
	return n
}

// nodeMaintenance returns a NodeMaintenance object of the medik8s group.
func nodeMaintenance(name, nodeName string, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": medik8s + "/" + maintenance.NodeMaintenanceVersion,
		"kind":       maintenance.NodeMaintenanceKind,
		"metadata":   map[string]any{"name": name, "creationTimestamp": t0.Format(time.RFC3339)},
		"spec":       map[string]any{"nodeName": nodeName, "reason": "test"},
	}}
	if status != nil {
		u.Object["status"] = status
	}
	return u
}

func ptrTime(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }
