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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/node-agent/node-agent/pkg/selfdrain"
)

func newMaintenanceCommand() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "maintenance",
		Short: "Start, stop or show the maintenance (self-drain) of a node",
		Long: `maintenance drives the maintenance API of node-agent: annotations on the Node.

  start NODE --reason TEXT   sets node-agent.io/maintenance=TEXT. The agent on
                             that node cordons it, adds the drain taint (so VMs
                             live-migrate) and evicts its pods, respecting
                             PodDisruptionBudgets.
  stop NODE                  removes the annotation. The agent stops evicting and
                             undoes only what it did: a node an admin had
                             cordoned before stays cordoned.
  status [NODE]              shows the status the agent reports
                             (node-agent.io/maintenance-status).

At most drain.maxConcurrentNodes nodes (default 1) drain at once; the others
show phase Waiting.`,
	}
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "Path of a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).")
	client := func() (kubernetes.Interface, error) {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig: %w", err)
		}
		cfg.UserAgent = "node-agent-maintenance"
		return kubernetes.NewForConfig(cfg)
	}
	cmd.AddCommand(newMaintenanceStartCommand(client), newMaintenanceStopCommand(client), newMaintenanceStatusCommand(client))
	return cmd
}

type clientFunc func() (kubernetes.Interface, error)

func newMaintenanceStartCommand(client clientFunc) *cobra.Command {
	var reason, podSelector string
	var wait, dryRun bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "start NODE --reason TEXT [--wait]",
		Short: "Request maintenance of NODE: cordon, taint and drain it",
		Long: `start sets the node-agent.io/maintenance annotation on NODE. The agent running
on NODE drains it. With --wait it shows the progress (pods left, current
blocker) until the drain Succeeded or Failed, and exits non-zero on Failed.`,
		Example: "  node-agent maintenance start node-1 --reason 'BIOS update' --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			node := args[0]
			ctx := cmd.Context()
			if dryRun {
				return printPlan(cmd, c, node, podSelector)
			}
			requested := time.Now().Add(-time.Second) // apiserver times are in whole seconds
			if _, err := selfdrain.RequestMaintenance(ctx, c, node, reason); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "maintenance of %s requested: %s\n", node, reason)
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
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func printPlan(cmd *cobra.Command, c kubernetes.Interface, node, podSelector string) error {
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
func waitForDrain(ctx context.Context, c kubernetes.Interface, node string, since time.Time, out io.Writer) error {
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

func newMaintenanceStopCommand(client clientFunc) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "stop NODE [--wait]",
		Short: "End the maintenance of NODE: stop evicting, undo the agent's cordon and taint",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			node := args[0]
			if _, err := selfdrain.EndMaintenance(cmd.Context(), c, node); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "maintenance of %s ended\n", node)
			if !wait {
				return nil
			}
			return selfdrain.WatchNode(cmd.Context(), c, node, func(n *corev1.Node) (bool, error) {
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
	return cmd
}

func newMaintenanceStatusCommand(client clientFunc) *cobra.Command {
	return &cobra.Command{
		Use:   "status [NODE]",
		Short: "Show the maintenance status of NODE, or of every node in maintenance",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			var nodes []corev1.Node
			if len(args) == 1 {
				n, err := c.CoreV1().Nodes().Get(cmd.Context(), args[0], metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("reading Node %s: %w", args[0], err)
				}
				nodes = []corev1.Node{*n}
			} else {
				list, err := c.CoreV1().Nodes().List(cmd.Context(), metav1.ListOptions{})
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
			return printStatusTable(cmd.OutOrStdout(), nodes, len(args) == 1)
		},
	}
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
