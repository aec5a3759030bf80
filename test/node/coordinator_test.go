package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// electionLease is the coordinator's leader election Lease (its
// --leader-election-name default).
const electionLease = "node-agent-coordinator"

// startCoordinator runs node-agent-coordinator (bin/, beside node-agent, as
// `make build` puts it) on the host until the test ends, as one more
// replica beside the pods of deploy/coordinator.yaml.
//
// The pods of the coordinator's Deployment run on the real node (the kwok
// node's are not real processes), which the tests drain and reboot: each
// drain evicts the coordinator there, and its replacement goes to the kwok
// node. A slot would then be granted but never given back. The replica on
// the host stays up through the drain and the reboot. It runs as a host
// process with the test environment's admin kubeconfig, not the
// coordinator's ServiceAccount token, which is acceptable here: what that
// ServiceAccount may and may not do is tested on the real control plane in
// test/integration, and the pod on the real node runs with it
// (testCoordinatorPod). It reads the agents' ConfigMap as deploy/ installed
// it, as the Deployment mounts it, and takes the Deployment's other
// arguments (components/reboot's --reboot-enabled=true: without it a
// leading host replica would refuse the reboot's slot).
func (b *bed) startCoordinator(t *testing.T) *testenv.Coordinator {
	t.Helper()
	bin := filepath.Join(b.bin, testenv.CoordinatorName)
	if _, err := os.Stat(bin); err != nil {
		requireOrSkip(t, fmt.Errorf("bin/%s: %w; run make build", testenv.CoordinatorName, err))
	}
	cm, err := b.c.CoreV1().ConfigMaps(agentNS).Get(t.Context(), "node-agent-config", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agents' ConfigMap: %v", err)
	}
	dep, err := b.c.AppsV1().Deployments(agentNS).Get(t.Context(), coordinatorDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the coordinator's Deployment: %v", err)
	}
	var args []string
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if !strings.HasPrefix(a, "--config") {
			args = append(args, a)
		}
	}
	c := testenv.StartCoordinator(t, testenv.CoordinatorOptions{Binary: bin, Kubeconfig: b.env.KubeconfigPath(),
		Config: []byte(cm.Data["config.yaml"]), Identity: "host", Args: args})
	// In the election, not ready: the Deployment's pod may lead.
	c.WaitInElection(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- last lines of the host's coordinator log (%s) ---\n%s", c.LogPath, c.Tail(60))
		}
	})
	// Leading, or following the pod that leads: either way in the
	// election, and the leader once the pod is evicted.
	waitFor(t, time.Minute, "a coordinator leading", func() (bool, string) {
		if err, exited := c.Exited(); exited {
			t.Fatalf("node-agent-coordinator exited: %v\n%s", err, c.Tail(20))
		}
		l, err := b.c.CoordinationV1().Leases(agentNS).Get(t.Context(), electionLease, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		return holder != "", "election Lease held by " + holder
	})
	leading, _ := c.Leading()
	t.Logf("node-agent-coordinator on the host is in the election (leading: %v; log %s)", leading, c.LogPath)
	return c
}

// slotView is a node's drain slot as the objects show it: the agent's
// request on its Node, the coordinator's grant beside it, and the slot
// Lease the coordinator holds for the node.
type slotView struct {
	request *slots.Request
	grant   *slots.Grant
	// lease is the slot Lease, nil when there is none.
	lease *coordinationv1.Lease
}

// held reports whether the objects agree that the node holds a slot: the
// grant answers the request with Granted, and the Lease names the node.
func (v slotView) held(node string) bool {
	return v.request != nil && v.grant.Answers(v.request) && v.grant.State == slots.Granted &&
		v.grant.Slot == slots.LeaseName(node) && v.lease != nil && ptr.Deref(v.lease.Spec.HolderIdentity, "") == node
}

func (v slotView) String() string {
	holder := "no Lease"
	if v.lease != nil {
		holder = "Lease held by " + ptr.Deref(v.lease.Spec.HolderIdentity, "")
	}
	return fmt.Sprintf("request %s; grant %s; %s", orNone(v.request.Encode()), orNone(grantString(v.grant)), holder)
}

func grantString(g *slots.Grant) string {
	if g == nil {
		return ""
	}
	return g.Encode()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (b *bed) slotView(ctx context.Context, node string) (slotView, error) {
	var v slotView
	n, err := b.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return v, err
	}
	if v.request, err = slots.ParseRequest(n); err != nil {
		return v, err
	}
	if v.grant, err = slots.ParseGrant(n); err != nil {
		return v, err
	}
	l, err := b.c.CoordinationV1().Leases(agentNS).Get(ctx, slots.LeaseName(node), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return v, err
	default:
		v.lease = l
	}
	return v, nil
}

// otherNodeHolds makes node (a kwok node, where no agent runs) ask for a
// drain slot and hold it as its agent would: the request on its Node, a new
// heartbeat every 10 s (well inside slots.heartbeatBound). It returns once
// the coordinator granted it, and a function that gives the slot back by
// withdrawing the request, as the agent's Release does.
func (b *bed) otherNodeHolds(t *testing.T, node string) (release func()) {
	t.Helper()
	ctx := t.Context()
	req := slots.Request{Purpose: slots.PurposeMaintenance, ID: "e2e-" + node, RequestedAt: time.Now().UTC().Truncate(time.Second)}
	write := func(r *slots.Request) error {
		var value any
		if r != nil {
			value = r.Encode()
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{slots.RequestAnnotation: value}}})
		if err != nil {
			return err
		}
		_, err = b.c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	if err := write(&req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, node+" granted a drain slot", func() (bool, string) {
		v, err := b.slotView(ctx, node)
		if err != nil {
			return false, err.Error()
		}
		return v.held(node), v.String()
	})
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Second):
			}
			req.Heartbeat++
			if err := write(&req); err != nil {
				t.Logf("renewing %s's request: %v", node, err)
			}
		}
	}()
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		close(stop)
		<-stopped
		if err := write(nil); err != nil {
			t.Errorf("withdrawing %s's request: %v", node, err)
		}
	}
	t.Cleanup(release)
	return release
}
