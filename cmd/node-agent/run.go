package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/selfdrain"
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

SIGTERM or SIGINT stops it cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile != "" {
				loaded, err := config.Load(configFile, config.Default(), cmd.Flags())
				if err != nil {
					return err
				}
				if loaded.NodeName == "" {
					loaded.NodeName = os.Getenv("NODE_NAME")
				}
				cfg = loaded
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			logger, err := agent.NewLogger(cmd.ErrOrStderr(), cfg.LogFormat, cfg.LogLevel)
			if err != nil {
				return err
			}
			restCfg, err := restConfig(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			restCfg.UserAgent = "node-agent/" + cfg.NodeName
			restCfg.QPS, restCfg.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
			client, err := kubernetes.NewForConfig(restCfg)
			if err != nil {
				return err
			}
			a, err := agent.New(cfg.NodeName,
				agent.WithKubernetesClient(client),
				agent.WithLogger(logger),
				agent.WithMetricsAddress(cfg.MetricsBindAddress),
				agent.WithHealthAddress(cfg.HealthProbeBindAddress),
				agent.WithComponent(selfDrainComponent(cfg.Drain)),
			)
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "YAML file with the same keys as the flags (see docs/configuration.md).")
	cfg.AddFlags(cmd.Flags())
	return cmd
}

// selfDrainComponent wires the maintenance-annotation trigger.
func selfDrainComponent(cfg config.DrainConfig) agent.ComponentFactory {
	return func(d agent.Deps) (agent.Component, error) {
		m := selfdrain.NewMetrics(d.Registry)
		engine := selfdrain.NewEngine(d.Client, d.NodeName, cfg, d.Logger.With("component", "selfdrain"), d.Clock, d.Recorder, m)
		slots := &selfdrain.Slots{
			Client: d.Client, Namespace: cfg.LeaseNamespace, Identity: d.NodeName, Max: cfg.MaxConcurrentNodes,
			LeaseDuration: 30 * time.Second, PollInterval: 2 * time.Second, Clock: d.Clock, Logger: engine.Logger,
		}
		return selfdrain.NewController(engine, slots), nil
	}
}

// restConfig loads a kubeconfig file, or the in-cluster service account when
// path is empty.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, errorf("no --kubeconfig given and not running in a cluster: %v", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, errorf("kubeconfig %s: %v", path, err)
	}
	return c, nil
}
