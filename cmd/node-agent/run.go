package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/shutdown"
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
			opts := append([]agent.Option{
				agent.WithKubernetesClient(client),
				agent.WithLogger(logger),
				agent.WithMetricsAddress(cfg.MetricsBindAddress),
				agent.WithHealthAddress(cfg.HealthProbeBindAddress),
			}, drainComponents(cfg)...)
			a, err := agent.New(cfg.NodeName, opts...)
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

// drainComponents wires the maintenance-annotation trigger and, when enabled,
// the shutdown guard, which share one drain engine.
func drainComponents(cfg config.Config) []agent.Option {
	var ctrl *selfdrain.Controller
	opts := []agent.Option{agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		m := selfdrain.NewMetrics(d.Registry)
		engine := selfdrain.NewEngine(d.Client, d.NodeName, cfg.Drain, d.Logger.With("component", "selfdrain"), d.Clock, d.Recorder, m)
		slots := &selfdrain.Slots{
			Client: d.Client, Namespace: cfg.Drain.LeaseNamespace, Identity: d.NodeName, Max: cfg.Drain.MaxConcurrentNodes,
			LeaseDuration: 30 * time.Second, PollInterval: 2 * time.Second, Clock: d.Clock, Logger: engine.Logger,
		}
		ctrl = selfdrain.NewController(engine, slots)
		return ctrl, nil
	})}
	if !cfg.Shutdown.Enabled {
		return opts
	}
	return append(opts, agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		logger := d.Logger.With("component", "shutdown")
		g, err := shutdown.NewGuard(shutdown.GuardOptions{
			Connect: func(ctx context.Context) (shutdown.Logind, error) {
				return shutdown.Connect(ctx, cfg.Shutdown.SystemBusAddress)
			},
			Drainer:            ctrl.ShutdownDrainer(),
			DrainBudget:        cfg.Shutdown.DrainBudget.Duration,
			SafetyMargin:       cfg.Shutdown.SafetyMargin.Duration,
			ManageLogindConfig: cfg.Shutdown.ManageLogindConfig,
			LogindDropInDir:    cfg.Shutdown.LogindDropInDir,
			Why:                "Draining node " + d.NodeName + " (VMs live-migrate, pods are evicted) before the host goes down",
			Clock:              d.Clock,
			Logger:             logger,
			Registry:           d.Registry,
			OnStatus: func(s shutdown.Status) {
				d.Health.SetDetail("shutdown-guard", fmt.Sprintf("%s: %s", s.State, s.Message))
			},
		})
		if err != nil {
			return nil, err
		}
		return guardComponent{g}, nil
	}))
}

// guardComponent runs the shutdown guard as an agent component.
type guardComponent struct{ g *shutdown.Guard }

func (guardComponent) Name() string { return "shutdown" }

func (c guardComponent) Run(ctx context.Context, _ agent.NodeView) error { return c.g.Run(ctx) }

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
