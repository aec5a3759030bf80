package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// The typed clients of New make the requests client-go's generated ones
// make, and answer with the object decoded.
func TestClientRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodDelete:
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
		case r.URL.Path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases" && r.Method == http.MethodPost:
			_, _ = w.Write([]byte(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l"}}`))
		case r.URL.Query().Get("watch") == "true":
			_, _ = w.Write([]byte(`{"type":"ADDED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}}` + "\n"))
		default:
			_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`))
		}
	}))
	defer srv.Close()
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := c.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{ResourceVersion: "0"})
	if err != nil || n.Name != "n" {
		t.Fatalf("Get: %v, %v", n, err)
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, "n", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{FieldManager: "m"}, "status"); err != nil {
		t.Fatal(err)
	}
	w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=n"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-w.ResultChan(); ev.Object == nil {
		t.Error("watch: no object")
	}
	w.Stop()
	if err := c.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := c.CoordinationV1().Leases("ns").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}, metav1.CreateOptions{})
	if err != nil || l.Name != "l" {
		t.Fatalf("Create: %v, %v", l, err)
	}
	want := []string{
		"GET /api/v1/nodes/n?resourceVersion=0",
		"PATCH /api/v1/nodes/n/status?fieldManager=m",
		"GET /api/v1/nodes?fieldSelector=metadata.name%3Dn&watch=true",
		"DELETE /api/v1/namespaces/ns/pods/p",
		"POST /apis/coordination.k8s.io/v1/namespaces/ns/leases",
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("requests %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// pkg/podaccess compares the clients it holds; a client that is not
// comparable makes that comparison panic.
func TestClientsCompare(t *testing.T) {
	c, err := New(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	nodes, other := c.CoreV1().Nodes(), c.CoreV1().Nodes()
	held := nodes
	if held != nodes || other == nodes {
		t.Error("a Nodes client is equal only to itself")
	}
	_ = any(c.CoreV1().Pods("")) == any(c.CoreV1().Pods(""))
	_ = any(c.CoordinationV1().Leases("")) == any(c.PolicyV1().PodDisruptionBudgets(""))
	_ = any(c.AppsV1().DaemonSets("")) == any(c.CoreV1().Namespaces())
}
