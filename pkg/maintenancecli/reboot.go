package maintenancecli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/node-agent/node-agent/pkg/reboot"
)

// The client side of the reboot controller (pkg/reboot), as `node-agent
// reboot` uses it: the coordinator on each node reports on its Node (the
// RebootRequired condition and the record in reboot.RecordAnnotation), and a
// person asks for a node's reboot with reboot.RequestAnnotation.

// DefaultRebootReason is the request's value when none is given: the
// coordinator shows it in the condition's message.
const DefaultRebootReason = "asked for with node-agent reboot request"

// maxMessage bounds the MESSAGE column when several nodes are listed; one
// node's message is shown whole.
const maxMessage = 60

// RebootStatus prints the reboot state of the named nodes, or of every
// node when none is named. A named node that does not exist is an error,
// after the others are printed.
func (c *Client) RebootStatus(ctx context.Context, names []string) error {
	var nodes []corev1.Node
	var missing []string
	if len(names) == 0 {
		list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing Nodes: %w", err)
		}
		nodes = list.Items
		slices.SortFunc(nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	}
	for _, name := range names {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, name)
		case err != nil:
			return fmt.Errorf("reading Node %s: %w", name, err)
		default:
			nodes = append(nodes, *n)
		}
	}
	if len(nodes) > 0 || len(names) == 0 {
		if err := writeRebootTable(c.Out, nodes, len(names) == 1, c.clock().Now()); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no Node %s", strings.Join(missing, ", "))
	}
	return nil
}

// writeRebootTable prints one row per node; whole says to show messages
// untruncated.
func writeRebootTable(out io.Writer, nodes []corev1.Node, whole bool, now time.Time) error {
	if len(nodes) == 0 {
		_, err := fmt.Fprintln(out, "No Node in the cluster.")
		return err
	}
	tw := newTabWriter(out)
	fmt.Fprintln(tw, "NODE\tREQUIRED\tREASON\tSINCE\tREQUESTED\tMESSAGE")
	unreported := 0
	for i := range nodes {
		s := rebootStateOf(&nodes[i])
		if !s.reported {
			unreported++
		}
		since := "-"
		switch {
		case s.recordErr != nil:
			since = "?"
		case s.since != nil:
			since = duration.HumanDuration(now.Sub(s.since.Time))
		}
		msg := dash(printable(s.message))
		if !whole {
			msg = truncate(msg, maxMessage)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(nodes[i].Name), s.required, dash(printable(s.reason)), since,
			requestCell(s.requested, s.requestErr), msg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unreported > 0 {
		_, err := fmt.Fprintf(out, "\n%d of %d nodes show REQUIRED -: no reboot controller reports on them. It runs only where node-agent has reboot.enabled (deploy/components/reboot).\n",
			unreported, len(nodes))
		return err
	}
	return nil
}

// rebootState is what a Node says of its reboot.
type rebootState struct {
	// reported: the coordinator has written the condition or the record.
	reported bool
	// required is yes, no or unknown, from the condition's status; "-"
	// when the node has no condition.
	required string
	reason   string
	message  string
	since    *metav1.Time
	// requested is the reason of a pending request, or requestErr its
	// refusal (reboot.ParseRequest).
	requested  string
	requestErr error
	recordErr  error
}

func rebootStateOf(n *corev1.Node) rebootState {
	s := rebootState{required: "-"}
	s.requested, s.requestErr = reboot.ParseRequest(n)
	var cond *corev1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == reboot.ConditionType {
			cond = &n.Status.Conditions[i]
		}
	}
	rec, err := reboot.ParseRecord(n)
	s.reported = cond != nil || rec != nil || err != nil
	if rec != nil {
		s.since = rec.Since
	}
	switch {
	case cond != nil:
		switch cond.Status {
		case corev1.ConditionTrue:
			s.required = "yes"
		case corev1.ConditionFalse:
			s.required = "no"
		default:
			s.required = "unknown"
		}
		s.reason, s.message = cond.Reason, cond.Message
	case rec != nil:
		// The record is written just before the condition: a moment
		// without the condition, or a condition someone removed.
		s.required = "no"
		if rec.Needed() {
			s.required = "yes"
		}
		if rec.Reason == reboot.ReasonUnknown {
			s.required = "unknown"
		}
		s.reason, s.message = rec.Reason, rec.Message
	}
	if err != nil {
		// The coordinator does not act on a record it cannot read: that
		// is what the admin must see.
		s.recordErr, s.message = err, err.Error()
	}
	return s
}

// rebootLine is the line `node-agent maintenance status NODE` shows for the
// node's reboot; empty when no coordinator reports on it.
func rebootLine(n *corev1.Node) string {
	s := rebootStateOf(n)
	if !s.reported {
		return ""
	}
	if s.recordErr != nil {
		return "Reboot: " + printable(s.message)
	}
	detail := dash(printable(s.reason))
	if s.since != nil {
		detail += " since " + s.since.UTC().Format(time.RFC3339)
	}
	line := fmt.Sprintf("Reboot required: %s (%s)", s.required, detail)
	if s.message != "" {
		line += ": " + printable(s.message)
	}
	switch {
	case s.requestErr != nil:
		line += fmt.Sprintf(" [request refused: %s]", printable(s.requestErr.Error()))
	case s.requested != "":
		line += fmt.Sprintf(" [requested: %s]", printable(s.requested))
	}
	return line
}

// RequestReboot asks the coordinator on node for a reboot without a
// sentinel, with reason as the request's value. It refuses a Node that does
// not exist, and warns (on Err) when no coordinator reports on the node: the
// annotation then waits, unread, until one is enabled there.
func (c *Client) RequestReboot(ctx context.Context, node, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return errors.New("--reason must not be blank: it is the request's value, and a blank one asks for nothing")
	}
	if _, err := reasontext.ParseRequest(reboot.RequestAnnotation, reason); err != nil {
		return fmt.Errorf("--reason: %w; nothing was changed", err)
	}
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no Node %s; nothing was changed", node)
	}
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", node, err)
	}
	if err := c.patchRebootRequest(ctx, node, &reason); err != nil {
		return err
	}
	fmt.Fprintf(c.Err, "reboot of %s requested (%s=%s)\n", node, reboot.RequestAnnotation, reason)
	s := rebootStateOf(n)
	switch {
	case s.recordErr != nil:
		fmt.Fprintf(c.Err, "warning: the coordinator on %s will not act while its record is unreadable: %s\n", node, printable(s.recordErr.Error()))
	case !s.reported:
		fmt.Fprintf(c.Err, "warning: no reboot controller reports on %s (no %s annotation, no %s condition): the request waits until node-agent runs there with reboot.enabled (deploy/components/reboot)\n",
			node, reboot.RecordAnnotation, reboot.ConditionType)
	default:
		fmt.Fprintf(c.Err, "the coordinator on %s reboots it in its window, when no blocker holds it back and a drain slot is free; follow it with `node-agent reboot status %s`\n", node, node)
	}
	return nil
}

// CancelRebootRequest removes node's reboot request. While the node drains,
// that calls the reboot off (the drain is undone) unless a sentinel still
// asks for it; once the drain is done, the reboot goes on (reboot.Decide).
func (c *Client) CancelRebootRequest(ctx context.Context, node string) error {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no Node %s; nothing was changed", node)
	}
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", node, err)
	}
	if _, ok := n.Annotations[reboot.RequestAnnotation]; !ok {
		fmt.Fprintf(c.Err, "no reboot of %s was requested; nothing was changed\n", node)
		return nil
	}
	if err := c.patchRebootRequest(ctx, node, nil); err != nil {
		return err
	}
	fmt.Fprintf(c.Err, "reboot request of %s removed\n", node)
	if rec, err := reboot.ParseRecord(n); err == nil && rec != nil {
		switch rec.Phase {
		case reboot.PhaseDraining:
			fmt.Fprintf(c.Err, "the drain of %s is called off and undone, unless a sentinel on the host still asks for the reboot\n", node)
		case reboot.PhaseDrained, reboot.PhaseRebootRequested:
			fmt.Fprintf(c.Err, "warning: the reboot of %s is under way (phase %s) and goes on\n", node, rec.Phase)
		}
	}
	return nil
}

// patchRebootRequest sets the request annotation to value, or removes it
// when value is nil, with a merge patch: it touches no other key.
func (c *Client) patchRebootRequest(ctx context.Context, node string, value *string) error {
	// A null value in a merge patch removes the key.
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{reboot.RequestAnnotation: value}}})
	if err != nil {
		return err
	}
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotating Node %s: %w", node, err)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}
