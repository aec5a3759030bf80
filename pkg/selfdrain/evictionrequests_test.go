package selfdrain

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/node-agent/node-agent/pkg/evictionrequest"
)

// fakeRequests is the EvictionRequest API of a cluster where every pod
// names a responder that never acts.
type fakeRequests struct {
	mu        sync.Mutex
	created   map[string]*evictionrequest.EvictionRequest
	withdrawn []string
	creates   int
	gets      int
}

func (f *fakeRequests) Create(_ context.Context, er *evictionrequest.EvictionRequest) (*evictionrequest.EvictionRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	if old := f.created[er.Namespace+"/"+er.Name]; old != nil {
		return old, nil
	}
	f.created[er.Namespace+"/"+er.Name] = er
	return er, nil
}

func (f *fakeRequests) Withdraw(_ context.Context, ns, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.withdrawn = append(f.withdrawn, ns+"/"+name)
	return nil
}

func (f *fakeRequests) Get(_ context.Context, ns, name string) (*evictionrequest.EvictionRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	er := f.created[ns+"/"+name]
	if er == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "lifecycle.k8s.io", Resource: "evictionrequests"}, name)
	}
	return er, nil
}

func (f *fakeRequests) Resubmit(context.Context, string, string) error { return nil }

func (f *fakeRequests) PodJSON(context.Context, string, string) ([]byte, error) {
	return []byte(`{"spec":{"evictionResponders":[{"name":"example.com/mover","priority":10000}]}}`), nil
}

func (f *fakeRequests) counts() (created, withdrawn int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.created), len(f.withdrawn)
}

// A drain stopped by the agent's exit keeps its EvictionRequests (the next
// agent resumes it and finds them in force); the end of the maintenance
// withdraws them.
func TestEvictionRequestsOutliveAnAgentRestartNotTheMaintenance(t *testing.T) {
	h := newHarness(t, testPod("a"), testPod("b"))
	h.client.Resources = []*metav1.APIResourceList{{GroupVersion: "lifecycle.k8s.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "evictionrequests", Namespaced: true}}}}
	api := &fakeRequests{created: map[string]*evictionrequest.EvictionRequest{}}
	h.engine.EvictionRequests = api
	h.engine.Config.EvictionAPI = "evictionRequest"
	st, err := h.engine.Begin(context.Background(), Request{Trigger: TriggerAnnotation, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h.engine.Drain(ctx, st, Request{Trigger: TriggerAnnotation, Reason: "test"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for created, _ := api.counts(); created < 2; created, _ = api.counts() {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests made, want 2", created)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel() // the agent exits mid-drain
	<-done
	if _, withdrawn := api.counts(); withdrawn != 0 {
		t.Fatalf("%d requests withdrawn when the agent stopped, want none: the next agent resumes the drain", withdrawn)
	}
	if err := h.engine.End(context.Background(), "maintenance ended"); err != nil {
		t.Fatal(err)
	}
	if _, withdrawn := api.counts(); withdrawn != 2 {
		t.Errorf("%d requests withdrawn when the maintenance ended, want both", withdrawn)
	}
}
