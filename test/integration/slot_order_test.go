package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestBackdatedRequestNeverJumpsTheQueue is issue 40's acceptance for the
// slot queue on the real control plane, with a limit of 1 and reboots off
// (the defaults): node-b asks while node-h holds the slot, then node-a asks
// with a request backdated to 1970 (and a name that sorts first), as a
// stolen node-a token may write on its own Node (the Node policy lets each
// agent write exactly that annotation, testSlotPrivilege; the requests here
// are written as admin, with the same content). The leading coordinator is
// killed, another takes over, node-h gives its slot back: node-b gets it,
// not node-a. A reboot slot request is refused while reboots are off.
func TestBackdatedRequestNeverJumpsTheQueue(t *testing.T) {
	env := fullEnv(t)
	ctx := t.Context()
	c := env.Client()
	if err := env.AddNodes(ctx, []string{"node-a", "node-b", "node-h", "node-r"}); err != nil {
		t.Fatal(err)
	}
	first := startCoordinator(t, env)
	cfg, err := testenv.CoordinatorConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if parsed, _, err := config.Parse(cfg, config.Default()); err != nil || parsed.Slots.Limit != 1 || parsed.Reboot.Enabled {
		t.Fatalf("the coordinator's configuration\n%s\nis not a limit of 1 with reboots off (%v)", cfg, err)
	}
	second := testenv.StartCoordinator(t, testenv.CoordinatorOptions{
		Binary: testenv.CoordinatorBinary(agentBinary), Kubeconfig: env.KubeconfigPath(), Config: cfg,
	})
	second.WaitInElection(t)
	if leading, err := second.Leading(); err != nil || leading {
		t.Fatalf("%s leads (%v) while %s does", second.Identity, err, first.Identity)
	}

	ask := func(node string, purpose slots.Purpose, requestedAt time.Time) *slots.Request {
		t.Helper()
		req := &slots.Request{Purpose: purpose, ID: "order-" + node, RequestedAt: requestedAt}
		writeRequest(t, c, node, req)
		return req
	}
	// answer is node's answer; none reads as the zero Grant.
	answer := func(node string) *slots.Grant {
		g, _ := slots.ParseGrant(getNode(t, c, node))
		if g == nil {
			return &slots.Grant{}
		}
		return g
	}
	waitState := func(node string, req *slots.Request, state slots.GrantState) *slots.Grant {
		t.Helper()
		var g *slots.Grant
		testenv.WaitFor(t, time.Minute, node+"'s request "+string(state), func() (bool, error) {
			g = answer(node)
			return g.Answers(req) && g.State == state, nil
		})
		return g
	}

	held := ask("node-h", slots.PurposeMaintenance, time.Now().UTC())
	waitState("node-h", held, slots.Granted)
	reqB := ask("node-b", slots.PurposeMaintenance, time.Now().UTC())
	gB := waitState("node-b", reqB, slots.Queued)
	reqA := ask("node-a", slots.PurposeMaintenance, time.Unix(0, 0).UTC())
	gA := waitState("node-a", reqA, slots.Queued)
	t.Logf("node-b queued at %s; node-a, which claims %s, queued at %s", gB.Time, reqA.RequestedAt, gA.Time)
	if !gB.Time.Before(gA.Time) {
		t.Errorf("node-b asked first but was stamped %s, node-a %s", gB.Time, gA.Time)
	}

	// The reboot request is refused, not queued, and holds no slot.
	reqR := ask("node-r", slots.PurposeReboot, time.Unix(0, 0).UTC())
	gR := waitState("node-r", reqR, slots.Revoked)
	if !strings.Contains(gR.Reason, "reboot.enabled is false") || !gR.Refused {
		t.Errorf("node-r's reboot request answered %+v, want refused with the reason naming reboot.enabled", gR)
	}

	first.Kill(t)
	second.WaitLeading(t, coordinatorLeadTimeout)
	t.Logf("%s killed; %s leads", first.Identity, second.Identity)
	useCoordinator(t, env, second)

	// node-h is done: it removes its request, and the slot goes on.
	removeRequest(t, c, "node-h")
	testenv.WaitFor(t, time.Minute, "the slot granted again", func() (bool, error) {
		return answer("node-a").State == slots.Granted || answer("node-b").State == slots.Granted, nil
	})
	if g := answer("node-a"); g.State == slots.Granted {
		t.Fatalf("the new leader granted node-a, whose request claims 1970, before node-b, which asked first (node-b: %+v)", answer("node-b"))
	}
	if g := answer("node-r"); g.State != slots.Revoked {
		t.Errorf("node-r's refused reboot request is %s after the change of leader, want Revoked", g.State)
	}
	if _, err := c.CoordinationV1().Leases(agentNamespace).Get(ctx, slots.LeaseName("node-r"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node-r's slot Lease: %v, want none", err)
	}
	// And node-a's turn comes after node-b's.
	removeRequest(t, c, "node-b")
	waitState("node-a", reqA, slots.Granted)
}

// writeRequest writes req as node's drain slot request, as its agent would.
func writeRequest(t *testing.T, c kubernetes.Interface, node string, req *slots.Request) {
	t.Helper()
	patch, err := json.Marshal(obj{"metadata": obj{"annotations": obj{slots.RequestAnnotation: req.Encode()}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// removeRequest removes node's request, as its agent does to give its slot
// back.
func removeRequest(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	patch, err := json.Marshal(obj{"metadata": obj{"annotations": obj{slots.RequestAnnotation: nil}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
