package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// A start check's error ends Run with it, before any component runs: the
// agent exits and says why rather than waiting for a Node it may not read.
func TestRunEndsAtAFailingStartCheck(t *testing.T) {
	refused := errors.New("reading its own Node node-1 was refused")
	a, err := New("node-1", WithKubernetesClient(kubetest.Wrap(fake.NewClientset())),
		WithMetricsAddress("127.0.0.1:0"), WithHealthAddress("127.0.0.1:0"),
		WithStartCheck(func(context.Context) error { return refused }),
		WithComponent(func(Deps) (Component, error) { return runFails{t}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := a.Run(ctx); !errors.Is(err, refused) {
		t.Errorf("Run: %v, want %v", err, refused)
	}
}

type runFails struct{ t *testing.T }

func (runFails) Name() string { return "fails" }
func (r runFails) Run(context.Context, NodeView) error {
	r.t.Error("a component ran after the start check failed")
	return nil
}
