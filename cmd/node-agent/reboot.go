package main

import (
	"github.com/spf13/cobra"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/maintenancecli"
)

func newRebootCommand() *cobra.Command {
	var flags clientFlags
	cmd := &cobra.Command{
		Use:   "reboot",
		Short: "Show or ask for the coordinated reboots of nodes",
		Long: `reboot drives the reboot controller of node-agent, which runs on the nodes
where reboot.enabled is on (deploy/components/reboot). The coordinator reboots
its node when the host needs it (the sentinel file, such as
/run/reboot-required, or the sentinel command), inside reboot.window, never
past a blocker, one drain slot at a time: it drains the node, asks
systemd-logind to reboot, and uncordons the node once it is back and Ready.
It reports on the Node: the RebootRequired condition, the
node-agent.io/reboot-status annotation, Events and metrics.

  status [NODE...]              shows, for every node or the named ones,
                                whether a reboot is required (the condition's
                                status: yes, no, unknown), its reason, since
                                when, a pending request, and the message.
  request NODE [--reason TEXT]  asks for NODE's reboot without a sentinel: sets
                                node-agent.io/reboot=TEXT. The coordinator
                                treats it as a need and removes it once the
                                node is back, or when the attempt's drain
                                failed (asking again then starts at once).
                                A TEXT that reads as no (0, f, false, n, no,
                                off, null, ~, nil, none, in any case) is
                                refused, here and by the coordinator.
  request NODE --cancel         removes the request; while the node drains,
                                that calls the reboot off unless a sentinel
                                asks for it; once drained, the reboot goes on.`,
	}
	flags.add(cmd.PersistentFlags())
	client := func(cmd *cobra.Command) (*maintenancecli.Client, error) {
		cfg, err := flags.restConfig()
		if err != nil {
			return nil, err
		}
		cfg.UserAgent = "node-agent-reboot"
		c, err := kube.New(cfg)
		if err != nil {
			return nil, err
		}
		return &maintenancecli.Client{Kube: c, Out: cmd.OutOrStdout(), Err: cmd.ErrOrStderr()}, nil
	}
	cmd.AddCommand(newRebootStatusCommand(client), newRebootRequestCommand(client))
	return cmd
}

func newRebootStatusCommand(client clientFunc) *cobra.Command {
	return &cobra.Command{
		Use:   "status [NODE...]",
		Short: "Show whether nodes need a reboot, why they wait, and since when",
		Long: `status prints one row per node (every node, or those named):

  REQUIRED   the RebootRequired condition's status: yes (a reboot is needed or
             under way), no, unknown (the sentinel cannot be checked), or -
             when no coordinator reports on the node (reboot.enabled is off
             there).
  REASON     the condition's reason: NotNeeded; while it waits OutsideWindow,
             BlockedByPods, BlockedByAlerts, BlockedByGates (a PromQL gate of
             reboot.gates holds, named with its query and answer in the
             condition's message), WaitingForDrainSlot or InMaintenance;
             then Draining, Rebooting, Done; or DrainFailed (the drain did
             not finish within drain.timeout; tried again after a backoff),
             RebootLoop (the host still needs a reboot after one),
             NeedUnknown.
  SINCE      how long the node has needed the reboot (or its need has been
             unknown); - when none is needed.
  REQUESTED  the reason of a pending node-agent.io/reboot request, or its
             value followed by (refused) when the coordinator refuses it
             (such as false): it neither starts a reboot nor calls one off.
  MESSAGE    the condition's message, cut short when several nodes are
             listed; name one node to read it whole.

Text from the cluster is shown with control characters escaped (\n, \x1b,
\u202e, and \\ for a backslash), so each node keeps one row.

It exits non-zero when a named node does not exist.`,
		Example: "  node-agent reboot status\n  node-agent reboot status node-1",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client(cmd)
			if err != nil {
				return err
			}
			return c.RebootStatus(cmd.Context(), args)
		},
	}
}

func newRebootRequestCommand(client clientFunc) *cobra.Command {
	var reason string
	var cancel bool
	cmd := &cobra.Command{
		Use:   "request NODE [--reason TEXT | --cancel]",
		Short: "Ask for NODE's reboot without a sentinel, or cancel the request",
		Long: `request sets the annotation node-agent.io/reboot=TEXT on NODE with a merge
patch; nothing else of the Node changes. The coordinator on NODE then treats
the node as needing a reboot and reboots it as it would for the sentinel: in
its window, when no blocker holds it back and a drain slot is free. It removes
the request once the node is back from that reboot, or when the attempt
failed. After a failed attempt, a new request starts the next one without
waiting for reboot.loopBound.

The request is refused for a Node that does not exist. The coordinator runs
only where node-agent has reboot.enabled on (deploy/components/reboot): when
NODE shows no sign of one (no node-agent.io/reboot-status annotation, no
RebootRequired condition), the request is made but a warning says that nothing
acts on it yet.

--cancel removes the request instead. While the node drains, that calls the
reboot off and the drain is undone, unless a sentinel still asks for the
reboot; once the node is drained, the reboot goes on.`,
		Example: "  node-agent reboot request node-1 --reason 'kernel 6.12 for CVE-2026-1234'\n  node-agent reboot request node-1 --cancel",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client(cmd)
			if err != nil {
				return err
			}
			if cancel {
				return c.CancelRebootRequest(cmd.Context(), args[0])
			}
			return c.RequestReboot(cmd.Context(), args[0], reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", maintenancecli.DefaultRebootReason, "Why the node reboots; the annotation's value, shown in the condition's message and Events.")
	cmd.Flags().BoolVar(&cancel, "cancel", false, "Remove the request instead of making it.")
	cmd.MarkFlagsMutuallyExclusive("reason", "cancel")
	return cmd
}
