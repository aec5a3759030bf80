// Package runagent assembles `node-agent run`: the Kubernetes clients, the
// labeller with its discovery helper, the maintenance controller with its
// drain slots, the reboot coordinator, the shutdown guard and the --config
// watcher, each a component of one pkg/agent Agent for one Node.
//
// It owns only the wiring; every part it wires lives in its own package. It
// is kept out of cmd/node-agent so that the fleet benchmark (test/scale) runs
// many agents in one process with exactly the code `node-agent run` runs.
package runagent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/handshake"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/hostcpu/subprocess"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/reboot"
	rebootsystemd "github.com/node-agent/node-agent/pkg/reboot/systemd"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/shutdown"
)

// Options are what one agent is built from.
type Options struct {
	// Config is the validated configuration; Config.NodeName is the Node.
	Config config.Config
	// ConfigFile is the --config file watched for changes; "" watches none.
	ConfigFile string
	// Flags are the command line's flags, which win over the file on a
	// reload as they did at start.
	Flags *pflag.FlagSet
	// REST is the connection to the apiserver. New copies it and sets the
	// user agent, QPS and burst from Config.
	REST *rest.Config
	// Logger is the agent's logger.
	Logger *slog.Logger
	// Discover replaces the discovery helper process. `node-agent run`
	// leaves it nil; the fleet benchmark hands its agents one discovery of
	// the machine they share.
	Discover labeller.DiscoverFunc
	// AgentOptions are added after the ones New makes (tests: a registry,
	// a listen hook).
	AgentOptions []agent.Option
}

// New builds the agent `node-agent run` runs for o.Config.NodeName.
func New(o Options) (*agent.Agent, error) {
	cfg := o.Config
	if o.REST == nil {
		return nil, errors.New("runagent: no connection to the apiserver")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	restCfg := rest.CopyConfig(o.REST)
	restCfg.UserAgent = "node-agent/" + cfg.NodeName
	restCfg.QPS, restCfg.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
	client, err := kube.New(restCfg)
	if err != nil {
		return nil, err
	}
	// Pods of this node are reached as the node itself (pkg/podaccess):
	// the ServiceAccount has no grant on pods.
	podClient, err := kube.New(podaccess.NodeConfig(restCfg, cfg.NodeName))
	if err != nil {
		return nil, err
	}
	opts := []agent.Option{
		agent.WithKubernetesClient(client),
		agent.WithLogger(o.Logger),
		agent.WithMetricsAddress(cfg.MetricsBindAddress),
		agent.WithHealthAddress(cfg.HealthProbeBindAddress),
	}
	var reload func(config.Config)
	if cfg.Labeller.Enabled {
		var opt agent.Option
		opt, reload = labellerComponent(cfg, o.Discover)
		opts = append(opts, opt)
	}
	var dyn dynamic.Interface
	if cfg.Maintenance.NodeMaintenance {
		if dyn, err = dynamic.NewForConfig(restCfg); err != nil {
			return nil, err
		}
	}
	opts = append(opts, drainComponents(cfg, dyn, podClient)...)
	if o.ConfigFile != "" {
		opts = append(opts, agent.WithComponent(configWatcher(o.ConfigFile, cfg, o.Flags, reload)))
	}
	opts = append(opts, o.AgentOptions...)
	return agent.New(cfg.NodeName, opts...)
}

// labellerComponent wires CPU discovery and labelling. Each discovery runs
// in the discovery helper (cmd/node-agent-discover), so libvirt is never
// loaded into the daemon. The returned function hands the component a
// reloaded configuration.
func labellerComponent(cfg config.Config, discover labeller.DiscoverFunc) (agent.Option, func(config.Config)) {
	var ctrl *labeller.Controller
	opt := agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		log := d.Logger.With("component", "hostcpu")
		if discover == nil {
			discover = func(ctx context.Context, lc config.LabellerConfig) (*hostcpu.HostCPU, error) {
				r, err := DiscoveryRunner(lc, cfg.StateDir, log)
				if err != nil {
					return nil, err
				}
				return r.Discover(ctx, DiscoveryRequest(lc, cfg.StateDir, cfg.LogLevel))
			}
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
	ownReboot := new(handshake.OwnReboot)
	var slots *selfdrain.Slots
	var access *podaccess.Reporter
	opts := []agent.Option{agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		m := selfdrain.NewMetrics(d.Registry)
		access = &podaccess.Reporter{
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
			LeaseDuration: 30 * time.Second, PollInterval: 2 * time.Second, TakeJitter: time.Second, Clock: d.Clock, Logger: engine.Logger,
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
			co.RebootDrain = handshake.DrainRequest
		}
		ctrl = selfdrain.NewController(co)
		return ctrl, nil
	})}
	if cfg.Reboot.Enabled {
		opts = append(opts, rebootComponent(cfg, func(ctx context.Context) (podaccess.Access, error) { return access.Check(ctx) },
			func() *selfdrain.Slots { return slots }, ownReboot))
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
			Drainer:            ownReboot.Drainer(handshake.ShutdownDrainer(ctrl)),
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

// component makes an agent component of a loop that needs no NodeView (the
// shutdown guard, the config file watcher), so their packages need not
// import pkg/agent.
type component struct {
	name string
	run  func(context.Context) error
}

func (c component) Name() string { return c.name }

func (c component) Run(ctx context.Context, _ agent.NodeView) error { return c.run(ctx) }

// rebootComponent wires the reboot coordinator (reboot.enabled). It asks
// selfdrain for the drain through its record on the Node (rebootDrainRequest),
// takes the drain slots of the maintenance controller, and reboots through
// logind. podAccess says how the node's pods are listed for
// reboot.blockingPodSelector, as for the drain.
func rebootComponent(cfg config.Config, podAccess func(context.Context) (podaccess.Access, error), slots func() *selfdrain.Slots, ownReboot *handshake.OwnReboot) agent.Option {
	return agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		rc := cfg.Reboot
		window, err := reboot.ParseWindow(rc.Window.Days, rc.Window.Start, rc.Window.End, rc.Window.TimeZone)
		if err != nil {
			return nil, err // Validate checked it already
		}
		need := reboot.NeedChecker{SentinelFile: rc.SentinelFile, SentinelCommand: rc.SentinelCommand}
		if len(rc.SentinelCommand) > 0 {
			need.Runner = &rebootsystemd.Runner{Dial: rebootsystemd.Dial(cfg.Shutdown.SystemBusAddress), Logger: d.Logger.With("component", "reboot")}
		}
		var blockers []reboot.BlockerSource
		if rc.BlockingPodSelector != "" {
			sel, err := labels.Parse(rc.BlockingPodSelector)
			if err != nil {
				return nil, err
			}
			blockers = append(blockers, reboot.PodBlockers{Lister: reboot.NodePods{Access: podAccess, Node: d.NodeName}, Selector: sel})
		}
		if rc.PrometheusURL != "" {
			re, err := reboot.CompileAlertRegexp(rc.BlockingAlertRegexp)
			if err != nil {
				return nil, err
			}
			blockers = append(blockers, reboot.AlertBlockers{URL: rc.PrometheusURL, Match: re, Client: &http.Client{Timeout: 10 * time.Second}})
		}
		return reboot.NewCoordinator(reboot.Options{
			Client: d.Client, NodeName: d.NodeName, Need: need, Window: window, Blockers: blockers,
			LoopBound: rc.LoopBound.Duration, RebootWithoutDrain: rc.RebootWithoutDrain,
			CheckInterval: rc.CheckInterval.Duration, SlotHoldBound: rc.SlotHoldBound.Duration,
			Slots: slotsAdapter{slots},
			Rebooter: ownReboot.Rebooter(shutdown.LogindRebooter{Connect: func(ctx context.Context) (shutdown.Logind, error) {
				return shutdown.Connect(ctx, cfg.Shutdown.SystemBusAddress)
			}}),
			Maintenance: handshake.Maintenance,
			Clock:       d.Clock, Logger: d.Logger.With("component", "reboot"), Recorder: d.Recorder,
			Metrics: reboot.NewMetrics(d.Registry),
		}), nil
	})
}

// slotsAdapter hands the coordinator selfdrain's drain slots; the Slots
// exist once the maintenance component is built, before any component runs.
type slotsAdapter struct{ slots func() *selfdrain.Slots }

func (a slotsAdapter) Acquire(ctx context.Context, onWait func(error)) (reboot.Slot, error) {
	h, err := a.slots().AcquireHeld(ctx, onWait)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// DiscoveryRunner returns the runner of the discovery helper
// (cmd/node-agent-discover, beside this binary; see subprocess.FindHelper)
// for one labeller configuration. Every CPU discovery of `run` and of `labels`
// is a helper process: this binary links no libvirt (TestLinksNoLibvirt).
// A missing helper is an error of the discovery, which the labeller reports
// as it reports any other.
func DiscoveryRunner(lc config.LabellerConfig, stateDir string, log *slog.Logger) (*subprocess.Runner, error) {
	helper, err := subprocess.FindHelper()
	if err != nil {
		return nil, err
	}
	root := hostcpu.EmbedRoot(lc.LibvirtURI, stateDir)
	return &subprocess.Runner{
		Command: []string{helper},
		Timeout: lc.DiscoveryTimeout.Duration,
		Logger:  log,
		AfterKill: func() {
			if n := hostcpu.KillProbes(root); n > 0 {
				log.Info("Stopped QEMU capability probes left by a killed discovery", "count", n)
			}
		},
	}, nil
}

// DiscoveryRequest is what the helper discovers with for lc; logLevel is
// the level of the helper's log on stderr.
func DiscoveryRequest(lc config.LabellerConfig, stateDir, logLevel string) subprocess.Request {
	return subprocess.Request{
		LibvirtURI:   lc.LibvirtURI,
		VirtType:     lc.VirtType,
		StateDir:     stateDir,
		ExpandModels: labeller.Policy{MinCPUModel: lc.MinCPUModel}.ExpandModels(),
		LogLevel:     logLevel,
	}
}
