package agent

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

type named string

func (n named) Name() string                        { return string(n) }
func (n named) Run(context.Context, NodeView) error { return nil }

// Build runs the factories in the order they were added, single and
// several, with the agent's shared parts, and only once.
func TestBuild(t *testing.T) {
	var got Deps
	a, err := New("node-1", WithKubernetesClient(kubetest.Wrap(fake.NewClientset())),
		WithComponent(func(d Deps) (Component, error) { got = d; return named("a"), nil }),
		WithComponents(func(Deps) ([]Component, error) { return []Component{named("b"), named("c")}, nil }),
		WithComponent(func(Deps) (Component, error) { return named("d"), nil }))
	if err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(1)
	cs, err := a.Build(rec)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cs {
		names = append(names, c.Name())
	}
	if !reflect.DeepEqual(names, []string{"a", "b", "c", "d"}) {
		t.Errorf("components %v", names)
	}
	if got.NodeName != "node-1" || got.Recorder != rec || got.Registry != a.registry || got.Health != a.health {
		t.Errorf("deps %+v", got)
	}
	if _, err := a.Build(rec); err == nil {
		t.Error("a second Build: no error; its factories would register every metric twice")
	}
}

func TestBuildStopsAtAFailingFactory(t *testing.T) {
	broken := errors.New("broken")
	a, err := New("node-1", WithKubernetesClient(kubetest.Wrap(fake.NewClientset())),
		WithComponent(func(Deps) (Component, error) { return nil, broken }),
		WithComponent(func(Deps) (Component, error) { t.Error("built after a failure"); return named("b"), nil }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Build(record.NewFakeRecorder(1)); !errors.Is(err, broken) {
		t.Errorf("Build: %v, want %v", err, broken)
	}
}
