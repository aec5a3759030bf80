package kube_test

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// The cached discovery asks once per group version per TTL, keeps "not
// served" as well as "served", and keeps no other error.
func TestWithCachedDiscovery(t *testing.T) {
	cs := k8sfake.NewClientset()
	fd := cs.Discovery().(*fakediscovery.FakeDiscovery)
	gvr := schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	c := kube.WithCachedDiscovery(kubetest.Wrap(cs), time.Minute, func() time.Time { return now })
	asks := func() int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "resource" {
				n++
			}
		}
		return n
	}
	serves := func(want bool) {
		t.Helper()
		got, err := kube.Serves(c.Discovery(), gvr)
		if err != nil || got != want {
			t.Fatalf("Serves = %v, %v; want %v", got, err, want)
		}
	}
	serves(false)
	serves(false)
	if n := asks(); n != 1 {
		t.Errorf("%d requests for two questions within the TTL, want 1", n)
	}
	fd.Resources = []*metav1.APIResourceList{{GroupVersion: "kubevirt.io/v1", APIResources: []metav1.APIResource{{Name: gvr.Resource}}}}
	serves(false) // still the kept answer
	now = now.Add(time.Minute)
	serves(true)
	if n := asks(); n != 2 {
		t.Errorf("%d requests after the TTL, want 2", n)
	}
	now = now.Add(time.Minute)
	fd.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver unreachable")
	})
	if _, err := kube.Serves(c.Discovery(), gvr); err == nil {
		t.Fatal("an error answer was not passed on")
	}
	if _, err := kube.Serves(c.Discovery(), gvr); err == nil {
		t.Fatal("an error answer was not asked again")
	}
	if n := asks(); n != 4 {
		t.Errorf("%d requests: an error must not be kept", n)
	}
}
