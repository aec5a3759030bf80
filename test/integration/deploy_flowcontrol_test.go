package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
	t.Logf("the agent's GET of its Node ran in FlowSchema %s, priority level %s (the component's)", fs.Name, pl.Name)
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
