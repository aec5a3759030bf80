package podaccess

import (
	"log/slog"
	"testing"

	"k8s.io/client-go/rest"
)

// The node's identity impersonates the node's user and nothing else; the
// ServiceAccount's connection is left as it was given.
func TestNewIdentities(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "sa-token"}
	ids, err := NewIdentities(rc, "node-1", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if ids.ServiceAccount == nil || ids.Node == nil || ids.OwnNode == nil {
		t.Fatalf("identities %+v, want all three clients", ids)
	}
	if got := ids.NodeREST.Impersonate; got.UserName != "system:node:node-1" || len(got.Groups) != 0 {
		t.Errorf("node connection impersonates %+v, want the user system:node:node-1 alone", got)
	}
	if rc.Impersonate.UserName != "" {
		t.Errorf("the ServiceAccount's connection was changed: %+v", rc.Impersonate)
	}
}
