package selfdrain

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/nodelifecycle"
	nlspec "github.com/node-agent/node-agent/pkg/nodelifecycle/spec"
)

func (h *harness) lifecycleConditions() []string {
	var out []string
	for _, c := range h.node().Status.Conditions {
		if slices.Contains(nodelifecycle.Types, c.Type) {
			out = append(out, string(c.Type)+"="+c.Reason)
		}
	}
	slices.Sort(out)
	return out
}

// A shutdown drain shows as GracefulNodeShutdownInProgress beside the
// maintenance conditions, and a cancelled shutdown removes them all; the
// admin's condition of the family stays.
func TestLifecycleConditionsFollowTheShutdownDrain(t *testing.T) {
	h := newHarness(t, testPod("a"))
	h.engine.Config.NodeLifecycleConditions = string(nlspec.On)
	h.onEvict(func(eviction) error { return nil })
	h.patchStatus(`{"status":{"conditions":[{"type":"Drained","status":"True","reason":"AdminSaysSo"}]}}`)
	h.run(func() {
		if _, err := h.shutdownDrain(h.clock.Now().Add(time.Minute)); err != nil {
			t.Error(err)
		}
	}, nil)
	want := []string{"Drained=AdminSaysSo", "GracefulNodeShutdownInProgress=NodeAgentPrepareForShutdown", "MaintenanceInProgress=NodeAgentDrained"}
	if got := h.lifecycleConditions(); !slices.Equal(got, want) {
		t.Errorf("after the shutdown drain: %v, want %v", got, want)
	}
	if err := h.engine.End(context.Background(), "shutdown cancelled"); err != nil {
		t.Fatal(err)
	}
	if got := h.lifecycleConditions(); !slices.Equal(got, []string{"Drained=AdminSaysSo"}) {
		t.Errorf("after the cancelled shutdown: %v, want only the admin's", got)
	}
}

// Off, and auto on a 1.36 apiserver, write none of them.
func TestLifecycleConditionsNotWritten(t *testing.T) {
	for name, setup := range map[string]func(h *harness){
		"off": func(h *harness) { h.engine.Config.NodeLifecycleConditions = string(nlspec.Off) },
		"auto on 1.36": func(h *harness) {
			h.engine.Config.NodeLifecycleConditions = string(nlspec.Auto)
			h.client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: "36", GitVersion: "v1.36.3"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, testPod("a"))
			setup(h)
			h.onEvict(func(eviction) error { return nil })
			h.run(func() {
				if _, err := h.shutdownDrain(h.clock.Now().Add(time.Minute)); err != nil {
					t.Error(err)
				}
			}, nil)
			if h.condition(ShuttingDownCondition) == nil {
				t.Fatal("no NodeShuttingDown condition: the drain did not run")
			}
			if got := h.lifecycleConditions(); len(got) != 0 {
				t.Errorf("lifecycle conditions %v, want none", got)
			}
		})
	}
}

// lifecycleState reads the stage from node-agent's own conditions.
func TestLifecycleState(t *testing.T) {
	for reason, want := range map[string]nodelifecycle.Stage{
		ReasonWaiting: nodelifecycle.Planned, "BlockedByGates": nodelifecycle.Planned,
		ReasonDraining: nodelifecycle.Draining, ReasonDrained: nodelifecycle.DrainDone, ReasonDrainFailed: nodelifecycle.DrainFailed,
	} {
		n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: ConditionType, Status: corev1.ConditionTrue, Reason: reason}}}}
		if got := lifecycleState(n); got.Stage != want || got.ShuttingDown {
			t.Errorf("%s: %+v, want stage %d", reason, got, want)
		}
	}
	if got := lifecycleState(&corev1.Node{}); got.Stage != nodelifecycle.None {
		t.Errorf("no condition: %+v", got)
	}
}

// patchStatus applies a strategic merge patch to the Node's status, as an
// admin's tool would.
func (h *harness) patchStatus(patch string) {
	h.t.Helper()
	if _, err := kubetest.Wrap(h.client).CoreV1().Nodes().PatchStatus(context.Background(), testNode, []byte(patch)); err != nil {
		h.t.Fatal(err)
	}
}
