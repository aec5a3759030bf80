package maintenancecli

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/reboot"
)

const waitingMessage = "sentinel file /run/reboot-required exists; waiting for a drain slot (slots.limit)"

// rebootNode returns a Node as the coordinator leaves it: rec in its
// annotation (none when nil) and the condition (none when status is empty).
func rebootNode(name string, rec *reboot.Record, status corev1.ConditionStatus) *corev1.Node {
	n := node(name, "1", "", nil)
	if rec != nil {
		n.Annotations[reboot.RecordAnnotation] = rec.Encode()
	}
	if status != "" {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: reboot.ConditionType, Status: status, Reason: rec.Reason, Message: rec.Message,
		})
	}
	return n
}

// rebootNodes are one node for each kind of row.
func rebootNodes() []runtime.Object {
	waiting := rebootNode("node-1", &reboot.Record{State: reboot.Pending, Reason: string(reboot.WaitingForSlot),
		Message: waitingMessage, Since: ptrTime(t0.Add(-3 * time.Hour)), Phase: reboot.PhaseWaitingForSlot}, corev1.ConditionTrue)
	done := rebootNode("node-2", &reboot.Record{State: reboot.Done, Reason: string(reboot.Done),
		Message: "the host rebooted and needs no other reboot", LastReboot: ptrTime(t0.Add(-time.Hour))}, corev1.ConditionFalse)
	unknown := rebootNode("node-4", &reboot.Record{State: reboot.NotNeeded, Reason: reboot.ReasonUnknown,
		Message: "cannot tell whether the host needs a reboot: sentinel command /usr/bin/needs-restarting -r: unit failed",
		Since:   ptrTime(t0.Add(-50 * time.Second))}, corev1.ConditionUnknown)
	unknown.Annotations[reboot.RequestAnnotation] = "kernel 6.12"
	broken := node("node-5", "1", "", nil)
	broken.Annotations[reboot.RecordAnnotation] = `{"state":"Sleeping"}`
	// The record written, the condition not yet.
	recordOnly := rebootNode("node-6", &reboot.Record{State: reboot.Draining, Reason: string(reboot.Draining),
		Message: "draining", Since: ptrTime(t0.Add(-26 * time.Hour))}, "")
	return []runtime.Object{recordOnly, broken, unknown, node("node-3", "1", "", nil), done, waiting}
}

func TestRebootStatus(t *testing.T) {
	all := lines(
		"NODE    REQUIRED  REASON               SINCE  REQUESTED    MESSAGE",
		"node-1  yes       WaitingForDrainSlot  3h     -            sentinel file /run/reboot-required exists; waiting for a ...",
		"node-2  no        Done                 -      -            the host rebooted and needs no other reboot",
		"node-3  -         -                    -      -            -",
		"node-4  unknown   NeedUnknown          50s    kernel 6.12  cannot tell whether the host needs a reboot: sentinel com...",
		"node-5  -         -                    ?      -            annotation node-agent.io/reboot-status has unknown state ...",
		"node-6  yes       Draining             26h    -            draining",
		"",
		"1 of 6 nodes show REQUIRED -: no reboot controller reports on them. It runs only where node-agent has reboot.enabled (deploy/components/reboot).",
	)
	tests := []struct {
		name    string
		nodes   []string
		objs    []runtime.Object
		want    string
		wantErr string
	}{
		{name: "every node, sorted", objs: rebootNodes(), want: all},
		{name: "one node shows its whole message", nodes: []string{"node-1"}, objs: rebootNodes(), want: lines(
			"NODE    REQUIRED  REASON               SINCE  REQUESTED  MESSAGE",
			"node-1  yes       WaitingForDrainSlot  3h     -          "+waitingMessage,
		)},
		{name: "named nodes in the order named; a missing one is an error after the others", nodes: []string{"node-2", "node-9", "node-1"}, objs: rebootNodes(),
			want: lines(
				"NODE    REQUIRED  REASON               SINCE  REQUESTED  MESSAGE",
				"node-2  no        Done                 -      -          the host rebooted and needs no other reboot",
				"node-1  yes       WaitingForDrainSlot  3h     -          sentinel file /run/reboot-required exists; waiting for a ...",
			),
			wantErr: "no Node node-9"},
		{name: "only a missing node", nodes: []string{"node-9"}, objs: rebootNodes(), wantErr: "no Node node-9"},
		{name: "no node at all", want: "No Node in the cluster.\n"},
		{name: "a refused request shows as refused", objs: []runtime.Object{refusedRebootNode()}, want: lines(
			"NODE    REQUIRED  REASON     SINCE  REQUESTED        MESSAGE",
			"node-7  no        NotNeeded  -      False (refused)  the host needs no reboot",
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, false, tt.objs...)
			err := h.client.RebootStatus(t.Context(), tt.nodes)
			if got := h.out.String(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
			if tt.wantErr == "" && err != nil {
				t.Errorf("error %v", err)
			}
			if tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// refusedRebootNode is a node whose request the coordinator refuses.
func refusedRebootNode() *corev1.Node {
	n := rebootNode("node-7", &reboot.Record{State: reboot.NotNeeded, Reason: string(reboot.NotNeeded), Message: "the host needs no reboot"}, corev1.ConditionFalse)
	n.Annotations[reboot.RequestAnnotation] = " False "
	return n
}

// patches returns the merge patches the client sent to Nodes.
func patches(h *harness) []string {
	var out []string
	for _, a := range h.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			if p.GetPatchType() != types.MergePatchType {
				h.t.Errorf("patch of type %s, want a merge patch", p.GetPatchType())
			}
			out = append(out, p.GetName()+" "+string(p.GetPatch()))
		}
	}
	return out
}

func TestRequestReboot(t *testing.T) {
	tests := []struct {
		name        string
		node        string
		reason      string
		wantPatches []string
		wantErr     string
		wantStderr  string
	}{
		{name: "a node with a coordinator", node: "node-1", reason: "kernel 6.12",
			wantPatches: []string{`node-1 {"metadata":{"annotations":{"node-agent.io/reboot":"kernel 6.12"}}}`},
			wantStderr: lines("reboot of node-1 requested (node-agent.io/reboot=kernel 6.12)",
				"the coordinator on node-1 reboots it in its window, when no blocker holds it back and a drain slot is free; follow it with `node-agent reboot status node-1`")},
		{name: "a node without a coordinator is warned of", node: "node-3", reason: DefaultRebootReason,
			wantPatches: []string{`node-3 {"metadata":{"annotations":{"node-agent.io/reboot":"asked for with node-agent reboot request"}}}`},
			wantStderr: lines("reboot of node-3 requested (node-agent.io/reboot=asked for with node-agent reboot request)",
				"warning: no reboot controller reports on node-3 (no node-agent.io/reboot-status annotation, no RebootRequired condition): the request waits until node-agent runs there with reboot.enabled (deploy/components/reboot)")},
		{name: "a node whose record does not parse", node: "node-5", reason: "x",
			wantPatches: []string{`node-5 {"metadata":{"annotations":{"node-agent.io/reboot":"x"}}}`},
			wantStderr: lines("reboot of node-5 requested (node-agent.io/reboot=x)",
				`warning: the coordinator on node-5 will not act while its record is unreadable: annotation node-agent.io/reboot-status has unknown state "Sleeping"; the reboot controller will not act on it: fix it, or delete it to let the reboot controller start afresh`)},
		{name: "a node that does not exist is refused", node: "node-9", reason: "x", wantErr: "no Node node-9; nothing was changed"},
		{name: "a blank reason is refused", node: "node-1", reason: " ", wantErr: "--reason must not be blank"},
		{name: "a reason the coordinator refuses is refused first", node: "node-1", reason: "false",
			wantErr: `--reason: node-agent.io/reboot="false" is refused: its value is the reason`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, false, rebootNodes()...)
			err := h.client.RequestReboot(t.Context(), tt.node, tt.reason)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := patches(h); strings.Join(got, "\n") != strings.Join(tt.wantPatches, "\n") {
				t.Errorf("patches %q, want %q", got, tt.wantPatches)
			}
			if got := h.err.String(); got != tt.wantStderr {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, tt.wantStderr)
			}
		})
	}
}

func TestCancelRebootRequest(t *testing.T) {
	requested := func(name string, phase reboot.Phase) *corev1.Node {
		n := rebootNode(name, &reboot.Record{State: reboot.Pending, Reason: string(reboot.OutsideWindow), Phase: phase}, corev1.ConditionTrue)
		n.Annotations[reboot.RequestAnnotation] = "kernel"
		return n
	}
	tests := []struct {
		name        string
		node        string
		wantPatches []string
		wantStderr  string
		wantErr     string
	}{
		{name: "a waiting request is removed", node: "node-1",
			wantPatches: []string{`node-1 {"metadata":{"annotations":{"node-agent.io/reboot":null}}}`},
			wantStderr:  lines("reboot request of node-1 removed")},
		{name: "a drain under way is called off", node: "node-2",
			wantPatches: []string{`node-2 {"metadata":{"annotations":{"node-agent.io/reboot":null}}}`},
			wantStderr:  lines("reboot request of node-2 removed", "the drain of node-2 is called off and undone, unless a sentinel on the host still asks for the reboot")},
		{name: "a reboot asked of logind goes on", node: "node-4",
			wantPatches: []string{`node-4 {"metadata":{"annotations":{"node-agent.io/reboot":null}}}`},
			wantStderr:  lines("reboot request of node-4 removed", "warning: the reboot of node-4 is under way (phase RebootRequested) and goes on")},
		{name: "no request: nothing to patch", node: "node-3", wantStderr: lines("no reboot of node-3 was requested; nothing was changed")},
		{name: "a node that does not exist", node: "node-9", wantErr: "no Node node-9; nothing was changed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, false, requested("node-1", reboot.PhaseWaitingForSlot), requested("node-2", reboot.PhaseDraining), node("node-3", "1", "", nil),
				requested("node-4", reboot.PhaseRebootRequested))
			err := h.client.CancelRebootRequest(t.Context(), tt.node)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := patches(h); strings.Join(got, "\n") != strings.Join(tt.wantPatches, "\n") {
				t.Errorf("patches %q, want %q", got, tt.wantPatches)
			}
			if got := h.err.String(); got != tt.wantStderr {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, tt.wantStderr)
			}
			if tt.wantErr == "" {
				n, err := h.kube.CoreV1().Nodes().Get(t.Context(), tt.node, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if v, ok := n.Annotations[reboot.RequestAnnotation]; ok {
					t.Errorf("request still there: %q", v)
				}
			}
		})
	}
}

func TestRebootLine(t *testing.T) {
	objs := rebootNodes()
	byName := map[string]*corev1.Node{}
	for _, o := range objs {
		n := o.(*corev1.Node)
		byName[n.Name] = n
	}
	tests := []struct{ node, want string }{
		{"node-1", "Reboot required: yes (WaitingForDrainSlot since 2026-01-01T07:00:00Z): " + waitingMessage},
		{"node-2", "Reboot required: no (Done): the host rebooted and needs no other reboot"},
		{"node-3", ""},
		{"node-4", "Reboot required: unknown (NeedUnknown since 2026-01-01T09:59:10Z): cannot tell whether the host needs a reboot: sentinel command /usr/bin/needs-restarting -r: unit failed [requested: kernel 6.12]"},
		{"node-5", `Reboot: annotation node-agent.io/reboot-status has unknown state "Sleeping"; the reboot controller will not act on it: fix it, or delete it to let the reboot controller start afresh`},
	}
	byName["node-7"] = refusedRebootNode()
	tests = append(tests, struct{ node, want string }{"node-7", "Reboot required: no (NotNeeded): the host needs no reboot [request refused: " +
		`node-agent.io/reboot=" False " is refused: ` + reasontext.Accepted + "]"})
	for _, tt := range tests {
		if got := rebootLine(byName[tt.node]); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.node, got, tt.want)
		}
	}
}
