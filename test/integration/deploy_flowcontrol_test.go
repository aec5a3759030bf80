package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/test/testenv"
)

// testFlowControl applies deploy/ with components/flowcontrol and checks on
// the real kube-apiserver that the agent's requests, made with a token
// bound to its pod, are classified into the component's priority level:
// kube-apiserver names the FlowSchema and priority level of every request
// in the response headers X-Kubernetes-PF-FlowSchema-UID and
// X-Kubernetes-PF-PriorityLevel-UID.
func (b *deployBed) testFlowControl(t *testing.T) {
	overlay := t.TempDir()
	base, err := filepath.Rel(overlay, testenv.DeployDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(fmt.Sprintf(
		"resources: [%q]\ncomponents: [%q]\n", base, filepath.Join(base, "components", "flowcontrol"))), 0o600); err != nil {
		t.Fatal(err)
	}
	rendered, err := b.run(t, nil, "kustomize", "--load-restrictor=LoadRestrictionsNone", overlay)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.run(t, rendered, "apply", "--server-side", "--field-manager=node-agent-install", "-f", "-"); err != nil {
		t.Fatalf("deploy/ with components/flowcontrol: %v", err)
	}
	ctx := t.Context()
	fs, err := b.c.FlowcontrolV1().FlowSchemas().Get(ctx, "node-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := b.c.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "node-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's own requests: as its ServiceAccount, and as its node.
	cfg := b.env.TokenConfig(b.boundToken(t, b.agentPod(t, "node-1")))
	seen := &classified{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return seen.wrap(rt) })
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver applies a new FlowSchema once its APF controller has
	// read it; until then a request may still go to service-accounts.
	testenv.WaitFor(t, time.Minute, "the agent's requests classified as node-agent", func() (bool, error) {
		if _, err := c.CoreV1().Nodes().Get(context.WithoutCancel(ctx), "node-1", metav1.GetOptions{}); err != nil {
			return false, err
		}
		gotFS, gotPL := seen.get()
		return gotFS == string(fs.UID) && gotPL == string(pl.UID), nil
	})
	t.Logf("a request as the agent's ServiceAccount (its writes to its Node) ran in FlowSchema %s, priority level %s (the component's)", fs.Name, pl.Name)

	// Its reads of its own Node go as the node (podaccess.OwnNodeReads):
	// into one of the built-in schemas for nodes (system-node-high for
	// Nodes), whose flows are by user, so each node's watch has a flow of
	// its own that no other agent's burst of ServiceAccount requests queues.
	asNode := podaccess.NodeConfig(b.env.TokenConfig(b.boundToken(t, b.agentPod(t, "node-1"))), "node-1")
	seenAsNode := &classified{}
	asNode.Wrap(func(rt http.RoundTripper) http.RoundTripper { return seenAsNode.wrap(rt) })
	nc, err := kubernetes.NewForConfig(asNode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	gotFS, _ := seenAsNode.get()
	schemas, err := b.c.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(schemas.Items, func(s flowcontrolv1.FlowSchema) bool { return string(s.UID) == gotFS })
	switch {
	case i < 0:
		t.Errorf("the read of node-1 as the node ran in no FlowSchema the apiserver lists (UID %q)", gotFS)
	case schemas.Items[i].Name == fs.Name:
		t.Errorf("the read of node-1 as the node ran in %s, the agents' shared schema", fs.Name)
	case schemas.Items[i].Spec.DistinguisherMethod == nil || schemas.Items[i].Spec.DistinguisherMethod.Type != flowcontrolv1.FlowDistinguisherMethodByUserType:
		t.Errorf("the read of node-1 as the node ran in %s, whose flows are not by user", schemas.Items[i].Name)
	default:
		t.Logf("its read of node-1 as system:node:node-1 ran in FlowSchema %s, priority level %s, flows by user: one per node",
			schemas.Items[i].Name, schemas.Items[i].Spec.PriorityLevelConfiguration.Name)
	}
	// Remove it again: the other subtests run on deploy/ alone.
	if _, err := b.run(t, nil, "delete", "flowschema/node-agent", "prioritylevelconfiguration/node-agent"); err != nil {
		t.Fatal(err)
	}
}

// classified records the APF classification of the last response.
type classified struct {
	mu                        sync.Mutex
	flowSchema, priorityLevel string
}

func (c *classified) get() (flowSchema, priorityLevel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flowSchema, c.priorityLevel
}

func (c *classified) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil {
			c.mu.Lock()
			c.flowSchema = resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")
			c.priorityLevel = resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
			c.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
