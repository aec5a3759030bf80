package main

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/maintenancecli"
)

func newMaintenanceCommand() *cobra.Command {
	var flags clientFlags
	cmd := &cobra.Command{
		Use:   "maintenance",
		Short: "Start, stop or show the maintenance (self-drain) of a node",
		Long:  maintenancecli.CommandHelp,
	}
	flags.add(cmd.PersistentFlags())
	client := func(cmd *cobra.Command) (*maintenancecli.Client, error) {
		cfg, err := flags.restConfig()
		if err != nil {
			return nil, err
		}
		cfg.UserAgent = "node-agent-maintenance"
		c, err := kube.New(cfg)
		if err != nil {
			return nil, err
		}
		return &maintenancecli.Client{
			Kube:    c,
			Dynamic: func() (dynamic.Interface, error) { return dynamic.NewForConfig(cfg) },
			Out:     cmd.OutOrStdout(),
			Err:     cmd.ErrOrStderr(),
		}, nil
	}
	cmd.AddCommand(newMaintenanceStartCommand(client), newMaintenanceStopCommand(client), newMaintenanceStatusCommand(client))
	return cmd
}

// clientFunc builds the maintenance client for a command, once its flags
// are parsed.
type clientFunc func(*cobra.Command) (*maintenancecli.Client, error)

func newMaintenanceStartCommand(client clientFunc) *cobra.Command {
	var o maintenancecli.StartOptions
	var api, podSelector string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "start NODE (--reason TEXT [--wait] | --dry-run)",
		Short: "Request maintenance of NODE: cordon, taint and drain it",
		Long: `start sets the node-agent.io/maintenance annotation on NODE (with --owner
NAME, the owner's own annotation maintenance.node-agent.io/NAME, so that
several teams or controllers each hold a request of their own), or with
--api nodemaintenance creates the NodeMaintenance object nm-NODE (in
nodemaintenance.medik8s.io if the cluster serves it, else in
nodemaintenance.kubevirt.io). The agent running on NODE drains it. With --wait
it shows the progress (pods left, current blocker) until the drain Succeeded or
Failed, and exits non-zero on Failed.`,
		Example: "  node-agent maintenance start node-1 --reason 'BIOS update' --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.API, err = maintenancecli.ParseAPI(api, false); err != nil {
				return err
			}
			c, err := client(cmd)
			if err != nil {
				return err
			}
			o.Node = args[0]
			if dryRun {
				return c.DryRun(cmd.Context(), o.Node, podSelector)
			}
			if o.Reason == "" {
				return errors.New(`required flag "reason" not set: say why the node goes into maintenance`)
			}
			return c.Start(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Reason, "reason", "", "Why the node goes into maintenance; shown in its status and Events (required, except with --dry-run).")
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "Show progress and wait until the drain Succeeded (exit 0) or Failed (exit 1).")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 0, "With --wait, give up waiting after this long (the maintenance goes on). 0 waits for ever.")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Change nothing: list the pods a drain would evict now, those it would skip, and the PodDisruptionBudgets that would block it; where the cluster runs KubeVirt, each VM on the node and its way off it (the nodes that could take it, or why none can).")
	cmd.Flags().StringVar(&podSelector, "drain-pod-selector", "", "With --dry-run, the agent's drain.podSelector, if it has one.")
	cmd.Flags().StringVar(&api, "api", string(maintenancecli.APIAnnotation), "Request maintenance with the annotation node-agent.io/maintenance (annotation) or a NodeMaintenance object (nodemaintenance).")
	cmd.Flags().StringVar(&o.Owner, "owner", "", "Request as this owner (a team or controller): sets maintenance.node-agent.io/OWNER instead of node-agent.io/maintenance; the node stays in maintenance until every requester has ended. With --api annotation only.")
	return cmd
}

func newMaintenanceStopCommand(client clientFunc) *cobra.Command {
	var o maintenancecli.StopOptions
	var api string
	cmd := &cobra.Command{
		Use:   "stop NODE [--wait]",
		Short: "End the maintenance of NODE: stop evicting, undo the agent's cordon and taint",
		Long: `stop removes the node-agent.io/maintenance annotation from NODE (with --owner
NAME, only that owner's maintenance.node-agent.io/NAME), or with --api
nodemaintenance deletes every NodeMaintenance object that names NODE. The node
leaves maintenance once no requester asks for it any longer; while others do,
an Event on the Node says who ended and who still holds it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.API, err = maintenancecli.ParseAPI(api, false); err != nil {
				return err
			}
			c, err := client(cmd)
			if err != nil {
				return err
			}
			o.Node = args[0]
			return c.Stop(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "Wait until the agent has undone its changes.")
	cmd.Flags().StringVar(&api, "api", string(maintenancecli.APIAnnotation), "End the maintenance requested with the annotation (annotation) or with NodeMaintenance objects (nodemaintenance).")
	cmd.Flags().StringVar(&o.Owner, "owner", "", "End only this owner's request (maintenance.node-agent.io/OWNER); with --wait, wait until the agent has seen it end. With --api annotation only.")
	return cmd
}

func newMaintenanceStatusCommand(client clientFunc) *cobra.Command {
	var api, slotsNamespace string
	cmd := &cobra.Command{
		Use:   "status [NODE]",
		Short: "Show the maintenance status of NODE, or of every node in maintenance",
		Long: `status shows, for NODE or for every node in maintenance, the status the agent
keeps on the Node (the annotation API) and the NodeMaintenance objects with
their status. A NodeMaintenance object whose node does not exist is listed
with a note: no agent serves it, so it stays without status until deleted.
With one NODE, it also shows the node's reboot (the RebootRequired condition;
see node-agent reboot status) when a reboot controller reports on it, and
what its maintenance waits for: a gate and its answer (as the agent reports
it), its drain slot request with the coordinator's answer and its place among
the requests queued, the nodes holding drain slots and for how long (the slot
Leases in --slots-namespace), and the pods whose eviction a
PodDisruptionBudget or another answer refuses, with the budget.

REQUESTED is the annotation's reason, or its value followed by (refused) when
the agent refuses it (such as false): nothing changes on the node for it. Text
from the cluster is shown with control characters escaped (\n, \x1b, \u202e,
and \\ for a backslash), so each node keeps one row.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := maintenancecli.ParseAPI(api, true)
			if err != nil {
				return err
			}
			c, err := client(cmd)
			if err != nil {
				return err
			}
			c.SlotsNamespace = slotsNamespace
			return c.Status(cmd.Context(), strings.Join(args, ""), a) // cobra.MaximumNArgs(1)
		},
	}
	cmd.Flags().StringVar(&api, "api", "", "Show only the annotation API (annotation) or only NodeMaintenance objects (nodemaintenance). Default: both.")
	cmd.Flags().StringVar(&slotsNamespace, "slots-namespace", config.Default().Slots.Namespace, "Namespace of the slot Leases (slots.namespace), whose holders status NODE lists.")
	return cmd
}
