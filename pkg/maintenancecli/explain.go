package maintenancecli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
)

// What `maintenance status NODE` adds for one node: what its maintenance
// waits for, in the lifecycle's own terms. The agent's record says it on
// the Node (a gate and its answer, the coordinator's Queued answer, the
// pods and budgets a drain is blocked by); the CLI, which runs as an admin,
// adds what a node's agent may not read: the drain slot Leases, with how
// long each holder has held its slot, and the node's place among every
// request the coordinator has queued.

// slotHolder is a node that holds a drain slot, as its Lease says.
type slotHolder struct {
	node    string
	purpose string
	since   time.Time
}

// waitFacts are the facts explain prints about one node.
type waitFacts struct {
	status  *selfdrain.Status
	request *slots.Request
	// grant is the coordinator's answer, when it answers request.
	grant *slots.Grant
	// place and queued: the request's place among every Queued request
	// of the cluster, by the coordinator's stamp, and their number; 0
	// when the request is not Queued. queueErr says why the Nodes could
	// not be listed to count them.
	place, queued int
	queueErr      error
	// holders hold a drain slot now; leaseErr says why they could not be
	// read, slotsNamespace where they were looked for.
	holders        []slotHolder
	leaseErr       error
	slotsNamespace string
}

// waitFacts reads what node's maintenance waits for: its record and its
// drain slot request on the Node, and, while it asks for a slot, the slot
// Leases and the other nodes' queued requests. What cannot be listed is
// noted, not an error: the node's own record is shown all the same.
func (c *Client) waitFacts(ctx context.Context, node *corev1.Node) *waitFacts {
	f := &waitFacts{slotsNamespace: c.SlotsNamespace}
	f.status, _ = selfdrain.ParseStatus(node)
	f.request, _ = slots.ParseRequest(node)
	if g, _ := slots.ParseGrant(node); g.Answers(f.request) {
		f.grant = g
	}
	if f.request == nil {
		return f
	}
	if c.SlotsNamespace != "" {
		f.holders, f.leaseErr = c.slotHolders(ctx)
	}
	if f.grant == nil || f.grant.State != slots.Queued {
		return f
	}
	list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		f.queueErr = err
		return f
	}
	f.place = 1
	for i := range list.Items {
		other := &list.Items[i]
		req, _ := slots.ParseRequest(other)
		g, _ := slots.ParseGrant(other)
		if !g.Answers(req) || g.State != slots.Queued {
			continue
		}
		f.queued++
		if other.Name != node.Name && cmp.Or(g.Time.Compare(f.grant.Time), strings.Compare(other.Name, node.Name)) < 0 {
			f.place++
		}
	}
	return f
}

// slotHolders lists the drain slot Leases in c.SlotsNamespace.
func (c *Client) slotHolders(ctx context.Context) ([]slotHolder, error) {
	list, err := c.Kube.CoordinationV1().Leases(c.SlotsNamespace).List(ctx, metav1.ListOptions{LabelSelector: slots.SlotLabel + "=true"})
	if err != nil {
		return nil, err
	}
	var out []slotHolder
	for _, l := range list.Items {
		h := slotHolder{node: ptr.Deref(l.Spec.HolderIdentity, l.Name), purpose: l.Annotations[slots.LeasePurpose]}
		if l.Spec.AcquireTime != nil {
			h.since = l.Spec.AcquireTime.Time
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b slotHolder) int { return cmp.Or(a.since.Compare(b.since), strings.Compare(a.node, b.node)) })
	return out, nil
}

// writeWait prints what node's maintenance waits for, from f, at now;
// nothing when it waits for nothing.
func writeWait(out io.Writer, node string, f *waitFacts, now time.Time) error {
	var b strings.Builder
	st := f.status
	// A gate, a VM or an error: what the agent says it waits for, unless
	// it is the coordinator's answer, shown below.
	if st.Active() && st.Phase == selfdrain.PhaseWaiting && st.LastError != "" &&
		(f.grant == nil || f.grant.State != slots.Queued || st.LastError != (slots.QueueWait{Reason: f.grant.Reason}).WaitReason()) {
		fmt.Fprintf(&b, "Waits for: %s\n", printable(st.LastError))
	}
	if f.request != nil {
		fmt.Fprintf(&b, "Drain slot (%s): %s\n", printable(string(f.request.Purpose)), slotLine(f, now))
		writeHolders(&b, node, f, now)
	}
	if st.Active() && len(st.Blockers) > 0 {
		title := "Blocking the drain"
		if st.Phase == selfdrain.PhaseFailed {
			title = "Left on the node when the drain stopped"
		}
		fmt.Fprintf(&b, "%s:\n", title)
		tw := newTabWriter(&b)
		for _, bl := range st.Blockers {
			by := string(bl.Reason)
			if bl.PodDisruptionBudget != "" {
				by = "PodDisruptionBudget " + bl.PodDisruptionBudget
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", printable(bl.Pod), printable(by), printable(bl.Detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if b.Len() == 0 {
		return nil
	}
	_, err := fmt.Fprintf(out, "\n%s", b.String())
	return err
}

// slotLine says where the node's drain slot request stands.
func slotLine(f *waitFacts, now time.Time) string {
	g := f.grant
	switch {
	case g == nil:
		return "asked for at " + f.request.RequestedAt.UTC().Format(time.RFC3339) + ", not answered yet: check that node-agent-coordinator runs"
	case g.State == slots.Queued && f.queueErr != nil:
		return fmt.Sprintf("queued by the coordinator since %s (%s ago); its place is unknown: cannot list the Nodes: %s\n  the coordinator's answer: %s",
			g.Time.UTC().Format(time.RFC3339), ago(now, g.Time), printable(f.queueErr.Error()), printable(g.Reason))
	case g.State == slots.Queued:
		return fmt.Sprintf("queued by the coordinator since %s (%s ago), place %d of %d queued in the cluster\n  the coordinator's answer: %s",
			g.Time.UTC().Format(time.RFC3339), ago(now, g.Time), f.place, f.queued, printable(g.Reason))
	case g.State == slots.Granted:
		return fmt.Sprintf("held since %s (%s), slot Lease %s", g.Time.UTC().Format(time.RFC3339), ago(now, g.Time), printable(g.Slot))
	}
	return fmt.Sprintf("revoked at %s: %s", g.Time.UTC().Format(time.RFC3339), printable(g.Reason))
}

// writeHolders prints the slots held, for a node that asks for one.
func writeHolders(b *strings.Builder, node string, f *waitFacts, now time.Time) {
	switch {
	case f.slotsNamespace == "":
		return
	case f.leaseErr != nil:
		fmt.Fprintf(b, "Drain slots held: cannot list the slot Leases in namespace %s: %s\n", f.slotsNamespace, printable(f.leaseErr.Error()))
		return
	case len(f.holders) == 0:
		fmt.Fprintf(b, "Drain slots held: none (Leases %s* in namespace %s)\n", slots.SlotPrefix, f.slotsNamespace)
		return
	}
	fmt.Fprintf(b, "Drain slots held (Leases in namespace %s):\n", f.slotsNamespace)
	tw := newTabWriter(b)
	for _, h := range f.holders {
		name := printable(h.node)
		if h.node == node {
			name += " (this node)"
		}
		held := "since an unknown time"
		if !h.since.IsZero() {
			held = fmt.Sprintf("held for %s, since %s", ago(now, h.since), h.since.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", name, printable(cmp.Or(h.purpose, "?")), held)
	}
	_ = tw.Flush() // a strings.Builder does not fail
}

// ago is how long before now t was, for a person.
func ago(now, t time.Time) string {
	return duration.HumanDuration(max(now.Sub(t), 0))
}
