package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

func newMaintenanceCommand() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "maintenance",
		Short: "Start, stop or show the maintenance (self-drain) of a node",
		Long: `maintenance drives the maintenance APIs of node-agent: the annotation on the
Node (--api annotation, the default) or NodeMaintenance objects
(--api nodemaintenance; the agent serves them when maintenance.nodeMaintenance
is on).

  start NODE --reason TEXT   sets node-agent.io/maintenance=TEXT, or creates the
                             NodeMaintenance object nm-NODE. The agent on that
                             node cordons it, adds the drain taint (so VMs
                             live-migrate) and evicts its pods, respecting
                             PodDisruptionBudgets.
  stop NODE                  removes the annotation, or deletes the node's
                             NodeMaintenance objects. The agent stops evicting and
                             undoes only what it did: a node an admin had
                             cordoned before stays cordoned.
  status [NODE]              shows the status the agent reports on the Node
                             (node-agent.io/maintenance-status) and the
                             NodeMaintenance objects, with both APIs unless --api.

The node stays in maintenance while either API asks for it; one drain serves
both. At most drain.maxConcurrentNodes nodes (default 1) drain at once; the
others show phase Waiting (Running with the reason in lastError on a
NodeMaintenance object).`,
	}
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the pod's service account).")
	var cfg *rest.Config
	restConfig := func() (*rest.Config, error) {
		if cfg != nil {
			return cfg, nil
		}
		c, err := kube.RESTConfig(kubeconfig)
		if err != nil {
			return nil, err
		}
		c.UserAgent = "node-agent-maintenance"
		cfg = c
		return cfg, nil
	}
	client := func() (kube.Interface, error) {
		c, err := restConfig()
		if err != nil {
			return nil, err
		}
		return kube.New(c)
	}
	dyn := func() (dynamic.Interface, error) {
		c, err := restConfig()
		if err != nil {
			return nil, err
		}
		return dynamic.NewForConfig(c)
	}
	cmd.AddCommand(newMaintenanceStartCommand(client, dyn), newMaintenanceStopCommand(client, dyn), newMaintenanceStatusCommand(client, dyn))
	return cmd
}

type clientFunc func() (kube.Interface, error)

type dynamicFunc func() (dynamic.Interface, error)

// The values of --api.
const (
	apiAnnotation      = "annotation"
	apiNodeMaintenance = "nodemaintenance"
)

func checkAPI(api string, allowEmpty bool) error {
	switch api {
	case apiAnnotation, apiNodeMaintenance:
		return nil
	case "":
		if allowEmpty {
			return nil
		}
	}
	return fmt.Errorf("--api %q: use %s or %s", api, apiAnnotation, apiNodeMaintenance)
}

// nodeMaintenanceAPI returns a dynamic client and the NodeMaintenance groups
// the cluster serves, for --api nodemaintenance.
func nodeMaintenanceAPI(c kube.Interface, dyn dynamicFunc) (dynamic.Interface, []string, error) {
	groups, err := servedGroups(c)
	if err != nil {
		return nil, nil, err
	}
	d, err := dyn()
	if err != nil {
		return nil, nil, err
	}
	return d, groups, nil
}

// servedGroups returns the NodeMaintenance groups the cluster serves, or an
// error that says how to get one.
func servedGroups(c kube.Interface) ([]string, error) {
	groups, err := selfdrain.ServedNodeMaintenanceGroups(c.Discovery())
	if err != nil {
		return nil, err
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("the cluster serves no NodeMaintenance API (%s); install node-agent's deploy/components/nodemaintenance, or use --api %s",
			strings.Join(selfdrain.NodeMaintenanceGroups, ", "), apiAnnotation)
	}
	return groups, nil
}

func newMaintenanceStartCommand(client clientFunc, dyn dynamicFunc) *cobra.Command {
	var reason, podSelector, api string
	var wait, dryRun bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "start NODE --reason TEXT [--wait]",
		Short: "Request maintenance of NODE: cordon, taint and drain it",
		Long: `start sets the node-agent.io/maintenance annotation on NODE, or with
--api nodemaintenance creates the NodeMaintenance object nm-NODE (in
nodemaintenance.medik8s.io if the cluster serves it, else in
nodemaintenance.kubevirt.io). The agent running on NODE drains it. With --wait
it shows the progress (pods left, current blocker) until the drain Succeeded or
Failed, and exits non-zero on Failed.`,
		Example: "  node-agent maintenance start node-1 --reason 'BIOS update' --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			node := args[0]
			ctx := cmd.Context()
			if err := checkAPI(api, false); err != nil {
				return err
			}
			if dryRun {
				return printPlan(cmd, c, node, podSelector)
			}
			requested := time.Now().Add(-time.Second) // apiserver times are in whole seconds
			if api == apiNodeMaintenance {
				d, groups, err := nodeMaintenanceAPI(c, dyn)
				if err != nil {
					return err
				}
				nm, err := selfdrain.RequestNodeMaintenance(ctx, d, groups[0], "nm-"+node, node, reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "maintenance of %s requested with %s: %s\n", node, nm.ID(), reason)
			} else {
				if _, err := selfdrain.RequestMaintenance(ctx, c, node, reason); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "maintenance of %s requested: %s\n", node, reason)
			}
			if !wait {
				return nil
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			return waitForDrain(ctx, c, node, requested, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "Why the node goes into maintenance; shown in its status and Events (required).")
	cmd.Flags().BoolVar(&wait, "wait", false, "Show progress and wait until the drain Succeeded (exit 0) or Failed (exit 1).")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "With --wait, give up waiting after this long (the maintenance goes on). 0 waits for ever.")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Change nothing: list the pods a drain would evict now, those it would skip, and the PodDisruptionBudgets that would block it.")
	cmd.Flags().StringVar(&podSelector, "drain-pod-selector", "", "With --dry-run, the agent's drain.podSelector, if it has one.")
	cmd.Flags().StringVar(&api, "api", apiAnnotation, "Request maintenance with the annotation node-agent.io/maintenance (annotation) or a NodeMaintenance object (nodemaintenance).")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func printPlan(cmd *cobra.Command, c kube.Interface, node, podSelector string) error {
	plan, err := selfdrain.Plan(cmd.Context(), c, node, podSelector)
	if err != nil {
		return err
	}
	n, err := c.CoreV1().Nodes().Get(cmd.Context(), node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", node, err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Dry run: nothing changed. A drain of %s now would:\n", node)
	if n.Spec.Unschedulable {
		fmt.Fprintln(out, "  leave the node cordoned (it is cordoned already, so ending maintenance keeps it cordoned)")
	} else {
		fmt.Fprintln(out, "  cordon the node (ending maintenance uncordons it)")
	}
	fmt.Fprintln(out, "  add the drain taint (default kubevirt.io/drain=draining:NoSchedule)")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nPOD\tACTION\tNOTE")
	counts := map[string]int{}
	for _, p := range plan {
		counts[p.Action]++
		note := p.Why
		if len(p.Blockers) > 0 {
			note = "blocked now: " + strings.Join(p.Blockers, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Pod, p.Action, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d to evict, %d to skip, %d finished.\n", counts["evict"], counts["skip"], counts["done"])
	return nil
}

// waitForDrain follows the status of a maintenance started at or after since.
func waitForDrain(ctx context.Context, c kube.Interface, node string, since time.Time, out io.Writer) error {
	bar := newProgressBar(out)
	var final *selfdrain.Status
	err := selfdrain.WatchNode(ctx, c, node, func(n *corev1.Node) (bool, error) {
		st, err := selfdrain.ParseStatus(n)
		if err != nil {
			return false, err
		}
		if st == nil || !st.Active() || st.StartTime == nil || st.StartTime.Time.Before(since.Truncate(time.Second)) {
			bar.show("waiting for the agent on " + node + " to start")
			return false, nil
		}
		bar.status(st)
		switch st.Phase {
		case selfdrain.PhaseSucceeded, selfdrain.PhaseFailed:
			final = st
			return true, nil
		}
		return false, nil
	})
	bar.done()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("stopped waiting (--timeout); the maintenance of %s goes on: see `node-agent maintenance status %s`", node, node)
		}
		return err
	}
	if final.Phase == selfdrain.PhaseFailed {
		return fmt.Errorf("drain of %s failed: %d pods left; last error: %s", node, len(final.PendingPods), final.LastError)
	}
	fmt.Fprintf(out, "%s drained: %d pods evicted in %s\n", node, final.EvictionPods, final.LastUpdate.Sub(final.StartTime.Time).Round(time.Second))
	return nil
}

// progressBar redraws one line on a terminal and prints changes otherwise.
type progressBar struct {
	out  io.Writer
	tty  bool
	last string
}

func newProgressBar(out io.Writer) *progressBar {
	f, ok := out.(*os.File)
	return &progressBar{out: out, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (b *progressBar) status(st *selfdrain.Status) {
	const width = 30
	filled := st.DrainProgress * width / 100
	line := fmt.Sprintf("[%s%s] %3d%%  %s  %d/%d pods left", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		st.DrainProgress, st.Phase, len(st.PendingPods), st.EvictionPods)
	if st.EvictionPods == 0 && st.Phase == selfdrain.PhaseRunning {
		line = fmt.Sprintf("[%s] cordoned, listing pods", strings.Repeat(".", width))
	}
	if st.LastError != "" {
		line += "  blocker: " + st.LastError
	}
	b.show(line)
}

func (b *progressBar) show(line string) {
	if line == b.last {
		return
	}
	b.last = line
	if b.tty {
		fmt.Fprintf(b.out, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(b.out, line)
}

func (b *progressBar) done() {
	if b.tty && b.last != "" {
		fmt.Fprintln(b.out)
	}
}

func newMaintenanceStopCommand(client clientFunc, dyn dynamicFunc) *cobra.Command {
	var wait bool
	var api string
	cmd := &cobra.Command{
		Use:   "stop NODE [--wait]",
		Short: "End the maintenance of NODE: stop evicting, undo the agent's cordon and taint",
		Long: `stop removes the node-agent.io/maintenance annotation from NODE, or with
--api nodemaintenance deletes every NodeMaintenance object that names NODE. The
node leaves maintenance once neither asks for it any longer.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkAPI(api, false); err != nil {
				return err
			}
			c, err := client()
			if err != nil {
				return err
			}
			node := args[0]
			ctx := cmd.Context()
			if api == apiNodeMaintenance {
				d, groups, err := nodeMaintenanceAPI(c, dyn)
				if err != nil {
					return err
				}
				ids, err := selfdrain.EndNodeMaintenance(ctx, d, groups, node)
				if err != nil {
					return err
				}
				if len(ids) == 0 {
					return fmt.Errorf("no NodeMaintenance object names %s", node)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "deleted %s\n", strings.Join(ids, ", "))
				if !wait {
					return nil
				}
				// The agent removes its finalizer once it has undone the
				// maintenance: the objects are gone then.
				for {
					left, err := selfdrain.ListNodeMaintenances(ctx, d, groups, node)
					if err != nil {
						return err
					}
					if len(left) == 0 {
						n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
						if err != nil {
							return fmt.Errorf("reading Node %s: %w", node, err)
						}
						fmt.Fprintf(cmd.ErrOrStderr(), "%s: unschedulable=%t\n", node, n.Spec.Unschedulable)
						return nil
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(time.Second):
					}
				}
			}
			if _, err := selfdrain.EndMaintenance(ctx, c, node); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "maintenance of %s ended\n", node)
			if !wait {
				return nil
			}
			return selfdrain.WatchNode(ctx, c, node, func(n *corev1.Node) (bool, error) {
				st, err := selfdrain.ParseStatus(n)
				if err != nil {
					return false, err
				}
				if st.Active() {
					return false, nil
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: unschedulable=%t\n", node, n.Spec.Unschedulable)
				return true, nil
			})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "Wait until the agent has undone its changes.")
	cmd.Flags().StringVar(&api, "api", apiAnnotation, "End the maintenance requested with the annotation (annotation) or with NodeMaintenance objects (nodemaintenance).")
	return cmd
}

func newMaintenanceStatusCommand(client clientFunc, dyn dynamicFunc) *cobra.Command {
	var api string
	cmd := &cobra.Command{
		Use:   "status [NODE]",
		Short: "Show the maintenance status of NODE, or of every node in maintenance",
		Long: `status shows, for NODE or for every node in maintenance, the status the agent
keeps on the Node (the annotation API) and the NodeMaintenance objects with
their status. A NodeMaintenance object whose node does not exist is listed
with a note: no agent serves it, so it stays without status until deleted.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkAPI(api, true); err != nil {
				return err
			}
			c, err := client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			if api != apiNodeMaintenance {
				var nodes []corev1.Node
				missing := false
				if len(args) == 1 {
					n, err := c.CoreV1().Nodes().Get(ctx, args[0], metav1.GetOptions{})
					switch {
					case apierrors.IsNotFound(err) && api == "":
						// NodeMaintenance objects may still name it.
						missing = true
						fmt.Fprintf(out, "Node %s does not exist.\n", args[0])
					case err != nil:
						return fmt.Errorf("reading Node %s: %w", args[0], err)
					default:
						nodes = []corev1.Node{*n}
					}
				} else {
					list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
					if err != nil {
						return fmt.Errorf("listing Nodes: %w", err)
					}
					for _, n := range list.Items {
						st, _ := selfdrain.ParseStatus(&n)
						if n.Annotations[selfdrain.MaintenanceAnnotation] != "" || st.Active() {
							nodes = append(nodes, n)
						}
					}
				}
				if !missing {
					if err := printStatusTable(out, nodes, len(args) == 1); err != nil {
						return err
					}
				}
			}
			if api == apiAnnotation {
				return nil
			}
			groups, err := selfdrain.ServedNodeMaintenanceGroups(c.Discovery())
			if err != nil {
				return err
			}
			if len(groups) == 0 {
				if api == apiNodeMaintenance {
					return fmt.Errorf("the cluster serves no NodeMaintenance API (%s)", strings.Join(selfdrain.NodeMaintenanceGroups, ", "))
				}
				return nil
			}
			d, err := dyn()
			if err != nil {
				return err
			}
			node := ""
			if len(args) == 1 {
				node = args[0]
			}
			objs, err := selfdrain.ListNodeMaintenances(ctx, d, groups, node)
			if err != nil {
				return err
			}
			exists := map[string]bool{}
			for _, o := range objs {
				if _, seen := exists[o.Spec.NodeName]; seen {
					continue
				}
				_, err := c.CoreV1().Nodes().Get(ctx, o.Spec.NodeName, metav1.GetOptions{})
				switch {
				case err == nil:
					exists[o.Spec.NodeName] = true
				case apierrors.IsNotFound(err):
					exists[o.Spec.NodeName] = false
				default:
					return fmt.Errorf("reading Node %s: %w", o.Spec.NodeName, err)
				}
			}
			fmt.Fprintln(out)
			return printNodeMaintenanceTable(out, objs, exists)
		},
	}
	cmd.Flags().StringVar(&api, "api", "", "Show only the annotation API (annotation) or only NodeMaintenance objects (nodemaintenance). Default: both.")
	return cmd
}

// printNodeMaintenanceTable lists NodeMaintenance objects; exists tells
// which of their nodes exist.
func printNodeMaintenanceTable(out io.Writer, objs []*selfdrain.NodeMaintenance, exists map[string]bool) error {
	if len(objs) == 0 {
		_, err := fmt.Fprintln(out, "No NodeMaintenance object.")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODEMAINTENANCE\tNODE\tPHASE\tPROGRESS\tPENDING\tLAST ERROR\tNOTE")
	for _, o := range objs {
		var notes []string
		if !exists[o.Spec.NodeName] {
			notes = append(notes, "node "+o.Spec.NodeName+" does not exist: no agent serves this object; delete it")
		}
		if o.DeletionTimestamp != nil {
			notes = append(notes, "deleted; kept until the agent has restored the node")
		}
		phase := string(o.Status.Phase)
		if phase == "" {
			phase = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d%%\t%d/%d\t%s\t%s\n", o.ID(), o.Spec.NodeName, phase, o.Status.DrainProgress,
			len(o.Status.PendingPods), o.Status.EvictionPods, o.Status.LastError, strings.Join(notes, "; "))
	}
	return tw.Flush()
}

func printStatusTable(out io.Writer, nodes []corev1.Node, one bool) error {
	if len(nodes) == 0 {
		_, err := fmt.Fprintln(out, "No node is in maintenance.")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tREQUESTED\tPHASE\tTRIGGER\tPROGRESS\tPENDING\tCORDONED\tSTARTED\tLAST ERROR")
	for _, n := range nodes {
		st, err := selfdrain.ParseStatus(&n)
		requested := n.Annotations[selfdrain.MaintenanceAnnotation]
		if requested == "" {
			requested = "-"
		}
		switch {
		case err != nil:
			fmt.Fprintf(tw, "%s\t%s\t?\t\t\t\t%t\t\t%v\n", n.Name, requested, n.Spec.Unschedulable, err)
		case st == nil:
			fmt.Fprintf(tw, "%s\t%s\t-\t\t\t\t%t\t\t\n", n.Name, requested, n.Spec.Unschedulable)
		default:
			phase := string(st.Phase)
			if !st.Active() {
				phase += " (ended)"
			}
			started := ""
			if st.StartTime != nil {
				started = st.StartTime.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d%%\t%d/%d\t%t\t%s\t%s\n", n.Name, requested, phase, st.Trigger,
				st.DrainProgress, len(st.PendingPods), st.EvictionPods, n.Spec.Unschedulable, started, st.LastError)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if one {
		st, err := selfdrain.ParseStatus(&nodes[0])
		if err == nil && st != nil && len(st.PendingPods) > 0 {
			fmt.Fprintf(out, "\nPending pods: %s\n", strings.Join(st.PendingPods, ", "))
		}
	}
	return nil
}
