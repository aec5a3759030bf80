package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/node-agent/node-agent/pkg/version"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "node-agent",
		Short: "Per-node agent for Kubernetes clusters that run virtual machines",
		Long: `node-agent runs on every node of a KubeVirt cluster (as a DaemonSet) and
changes only the Node it runs on:

  - it labels the Node with the CPU models and features this host can offer
    to virtual machines, with the same keys as KubeVirt's node-labeller;
  - it drains the Node on request (the node-agent.io/maintenance annotation),
    respecting PodDisruptionBudgets and letting VMs live-migrate;
  - it holds a systemd-logind delay lock and drains the Node before the host
    powers off or reboots, then uncordons it after the reboot;
  - with reboot.enabled, it reboots the Node when the host needs it, inside a
    window, one drain slot at a time across the cluster, drained first.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCommand(), newLabelsCommand(), newCPUBaselineCommand(), newMaintenanceCommand(), newRebootCommand(), newVersionCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version.Get()
			switch output {
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			case "text":
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "node-agent %s (commit %s, %s)\n", v.Version, v.Commit, v.GoVersion)
				return err
			default:
				return fmt.Errorf("--output %q: must be text or json", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "Output format: text or json.")
	return cmd
}
