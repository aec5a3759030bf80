package reboot

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/podaccess"
)

func TestPodBlockers(t *testing.T) {
	pods := []*corev1.Pod{
		pod("db", "pg-1", map[string]string{"reboot-blocker": "yes"}, corev1.PodRunning),
		pod("db", "pg-0", map[string]string{"reboot-blocker": "yes"}, corev1.PodPending),
		pod("batch", "done", map[string]string{"reboot-blocker": "yes"}, corev1.PodSucceeded),
		pod("batch", "crashed", map[string]string{"reboot-blocker": "yes"}, corev1.PodFailed),
		pod("web", "nginx", map[string]string{"app": "web"}, corev1.PodRunning),
	}
	store := listerFunc(func(context.Context, labels.Selector) ([]*corev1.Pod, error) { return pods, nil })
	sel, err := labels.Parse("reboot-blocker=yes")
	if err != nil {
		t.Fatal(err)
	}
	got := PodBlockers{Lister: store, Selector: sel}.Blockers(context.Background())
	want := []Blocker{{Kind: BlockerPod, Name: "db/pg-0"}, {Kind: BlockerPod, Name: "db/pg-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("blockers = %+v, want %+v", got, want)
	}

	everything, _ := labels.Parse("")
	if got := (PodBlockers{Lister: store, Selector: everything}).Blockers(context.Background()); got != nil {
		t.Errorf("empty selector: blockers = %+v, want none (no pod blocks)", got)
	}

	failing := listerFunc(func(context.Context, labels.Selector) ([]*corev1.Pod, error) {
		return nil, errors.New("apiserver timeout")
	})
	got = PodBlockers{Lister: failing, Selector: sel}.Blockers(context.Background())
	if len(got) != 1 || got[0].Kind != BlockerPod || !strings.Contains(got[0].Name, "apiserver timeout") {
		t.Errorf("failed list: blockers = %+v, want one that says why (fail closed)", got)
	}
}

// NodePods asks the apiserver for this node's pods only, in the one form the
// Node authorizer allows the node's identity, with the label selector, and
// through the client pkg/podaccess chose: as the node where the cluster
// allows the impersonation, with the ServiceAccount's own grant where it
// refuses it (where listing as the node blocked every reboot), and not at
// all without either, which blocks the reboot and says why.
func TestNodePodsUsesThePodAccessChosen(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("impersonation refused"))
	tests := []struct {
		name           string
		nodeRefuses    bool
		ownRefuses     bool
		wantVia        string // "node", "own", or "" for none
		wantBlockerHas string
	}{
		{name: "as the node", wantVia: "node"},
		{name: "cluster-wide", nodeRefuses: true, wantVia: "own"},
		{name: "no access", nodeRefuses: true, ownRefuses: true, wantBlockerHas: "no access to this node's pods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []string
			var selectors []metav1.ListOptions
			client := func(who string, refuses bool) *fake.Clientset {
				cs := fake.NewClientset(
					pod("db", "pg-0", map[string]string{"reboot-blocker": "yes"}, corev1.PodRunning),
					pod("web", "nginx", map[string]string{"app": "web"}, corev1.PodRunning),
				)
				cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if refuses {
						return true, nil, forbidden
					}
					l := a.(k8stesting.ListActionImpl)
					asked = append(asked, who)
					selectors = append(selectors, metav1.ListOptions{FieldSelector: l.GetListRestrictions().Fields.String(), LabelSelector: l.GetListRestrictions().Labels.String()})
					return false, nil, nil
				})
				return cs
			}
			access := &podaccess.Reporter{Prober: podaccess.Prober{
				Node: kubetest.Wrap(client("node", tt.nodeRefuses)), Own: kubetest.Wrap(client("own", tt.ownRefuses)), NodeName: "node-1",
			}}
			sel, _ := labels.Parse("reboot-blocker=yes")
			got := PodBlockers{Lister: NodePods{Access: access.Check, Node: "node-1"}, Selector: sel}.Blockers(context.Background())
			if tt.wantVia == "" {
				if len(got) != 1 || !strings.Contains(got[0].Name, tt.wantBlockerHas) || !strings.Contains(got[0].Name, "cluster-wide-eviction") {
					t.Fatalf("blockers %v: want one that says there is no access and what to do", got)
				}
				return
			}
			if want := []Blocker{{Kind: BlockerPod, Name: "db/pg-0"}}; !reflect.DeepEqual(got, want) {
				t.Fatalf("blockers %v, want %v", got, want)
			}
			// The probe lists one pod, then the blockers' list; both
			// through the client chosen.
			if len(asked) != 2 {
				t.Fatalf("lists %v, want the probe's and the blockers'", asked)
			}
			for i, who := range asked {
				if who != tt.wantVia {
					t.Errorf("list %d went through the %s client, want %s", i, who, tt.wantVia)
				}
			}
			last := selectors[len(selectors)-1]
			if last.FieldSelector != "spec.nodeName=node-1" || last.LabelSelector != "reboot-blocker=yes" {
				t.Errorf("asked with fields %q, labels %q; want spec.nodeName=node-1 and reboot-blocker=yes", last.FieldSelector, last.LabelSelector)
			}
		})
	}
}

// An apiserver that cannot be asked how the pods are reached blocks the
// reboot: the check fails closed.
func TestNodePodsFailsClosedWhenAccessIsUnknown(t *testing.T) {
	unknown := func(context.Context) (podaccess.Access, error) {
		return podaccess.Access{}, errors.New("connection refused")
	}
	sel, _ := labels.Parse("reboot-blocker=yes")
	got := PodBlockers{Lister: NodePods{Access: unknown, Node: "node-1"}, Selector: sel}.Blockers(context.Background())
	if len(got) != 1 || !strings.Contains(got[0].Name, "connection refused") {
		t.Fatalf("blockers %v", got)
	}
}

type listerFunc func(ctx context.Context, sel labels.Selector) ([]*corev1.Pod, error)

func (f listerFunc) ListPods(ctx context.Context, sel labels.Selector) ([]*corev1.Pod, error) {
	return f(ctx, sel)
}

func pod(ns, name string, lbls map[string]string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}, Status: corev1.PodStatus{Phase: phase}}
}
