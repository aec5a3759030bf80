package confinement

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

func TestProbe(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	policy := apierrors.NewForbidden(nodes, "node-1", errors.New("ValidatingAdmissionPolicy 'node-agent-own-node' with binding 'node-agent-own-node' denied request: node-agent may change only labels under its own prefixes"))
	rbac := apierrors.NewForbidden(nodes, "node-1", errors.New(`User "system:serviceaccount:node-agent:node-agent" cannot patch resource "nodes"`))
	tests := []struct {
		name    string
		answer  error // nil: the patch succeeds
		want    Result
		wantSet string
	}{
		{"refused by the policy", policy, Enforced, "1"},
		{"stored", nil, NotEnforced, "0"},
		{"refused by RBAC, which says nothing of the policy", rbac, Unknown, "-1"},
		{"apiserver unavailable", apierrors.NewServiceUnavailable("down"), Unknown, "-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
			var dryRun []string
			client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				dryRun = a.(k8stesting.PatchActionImpl).PatchOptions.DryRun
				if !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), ProbeLabel) {
					t.Errorf("patch %s does not add %s", a.(k8stesting.PatchAction).GetPatch(), ProbeLabel)
				}
				return tt.answer != nil, nil, tt.answer
			})
			rec := record.NewFakeRecorder(4)
			gauge := NewGauge(prometheus.NewRegistry())
			c := &Checker{Client: kubetest.Wrap(client), NodeName: "node-1", Logger: slog.New(slog.DiscardHandler),
				Recorder: rec, Gauge: gauge, Grace: 50 * time.Millisecond, Interval: 10 * time.Millisecond}
			if got := c.Check(t.Context()); got != tt.want {
				t.Errorf("Check = %s, want %s", got, tt.want)
			}
			if len(dryRun) != 1 || dryRun[0] != metav1.DryRunAll {
				t.Errorf("the probe's dryRun = %v, want [All]: it must never store the label", dryRun)
			}
			if got := testutil.ToFloat64(gauge); got != map[string]float64{"1": 1, "0": 0, "-1": -1}[tt.wantSet] {
				t.Errorf("gauge = %v, want %s", got, tt.wantSet)
			}
			select {
			case ev := <-rec.Events:
				if tt.want != NotEnforced || !strings.HasPrefix(ev, "Warning AdmissionPolicyNotEnforced ") {
					t.Errorf("event %q", ev)
				}
			default:
				if tt.want == NotEnforced {
					t.Error("no Warning Event AdmissionPolicyNotEnforced")
				}
			}
		})
	}
}

// TestCheckWaitsForAFreshPolicy: a policy applied with the DaemonSet takes
// effect a moment after the agent starts; writes allowed before then are
// asked again, and no warning is given once one is refused.
func TestCheckWaitsForAFreshPolicy(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	probes := 0
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		probes++
		if probes < 3 {
			return false, nil, nil // allowed: the policy is not in force yet
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "node-1",
			errors.New("ValidatingAdmissionPolicy 'node-agent-own-node' with binding 'node-agent-own-node' denied request"))
	})
	rec := record.NewFakeRecorder(4)
	gauge := NewGauge(prometheus.NewRegistry())
	c := &Checker{Client: kubetest.Wrap(client), NodeName: "node-1", Logger: slog.New(slog.DiscardHandler),
		Recorder: rec, Gauge: gauge, Grace: time.Minute, Interval: 10 * time.Millisecond}
	if got := c.Check(t.Context()); got != Enforced || probes != 3 {
		t.Errorf("Check = %s after %d probes, want enforced at the third", got, probes)
	}
	if len(rec.Events) != 0 {
		t.Errorf("an Event while the policy took effect: %q", <-rec.Events)
	}
	if testutil.ToFloat64(gauge) != 1 {
		t.Errorf("gauge %v, want 1", testutil.ToFloat64(gauge))
	}
}
