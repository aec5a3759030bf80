package maintenancecli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/selfdrain/podselect"
	"github.com/node-agent/node-agent/pkg/vmdrain"
)

// API is one of the two ways to ask for maintenance.
type API string

// The APIs, as --api names them.
const (
	// APIAnnotation is the node-agent.io/maintenance annotation on the Node.
	APIAnnotation API = "annotation"
	// APINodeMaintenance is a NodeMaintenance object naming the Node.
	APINodeMaintenance API = "nodemaintenance"
)

// ParseAPI checks a value of --api. The empty value, which means both APIs,
// is accepted only where allowBoth.
func ParseAPI(s string, allowBoth bool) (API, error) {
	switch a := API(s); a {
	case APIAnnotation, APINodeMaintenance:
		return a, nil
	case "":
		if allowBoth {
			return a, nil
		}
	}
	return "", fmt.Errorf("--api %q: use %s or %s", s, APIAnnotation, APINodeMaintenance)
}

// Client starts, stops and shows the maintenance of nodes from outside them.
type Client struct {
	Kube kube.Interface
	// Dynamic returns the client for NodeMaintenance objects. It is called
	// only when they are asked for, so the annotation API works without it.
	Dynamic func() (dynamic.Interface, error)
	// Out receives the tables, Err what was done and the progress.
	Out, Err io.Writer
	// Clock is the real clock when nil.
	Clock clock.Clock
	// PollInterval is how often Stop, waiting, lists the NodeMaintenance
	// objects until they are gone; one second when 0.
	PollInterval time.Duration
	// SlotsNamespace holds the drain slot Leases (slots.namespace):
	// Status of one node that asks for a slot lists their holders. Empty,
	// it lists none.
	SlotsNamespace string
}

func (c *Client) clock() clock.Clock {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

// nodeMaintenanceAPI returns a dynamic client and the NodeMaintenance groups
// the cluster serves, or an error that says how to get one.
func (c *Client) nodeMaintenanceAPI() (dynamic.Interface, []string, error) {
	groups, err := maintenance.ServedNodeMaintenanceGroups(c.Kube.Discovery())
	if err != nil {
		return nil, nil, err
	}
	if len(groups) == 0 {
		return nil, nil, fmt.Errorf("the cluster serves no NodeMaintenance API (%s); install node-agent's deploy/components/nodemaintenance, or use --api %s",
			strings.Join(maintenance.NodeMaintenanceGroups, ", "), APIAnnotation)
	}
	d, err := c.Dynamic()
	if err != nil {
		return nil, nil, err
	}
	return d, groups, nil
}

// StartOptions says how to start a maintenance.
type StartOptions struct {
	Node   string
	Reason string
	API    API
	// Wait follows the drain until it Succeeded or Failed; Failed is an
	// error.
	Wait bool
	// Timeout, with Wait, stops waiting after this long; the maintenance
	// goes on. 0 waits for ever.
	Timeout time.Duration
	// Owner, with APIAnnotation, requests as that owner: the annotation
	// maintenance.node-agent.io/OWNER instead of node-agent.io/maintenance.
	// The node stays in maintenance while any requester asks.
	Owner string
}

// checkOwner refuses an owner with the NodeMaintenance API, whose objects
// are each a requester of their own already.
func checkOwner(owner string, api API) error {
	if owner != "" && api == APINodeMaintenance {
		return fmt.Errorf("--owner works with --api %s only: each NodeMaintenance object is a requester of its own", APIAnnotation)
	}
	return nil
}

// Start requests the maintenance of o.Node: the annotation, or the
// NodeMaintenance object nm-NODE in the first group the cluster serves.
func (c *Client) Start(ctx context.Context, o StartOptions) error {
	// The apiserver keeps whole seconds: a status the agent starts within
	// this second may carry the one before.
	requested := c.clock().Now().Add(-time.Second)
	// written is the Node as the request left it, when the request was a
	// write to it: the wait starts from there instead of reading it again.
	var written *corev1.Node
	if err := checkOwner(o.Owner, o.API); err != nil {
		return err
	}
	if o.API == APINodeMaintenance {
		d, groups, err := c.nodeMaintenanceAPI()
		if err != nil {
			return err
		}
		nm, err := maintenance.RequestNodeMaintenance(ctx, d, groups[0], "nm-"+o.Node, o.Node, o.Reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.Err, "maintenance of %s requested with %s: %s\n", o.Node, nm.ID(), o.Reason)
	} else if o.Owner != "" {
		n, err := maintenance.RequestOwnerMaintenance(ctx, c.Kube, o.Node, o.Owner, o.Reason)
		if err != nil {
			return err
		}
		written = n
		fmt.Fprintf(c.Err, "maintenance of %s requested by owner %s: %s\n", o.Node, o.Owner, o.Reason)
	} else {
		n, err := maintenance.RequestMaintenance(ctx, c.Kube, o.Node, o.Reason)
		if err != nil {
			return err
		}
		written = n
		fmt.Fprintf(c.Err, "maintenance of %s requested: %s\n", o.Node, o.Reason)
	}
	if !o.Wait {
		return nil
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	return c.waitForDrain(ctx, o.Node, written, requested)
}

// DryRun prints what a drain of node would do now, changing nothing.
// podSelector is the agent's drain.podSelector, if it has one.
func (c *Client) DryRun(ctx context.Context, node, podSelector string) error {
	plan, err := podselect.Plan(ctx, c.Kube, node, podSelector)
	if err != nil {
		return err
	}
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", node, err)
	}
	if err := writePlan(c.Out, node, n.Spec.Unschedulable, plan); err != nil {
		return err
	}
	if c.Dynamic == nil {
		return nil
	}
	dyn, err := c.Dynamic()
	if err != nil {
		return err
	}
	vms, err := vmdrain.Read(ctx, c.Kube, dyn, node, nil)
	if err != nil {
		return fmt.Errorf("planning the VMs on %s: %w", node, err)
	}
	return writeVMPlan(c.Out, node, vms)
}

// StopOptions says how to end a maintenance.
type StopOptions struct {
	Node string
	API  API
	// Wait waits until the agent has undone its changes; with Owner, until
	// the agent has seen the owner's request end (the maintenance goes on
	// while other requesters hold it).
	Wait bool
	// Owner, with APIAnnotation, ends only that owner's request
	// (maintenance.node-agent.io/OWNER).
	Owner string
}

// Stop ends the maintenance of o.Node that o.API asked for: it removes the
// annotation (o.Owner's, when set), or deletes every NodeMaintenance object
// naming the node. The node leaves maintenance once no requester is left.
func (c *Client) Stop(ctx context.Context, o StopOptions) error {
	if err := checkOwner(o.Owner, o.API); err != nil {
		return err
	}
	if o.Owner != "" {
		if _, err := maintenance.EndOwnerMaintenance(ctx, c.Kube, o.Node, o.Owner); err != nil {
			return err
		}
		fmt.Fprintf(c.Err, "owner %s's request for maintenance of %s ended\n", o.Owner, o.Node)
		if !o.Wait {
			return nil
		}
		return c.waitForOwnerGone(ctx, o.Node, o.Owner)
	}
	if o.API == APINodeMaintenance {
		d, groups, err := c.nodeMaintenanceAPI()
		if err != nil {
			return err
		}
		ids, err := maintenance.EndNodeMaintenance(ctx, d, groups, o.Node)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("no NodeMaintenance object names %s", o.Node)
		}
		fmt.Fprintf(c.Err, "deleted %s\n", strings.Join(ids, ", "))
		if !o.Wait {
			return nil
		}
		return c.waitForObjectsGone(ctx, d, groups, o.Node)
	}
	if _, err := maintenance.EndMaintenance(ctx, c.Kube, o.Node); err != nil {
		return err
	}
	fmt.Fprintf(c.Err, "maintenance of %s ended\n", o.Node)
	if !o.Wait {
		return nil
	}
	return c.waitForUndo(ctx, o.Node)
}

// Status prints the maintenance of node, or of every node in maintenance
// when node is empty: the status the agent keeps on the Node (unless api
// is APINodeMaintenance) and the NodeMaintenance objects (unless api is
// APIAnnotation; when api is empty they are shown if the cluster serves
// them).
func (c *Client) Status(ctx context.Context, node string, api API) error {
	if api != APINodeMaintenance {
		nodes, exists, err := c.nodesInMaintenance(ctx, node, api == "")
		if err != nil {
			return err
		}
		if !exists {
			fmt.Fprintf(c.Out, "Node %s does not exist.\n", node)
		} else if err := writeStatusTable(c.Out, nodes, node != ""); err != nil {
			return err
		}
		if exists && node != "" {
			if err := writeWait(c.Out, node, c.waitFacts(ctx, &nodes[0]), c.clock().Now()); err != nil {
				return err
			}
			c.writeVMWait(ctx, &nodes[0])
			if err := writeHooks(c.Out, &nodes[0]); err != nil {
				return err
			}
		}
	}
	if api == APIAnnotation {
		return nil
	}
	groups, err := maintenance.ServedNodeMaintenanceGroups(c.Kube.Discovery())
	if err != nil {
		return err
	}
	if len(groups) == 0 {
		if api == APINodeMaintenance {
			return fmt.Errorf("the cluster serves no NodeMaintenance API (%s)", strings.Join(maintenance.NodeMaintenanceGroups, ", "))
		}
		return nil
	}
	d, err := c.Dynamic()
	if err != nil {
		return err
	}
	objs, err := maintenance.ListNodeMaintenances(ctx, d, groups, node)
	if err != nil {
		return err
	}
	exist := map[string]bool{}
	for _, o := range objs {
		if _, seen := exist[o.Spec.NodeName]; seen {
			continue
		}
		_, err := c.Kube.CoreV1().Nodes().Get(ctx, o.Spec.NodeName, metav1.GetOptions{})
		switch {
		case err == nil:
			exist[o.Spec.NodeName] = true
		case apierrors.IsNotFound(err):
			exist[o.Spec.NodeName] = false
		default:
			return fmt.Errorf("reading Node %s: %w", o.Spec.NodeName, err)
		}
	}
	fmt.Fprintln(c.Out)
	return writeNodeMaintenanceTable(c.Out, objs, exist)
}

// nodesInMaintenance returns node, or when node is empty every Node that
// is asked into maintenance or has an active status. A node that does not
// exist is an error, unless missingOK (NodeMaintenance objects may still
// name it): then exists is false.
func (c *Client) nodesInMaintenance(ctx context.Context, node string, missingOK bool) (nodes []corev1.Node, exists bool, err error) {
	if node != "" {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && missingOK:
			return nil, false, nil
		case err != nil:
			return nil, false, fmt.Errorf("reading Node %s: %w", node, err)
		}
		return []corev1.Node{*n}, true, nil
	}
	list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("listing Nodes: %w", err)
	}
	for _, n := range list.Items {
		st, _ := selfdrain.ParseStatus(&n)
		if n.Annotations[selfdrain.MaintenanceAnnotation] != "" || st.Active() || maintenance.HasOwnerRequest(&n) {
			nodes = append(nodes, n)
		}
	}
	return nodes, true, nil
}

// writeVMWait prints, when node's maintenance waits for its VMs
// (maintenance.VMGateWhat), the VM plan as the admin's credentials see it
// now: each VM and, per node that cannot take it, the scheduler's filter
// that says so. A plan that cannot be read is said in one line.
func (c *Client) writeVMWait(ctx context.Context, n *corev1.Node) {
	st, err := selfdrain.ParseStatus(n)
	if err != nil || st == nil || !st.Active() || st.Phase != selfdrain.PhaseWaiting ||
		!strings.Contains(st.LastError, maintenance.VMGateWhat) || c.Dynamic == nil {
		return
	}
	dyn, err := c.Dynamic()
	if err == nil {
		var r vmdrain.Report
		if r, err = vmdrain.Read(ctx, c.Kube, dyn, n.Name, nil); err == nil {
			err = writeVMPlan(c.Out, n.Name, r)
		}
	}
	if err != nil {
		fmt.Fprintf(c.Out, "\nThe VM plan could not be read now: %s\n", printable(err.Error()))
	}
}
