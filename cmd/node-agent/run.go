package main

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/pkg/podaccess"
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
			restCfg, err := kube.RESTConfig(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			restCfg.UserAgent = "node-agent/" + cfg.NodeName
			restCfg.QPS, restCfg.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
			client, err := kube.New(restCfg)
			if err != nil {
				return err
			}
			// Pods of this node are reached as the node itself
			// (pkg/podaccess): the ServiceAccount has no grant on pods.
			podClient, err := kube.New(podaccess.NodeConfig(restCfg, cfg.NodeName))
			if err != nil {
				return err
			}
			opts := []agent.Option{
				agent.WithKubernetesClient(client),
				agent.WithLogger(logger),
				agent.WithMetricsAddress(cfg.MetricsBindAddress),
				agent.WithHealthAddress(cfg.HealthProbeBindAddress),
			}
			var reload func(config.Config)
			if cfg.Labeller.Enabled {
				var opt agent.Option
				opt, reload = labellerComponent(cfg)
				opts = append(opts, opt)
			}
			var dyn dynamic.Interface
			if cfg.Maintenance.NodeMaintenance {
				if dyn, err = dynamic.NewForConfig(restCfg); err != nil {
					return err
				}
			}
			opts = append(opts, drainComponents(cfg, dyn, podClient)...)
			if configFile != "" {
				opts = append(opts, agent.WithComponent(configWatcher(configFile, cfg, cmd.Flags(), reload)))
			}
			a, err := agent.New(cfg.NodeName, opts...)
			if err != nil {
				return err
			}
			err = a.Run(cmd.Context())
			// libvirt's embedded driver starts its QEMU probes daemonized;
			// stopped mid-discovery, the agent would leave them running.
			if n := hostcpu.KillProbes(hostcpu.EmbedRoot(cfg.Labeller.LibvirtURI, cfg.StateDir)); n > 0 {
				logger.Info("Stopped QEMU capability probes left by the embedded libvirt", "count", n)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "YAML file with the same keys as the flags (see docs/configuration.md).")
	cfg.AddFlags(cmd.Flags())
	return cmd
}

// labellerComponent wires CPU discovery and labelling. Each discovery runs
// in the discovery helper (cmd/node-agent-discover), so libvirt is never
// loaded into the daemon. The returned function hands the component a
// reloaded configuration.
func labellerComponent(cfg config.Config) (agent.Option, func(config.Config)) {
	var ctrl *labeller.Controller
	opt := agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		log := d.Logger.With("component", "hostcpu")
		discover := func(ctx context.Context, lc config.LabellerConfig) (*hostcpu.HostCPU, error) {
			r, err := discoveryRunner(lc, cfg.StateDir, log)
			if err != nil {
				return nil, err
			}
			return r.Discover(ctx, discoveryRequest(lc, cfg.StateDir, cfg.LogLevel))
		}
		c, err := labeller.NewController(labeller.Options{
			Client: d.Client, NodeName: d.NodeName, Config: cfg.Labeller, Discover: discover,
			Logger: d.Logger.With("component", "labeller"), Clock: d.Clock, Recorder: d.Recorder,
			Metrics: labeller.NewMetrics(d.Registry),
		})
		ctrl = c
		return c, err
	})
	return opt, func(next config.Config) {
		if ctrl != nil {
			ctrl.SetConfig(next.Labeller)
		}
	}
}

// configWatcher reloads the --config file when it changes.
func configWatcher(path string, current config.Config, flags *pflag.FlagSet, apply func(config.Config)) agent.ComponentFactory {
	return func(d agent.Deps) (agent.Component, error) {
		w := &config.Watcher{
			Path: path, Current: current, Flags: flags, Clock: d.Clock, Interval: 2 * time.Second,
			Logger: d.Logger.With("component", "config"),
			OnChange: func(next config.Config) {
				if apply != nil {
					apply(next)
				}
			},
			OnInvalid: func(err error) {
				d.Recorder.Eventf(&corev1.ObjectReference{Kind: "Node", Name: d.NodeName, UID: types.UID(d.NodeName)},
					corev1.EventTypeWarning, "ConfigReloadRefused", "Configuration %s refused, the last good one stays in force: %v", path, err)
			},
		}
		return component{"config", w.Run}, nil
	}
}

// drainComponents wires the maintenance requests (the annotation and, when
// maintenance.nodeMaintenance is on, NodeMaintenance objects read through
// dyn) and, when enabled, the shutdown guard, which share one drain engine.
// podClient impersonates the node; the engine reaches the node's pods
// through it, or through the ServiceAccount's own grant where the cluster
// refuses the impersonation (pkg/podaccess).
func drainComponents(cfg config.Config, dyn dynamic.Interface, podClient kube.Interface) []agent.Option {
	var ctrl *selfdrain.Controller
	// ownReboot is set by the reboot coordinator just before it asks
	// logind to reboot: the shutdown guard then lets the host go at once,
	// since the coordinator drained the node already (its own delay lock
	// must not stall its own reboot).
	ownReboot := new(atomic.Bool)
	var slots *selfdrain.Slots
	opts := []agent.Option{agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		m := selfdrain.NewMetrics(d.Registry)
		access := &podaccess.Reporter{
			Prober:  podaccess.Prober{Node: podClient, Own: d.Client, NodeName: d.NodeName},
			Logger:  d.Logger.With("component", "podaccess"),
			Metrics: podaccess.NewMetrics(d.Registry),
		}
		// Say at start, once, how the pods will be reached; every drain
		// asks again before it begins. An apiserver that cannot be asked
		// now is asked then.
		probeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := access.Check(probeCtx); err != nil {
			d.Logger.Warn("Could not tell yet how this node's pods are reached; asking again before a drain", "component", "podaccess", "err", err)
		}
		cancel()
		engine := selfdrain.NewEngine(selfdrain.EngineOptions{
			Client: d.Client, NodeName: d.NodeName, Config: cfg.Drain,
			Logger: d.Logger.With("component", "selfdrain"), Clock: d.Clock, Recorder: d.Recorder, Metrics: m,
			PodAccess: access.Check,
		})
		slots = &selfdrain.Slots{
			Client: d.Client, Namespace: cfg.Drain.LeaseNamespace, Identity: d.NodeName, Max: cfg.Drain.MaxConcurrentNodes,
			LeaseDuration: 30 * time.Second, PollInterval: 2 * time.Second, Clock: d.Clock, Logger: engine.Logger,
		}
		var nm *selfdrain.NodeMaintenanceSource
		if dyn != nil {
			nm = &selfdrain.NodeMaintenanceSource{
				Client: dyn, Discovery: d.Client.Discovery(), NodeName: d.NodeName,
				Logger: engine.Logger, Clock: d.Clock, RecheckInterval: time.Minute,
			}
		}
		co := selfdrain.ControllerOptions{Engine: engine, Slots: slots, NodeMaintenance: nm}
		if cfg.Reboot.Enabled {
			co.RebootDrain = rebootDrainRequest
		}
		ctrl = selfdrain.NewController(co)
		return ctrl, nil
	})}
	if cfg.Reboot.Enabled {
		opts = append(opts, rebootComponent(cfg, podClient, func() *selfdrain.Slots { return slots }, ownReboot))
	}
	if !cfg.Shutdown.Enabled {
		return opts
	}
	return append(opts, agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		// The guard adds its own component key.
		logger := d.Logger
		g, err := shutdown.NewGuard(shutdown.GuardOptions{
			Connect: func(ctx context.Context) (shutdown.Logind, error) {
				return shutdown.Connect(ctx, cfg.Shutdown.SystemBusAddress)
			},
			Drainer:            shutdownDrainer(ctrl, ownReboot),
			DrainBudget:        cfg.Shutdown.DrainBudget.Duration,
			SafetyMargin:       cfg.Shutdown.SafetyMargin.Duration,
			ManageLogindConfig: cfg.Shutdown.ManageLogindConfig,
			LogindDropInDir:    cfg.Shutdown.LogindDropInDir,
			Why:                "Draining node " + d.NodeName + " (VMs live-migrate, pods are evicted) before the host goes down",
			Clock:              d.Clock,
			Logger:             logger,
			Metrics:            shutdown.NewMetrics(d.Registry),
			OnStatus: func(s shutdown.Status) {
				detail := string(s.State)
				if s.Message != "" {
					detail += ": " + s.Message
				}
				d.Health.SetDetail("shutdown-guard", detail)
			},
		})
		if err != nil {
			return nil, err
		}
		return component{"shutdown", g.Run}, nil
	}))
}

// shutdownDrainer adapts the maintenance controller to the shutdown guard:
// the guard hands it the shutdown, and gives the node back after a
// cancelled one.
func shutdownDrainer(ctrl *selfdrain.Controller, ownReboot *atomic.Bool) shutdown.Drainer {
	return shutdown.DrainerFuncs{
		DrainFunc: func(ctx context.Context, deadline time.Time) (shutdown.Result, error) {
			if ownReboot.Load() {
				return shutdown.Result{Complete: true, Message: "the reboot coordinator drained the node before it asked for this reboot"}, nil
			}
			r, err := ctrl.DrainForShutdown(ctx, deadline)
			return shutdown.Result{Complete: r.Complete, Message: r.Message}, err
		},
		UndoFunc: ctrl.ShutdownCancelled,
	}
}

// component makes an agent component of a loop that needs no NodeView (the
// shutdown guard, the config file watcher), so their packages need not
// import pkg/agent.
type component struct {
	name string
	run  func(context.Context) error
}

func (c component) Name() string { return c.name }

func (c component) Run(ctx context.Context, _ agent.NodeView) error { return c.run(ctx) }
