package main

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/baseline"
	"github.com/node-agent/node-agent/pkg/kube"
)

func newCPUBaselineCommand() *cobra.Command {
	var selector, output string
	var flags clientFlags
	cmd := &cobra.Command{
		Use:   "cpu-baseline [--selector LABELSELECTOR]",
		Short: "Print the newest CPU model every selected node can run, and what holds newer ones back",
		Long: `cpu-baseline reads the CPU labels of the selected Nodes (KubeVirt's keys,
written by node-agent or by KubeVirt's own labeller) and prints:

  - the newest CPU model every selected node can run (cpu-model.node.kubevirt.io).
    A VM with that model in spec.domain.cpu.model can live-migrate to any of
    these nodes: one model for a pool, as VMware EVC gives a cluster;
  - the CPU features every node shares (cpu-feature.node.kubevirt.io);
  - for each newer model, the nodes that cannot run it.

"Newest" follows a built-in order of libvirt's x86 model families (Penryn <
Nehalem < ... < Icelake-Server < SapphireRapids; Opteron_G1 < ... < EPYC-Genoa),
with -IBRS above and -noTSX below the plain model and -vN by N. Models outside
it (s390x, arm) are listed but never picked.

The cpu-feature labels leave out the features of the minimum CPU model when
node-agent's labeller.minCPUModel is set (default Penryn); set it to "" for
the complete list. Nodes without any cpu-model label hold back every model.

It only reads Nodes (get/list); it changes nothing.`,
		Example: `  node-agent cpu-baseline
  node-agent cpu-baseline --selector node-role.kubernetes.io/worker= -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case baseline.FormatTable, baseline.FormatJSON, baseline.FormatYAML:
			default:
				return fmt.Errorf("--output %q: must be table, json or yaml", output)
			}
			if _, err := metav1.ParseToLabelSelector(selector); selector != "" && err != nil {
				return fmt.Errorf("--selector %q: %w", selector, err)
			}
			cfg, err := flags.restConfig()
			if err != nil {
				return err
			}
			cfg.UserAgent = "node-agent-cpu-baseline"
			c, err := kube.New(cfg)
			if err != nil {
				return err
			}
			r, err := baseline.FromCluster(cmd.Context(), c, selector)
			if err != nil {
				return err
			}
			return r.Write(cmd.OutOrStdout(), output)
		},
	}
	fs := cmd.Flags()
	flags.add(fs)
	fs.StringVarP(&selector, "selector", "l", "", "Label `selector` of the Nodes to consider, as kubectl's (default: every Node).")
	fs.StringVarP(&output, "output", "o", "table", "Output `format`: table, json or yaml.")
	return cmd
}
