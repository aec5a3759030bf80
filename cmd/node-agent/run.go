package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/node-agent/node-agent/internal/runagent"
	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/memrelease"
)

func newRunCommand() *cobra.Command {
	cfg := config.Default()
	cfg.NodeName = os.Getenv("NODE_NAME")
	var configFile string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent for this node (the DaemonSet's command)",
		Long: `run starts the agent for one Node, named by --node-name or $NODE_NAME.

It watches only that Node, serves Prometheus metrics on --metrics-bind-address
and /healthz and /readyz on --health-probe-bind-address. /readyz turns ready
once the agent has synced its own Node.

Every flag is also a key of the --config YAML file (flag --drain-timeout is
key drain.timeout, --min-cpu-model is labeller.minCPUModel, and so on). A flag
given on the command line wins over the file. An unknown key or a bad value
stops the agent at start with a message naming the key.

Thirty seconds after start it gives back, once, the memory only start-up
used: the Go heap's free pages, and the pages of its binary that start-up
read and an idle agent does not touch again. Set
NODE_AGENT_RELEASE_STARTUP_MEMORY=false to keep them. Unless GOGC is set,
the garbage collector runs at GOGC=50.

SIGTERM or SIGINT stops it cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var deprecated []config.Deprecation
			if configFile != "" {
				loaded, old, err := config.Load(configFile, config.Default(), cmd.Flags())
				if err != nil {
					return err
				}
				if loaded.NodeName == "" {
					loaded.NodeName = os.Getenv("NODE_NAME")
				}
				cfg, deprecated = loaded, old
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			logger, err := agent.NewLogger(cmd.ErrOrStderr(), cfg.LogFormat, cfg.LogLevel)
			if err != nil {
				return err
			}
			config.LogDeprecations(logger, configFile, deprecated)
			memrelease.SetGCPercent(os.Getenv)
			restCfg, err := kube.RESTConfig(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			return runagent.Run(cmd.Context(), runagent.Options{
				Config: cfg, ConfigFile: configFile, Flags: cmd.Flags(), REST: restCfg, Logger: logger,
				ReleaseStartupMemory: memrelease.Enabled(os.Getenv),
			})
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "YAML file with the same keys as the flags (see docs/configuration.md), except the keys that choose an identity, a credential, a path, a bus or a command (--kubeconfig, --node-name, the bind addresses, --state-dir, --libvirt-uri, --shutdown-system-bus-address, --shutdown-manage-logind-config, --shutdown-logind-drop-in-dir, --reboot-sentinel-file, --reboot-sentinel-command, a webhook's urlFile): those are flags only, and a file that sets one is refused.")
	cfg.AddFlags(cmd.Flags())
	return cmd
}
