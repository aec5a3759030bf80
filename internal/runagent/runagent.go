// Package runagent assembles `node-agent run`: the Kubernetes clients, the
// labeller with its discovery helper and the KubeVirt CR's watcher, the
// maintenance controller with its
// drain slots, the reboot controller, the shutdown guard and the --config
// watcher, each a component of one pkg/agent Agent for one Node.
//
// It owns only the wiring: it makes the clients, hands each package what it
// takes, and connects packages through the functions of pkg/maintenance; every
// rule lives in a package with its tests. It is kept out of cmd/node-agent
// so that the fleet benchmark (test/scale) runs many agents in one process
// with exactly the code `node-agent run` runs.
package runagent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/confinement"
	"github.com/node-agent/node-agent/pkg/evictionrequest"
	"github.com/node-agent/node-agent/pkg/hooks"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/hostcpu/subprocess"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kubevirtcr"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/memrelease"
	"github.com/node-agent/node-agent/pkg/metrics"
	"github.com/node-agent/node-agent/pkg/notify"
	"github.com/node-agent/node-agent/pkg/podaccess"
	"github.com/node-agent/node-agent/pkg/reboot"
	rebootsystemd "github.com/node-agent/node-agent/pkg/reboot/systemd"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/shutdown"
	"github.com/node-agent/node-agent/pkg/silence"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/pkg/vmdrain"
	vmspec "github.com/node-agent/node-agent/pkg/vmdrain/spec"
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
	// ReleaseStartupMemory adds the component that gives back, once, the
	// memory only start-up used (pkg/memrelease). `node-agent run` sets it
	// unless $NODE_AGENT_RELEASE_STARTUP_MEMORY is false; the fleet
	// benchmark, whose agents share one process, leaves it off.
	ReleaseStartupMemory bool
}

// New builds the agent `node-agent run` runs for o.Config.NodeName. It
// makes the clients but contacts nothing: the components are built when the
// agent runs (agent.Agent.Build), and only their Run reaches the apiserver,
// the host and the system bus.
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
	ids, err := podaccess.NewIdentities(restCfg, cfg.NodeName, o.Logger.With("node", cfg.NodeName, "component", "podaccess"))
	if err != nil {
		return nil, err
	}
	w := &wiring{cfg: cfg, discover: o.Discover, configFile: o.ConfigFile, flags: o.Flags, releaseMemory: o.ReleaseStartupMemory,
		podClient: ids.Node, serviceAccount: ids.ServiceAccount,
		vmClient: kube.WithCachedDiscovery(ids.ServiceAccount, kube.DiscoveryTTL, nil)}
	if w.evictionRequests, err = evictionrequest.NewAPI(ids.NodeREST); err != nil {
		return nil, err
	}
	client := ids.OwnNode
	// NodeMaintenance objects, the KubeVirt CR and VMs are read through it.
	if w.dyn, err = dynamic.NewForConfig(restCfg); err != nil {
		return nil, err
	}
	// One read of the own Node before it is watched: a refusal to the node
	// falls back to the ServiceAccount now, and one to both ends the agent
	// with the missing right named (pkg/podaccess decides).
	nodes, log := client, o.Logger.With("node", cfg.NodeName, "component", "podaccess")
	check := func(ctx context.Context) error {
		reader, err := podaccess.CheckOwnNode(ctx, nodes, cfg.NodeName)
		if err == nil {
			log.Info("Own Node read", "identity", reader)
		}
		return err
	}
	opts := []agent.Option{
		agent.WithStartCheck(check),
		agent.WithKubernetesClient(client),
		agent.WithLogger(o.Logger),
		agent.WithMetricsAddress(cfg.MetricsBindAddress),
		agent.WithHealthAddress(cfg.HealthProbeBindAddress),
		agent.WithComponents(w.components),
	}
	opts = append(opts, o.AgentOptions...)
	return agent.New(cfg.NodeName, opts...)
}

// Run builds the agent of o (New) and runs it until ctx ends. libvirt's
// embedded driver starts its QEMU probes daemonized: an agent stopped
// mid-discovery would leave them running, so Run stops them after.
func Run(ctx context.Context, o Options) error {
	a, err := New(o)
	if err != nil {
		return err
	}
	err = a.Run(ctx)
	if n := hostcpu.KillProbes(hostcpu.EmbedRoot(o.Config.Labeller.LibvirtURI, o.Config.StateDir)); n > 0 && o.Logger != nil {
		o.Logger.Info("Stopped QEMU capability probes left by the embedded libvirt", "count", n)
	}
	return err
}

// wiring is what the components of one agent are built from.
type wiring struct {
	cfg config.Config
	// podClient impersonates the node (podaccess.NodeConfig).
	podClient kube.Interface
	// serviceAccount is the ServiceAccount's own client, with no read made
	// as the node: for lists of every Node.
	serviceAccount kube.Interface
	// vmClient is serviceAccount whose discovery answers are kept for
	// kube.DiscoveryTTL: whether KubeVirt is installed is asked once per
	// interval, not at every VM check of every maintenance.
	vmClient kube.Interface
	// vms is the one check of the node's VMs (vmGate).
	vms *maintenance.VMGate
	// evictionRequests is the EvictionRequest API as the node.
	evictionRequests evictionrequest.API
	// dyn reads NodeMaintenance objects, the KubeVirt CR and the VMs.
	dyn        dynamic.Interface
	discover   labeller.DiscoverFunc
	configFile string
	flags      *pflag.FlagSet
	// releaseMemory adds the memrelease component.
	releaseMemory bool
	// waitBound is registered once and shared by the components with a
	// bounded wait (waitBounds).
	waitBound *metrics.WaitBound
}

// waitBounds is the one node_agent_wait_bound_* collector on reg.
func (w *wiring) waitBounds(reg prometheus.Registerer) *metrics.WaitBound {
	if w.waitBound == nil {
		w.waitBound = metrics.NewWaitBound(reg)
	}
	return w.waitBound
}

// components builds every component of the agent: the labeller, the pod
// access report, the maintenance controller, the reboot controller, the
// shutdown guard and the --config watcher, each when configured. The last
// three share the drain controller, the pod access and the own-reboot mark
// built here, and nothing else.
func (w *wiring) components(d agent.Deps) ([]agent.Component, error) {
	var out []agent.Component
	// Notifications follow the Events every component records on the Node.
	if n, err := w.notifier(d); err != nil {
		return nil, err
	} else if n != nil {
		d.Recorder = notify.Recorder(d.Recorder, n, d.NodeName)
		out = append(out, component{n.Name(), n.Run})
	}
	var lab *labeller.Controller
	if w.cfg.Labeller.Enabled {
		c, err := w.labeller(d)
		if err != nil {
			return nil, err
		}
		lab = c
		out = append(out, c)
	}
	podaccess.RegisterReaderMetric(d.Registry, d.Client)
	access := &podaccess.Reporter{
		Prober:  podaccess.Prober{Node: w.podClient, Own: d.Client, NodeName: d.NodeName},
		Logger:  d.Logger.With("component", "podaccess"),
		Metrics: podaccess.NewMetrics(d.Registry),
		Reuse:   podaccess.ReuseNodeMode,
	}
	out = append(out, component{"podaccess", access.Run})
	confined := &confinement.Checker{Client: d.Client, NodeName: d.NodeName, Logger: d.Logger.With("component", "confinement"),
		Recorder: d.Recorder, Gauge: confinement.NewGauge(d.Registry)}
	out = append(out, component{confined.Name(), confined.Run})
	// One requester asks for the drain slots of both purposes, so the
	// node asks for one slot at a time and never adopts the other
	// purpose's slot.
	requester := slots.NewRequester(d.Client, d.NodeName, w.cfg.Slots.HeartbeatBound.Duration, d.Clock, d.Logger.With("component", "slots"))
	out = append(out, requester)
	gates := maintenance.GatesFor(w.cfg.Maintenance, w.vmGate(d), d.Clock, w.gateBound(d))
	hk := w.hooks(d)
	ctrl := w.maintenance(d, access, requester, gates, hk)
	out = append(out, ctrl)
	own := new(maintenance.OwnReboot)
	if w.cfg.Reboot.Enabled {
		c, err := w.reboot(d, access, requester, own, hk)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if w.cfg.Shutdown.Enabled {
		c, err := w.shutdownGuard(d, own.Drainer(maintenance.ShutdownDrainer(ctrl)))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if sc := w.cfg.Silences; sc.AlertmanagerURL != "" {
		matchers := make([]silence.Matcher, len(sc.Matchers))
		for i, m := range sc.Matchers {
			matchers[i] = silence.Matcher{Name: m.Name, Value: m.Value, IsRegex: m.IsRegex, IsEqual: !m.Negate}
		}
		out = append(out, &silence.Keeper{
			URL: sc.AlertmanagerURL, Node: d.NodeName, NodeLabel: sc.NodeLabel, Matchers: matchers, Duration: sc.Duration.Duration,
			Disrupted: maintenance.Disrupted, Client: &http.Client{}, Clock: d.Clock,
			Logger: d.Logger.With("component", "silence"), Metrics: silence.NewMetrics(d.Registry),
		})
	}
	if w.configFile != "" {
		out = append(out, w.configWatcher(d, lab))
	}
	if w.releaseMemory {
		r := &memrelease.Releaser{Delay: memrelease.DefaultDelay, Clock: d.Clock, Logger: d.Logger.With("component", "memrelease")}
		out = append(out, component{r.Name(), r.Run})
	}
	return out, nil
}

// notifier builds the webhooks of notifications.webhooks
// (notify.WebhooksFrom); nil when there are none.
func (w *wiring) notifier(d agent.Deps) (*notify.Notifier, error) {
	nc := w.cfg.Notifications
	if len(nc.Webhooks) == 0 {
		return nil, nil
	}
	hooks, err := notify.WebhooksFrom(nc)
	if err != nil {
		return nil, err
	}
	return notify.New(notify.Options{
		Webhooks: hooks, Timeout: nc.Timeout.Duration, GiveUpAfter: nc.GiveUpAfter.Duration,
		Logger: d.Logger.With("component", "notify"), Metrics: notify.NewMetrics(d.Registry),
	})
}

// labeller wires CPU discovery and labelling. Each discovery runs in the
// discovery helper (cmd/node-agent-discover), so libvirt is never loaded
// into the daemon; Options.Discover replaces it.
func (w *wiring) labeller(d agent.Deps) (*labeller.Controller, error) {
	discover := w.discover
	if discover == nil {
		log := d.Logger.With("component", "hostcpu")
		discover = func(ctx context.Context, lc config.LabellerConfig) (*hostcpu.HostCPU, error) {
			r, err := DiscoveryRunner(lc, w.cfg.StateDir, log)
			if err != nil {
				return nil, err
			}
			return r.Discover(ctx, DiscoveryRequest(lc, w.cfg.StateDir, w.cfg.LogLevel))
		}
	}
	log := d.Logger.With("component", "labeller")
	kv := &kubevirtcr.Watcher{
		Client: w.dyn, Discovery: d.Client.Discovery(), Logger: log, Clock: d.Clock,
		RecheckInterval: labeller.KubeVirtRecheckInterval,
	}
	return labeller.NewController(labeller.Options{
		Client: d.Client, NodeName: d.NodeName, Config: w.cfg.Labeller, Discover: discover,
		Logger: log, Clock: d.Clock, Recorder: d.Recorder,
		Metrics: labeller.NewMetrics(d.Registry),
		WatchKubeVirt: func(ctx context.Context, report func(labeller.KubeVirtState)) {
			kv.Run(ctx, func(s kubevirtcr.State) { report(labeller.KubeVirtStateOf(s)) })
		},
	})
}

// readVMs reads the node's VMs and their ways off it.
func (w *wiring) readVMs(d agent.Deps) func(ctx context.Context) (vmdrain.Report, error) {
	return func(ctx context.Context) (vmdrain.Report, error) {
		return vmdrain.Read(ctx, w.vmClient, w.dyn, d.NodeName, w.podClient)
	}
}

// vmGate wires the check of the node's VMs before a maintenance
// (drain.vmWithoutTarget) to the cluster and to the Node's Events.
// One gate serves the maintenance, the reboot controller and the drain's
// VM progress, which takes on the gate's last plan (VMGate.Plan).
func (w *wiring) vmGate(d agent.Deps) *maintenance.VMGate {
	if w.vms != nil {
		return w.vms
	}
	mode, _ := vmspec.ParseMode(w.cfg.Drain.VMWithoutTarget) // validated with the config
	w.vms = &maintenance.VMGate{
		Read: w.readVMs(d),
		Mode: mode, Logger: d.Logger.With("component", "vmdrain"), Now: d.Clock.Now,
		Warn: func(reason, message string) {
			d.Recorder.Event(kube.NodeReference(d.NodeName), corev1.EventTypeWarning, reason, message)
		},
	}
	return w.vms
}

// gateBound wires maintenance.gateBound's decisions to the Node's Events
// and the wait-bound metrics.
func (w *wiring) gateBound(d agent.Deps) maintenance.GateBound {
	mc, wb := w.cfg.Maintenance, w.waitBounds(d.Registry)
	log := d.Logger.With("component", "maintenance-gates")
	return maintenance.GateBound{
		After: mc.GateBound.Duration, Proceed: mc.OnGateBound == config.OnBoundProceed,
		Exceeded: func(decision, message string) {
			wb.Ran(metrics.WaitMaintenanceGates, decision)
			d.Recorder.Event(kube.NodeReference(d.NodeName), corev1.EventTypeWarning, "MaintenanceGateBoundExceeded", message)
			log.Warn("Gates held the maintenance past maintenance.gateBound", "decision", decision, "message", message)
		},
		Held: func(held bool) { wb.Hold(metrics.WaitMaintenanceGates, held) },
	}
}

// hooks wires the lifecycle's hooks (maintenance.hookBound) to the Node's
// Events and the wait-bound metrics.
func (w *wiring) hooks(d agent.Deps) *maintenance.Hooks {
	event := func(typ string) func(reason, message string) {
		return func(reason, message string) {
			d.Recorder.Event(kube.NodeReference(d.NodeName), typ, reason, message)
		}
	}
	warn, wb := event(corev1.EventTypeWarning), w.waitBounds(d.Registry)
	return &maintenance.Hooks{Bound: w.cfg.Maintenance.HookBound.Duration, Clock: d.Clock,
		Warn: func(reason, message string) {
			if reason == hooks.ReasonPassed {
				wb.Ran(metrics.WaitMaintenanceHooks, metrics.DecisionProceed)
			}
			warn(reason, message)
		},
		Told: event(corev1.EventTypeNormal)}
}

// maintenance wires the maintenance requests (the annotation, NodeMaintenance
// objects when maintenance.nodeMaintenance is on, and the reboot
// controller's record when reboot.enabled is on) to the drain engine, which
// reaches the node's pods as access says, with the node's drain slots and
// the gates a maintenance waits for.
func (w *wiring) maintenance(d agent.Deps, access *podaccess.Reporter, drainSlots maintenance.Slots, gates *maintenance.Gates, hk *maintenance.Hooks) *maintenance.Controller {
	cfg := w.cfg
	engine := selfdrain.NewEngine(selfdrain.EngineOptions{
		Client: d.Client, NodeName: d.NodeName, Config: cfg.Drain,
		Logger: d.Logger.With("component", "selfdrain"), Clock: d.Clock, Recorder: d.Recorder, Metrics: selfdrain.NewMetrics(d.Registry),
		PodAccess: access.Check, PodAccessRefused: access.Forget, EvictionRequests: w.evictionRequests,
		VMProgress: maintenance.VMProgress(w.vmGate(d).Plan, func(ctx context.Context) ([]vmdrain.VM, error) {
			return vmdrain.ListOnNode(ctx, w.dyn, d.NodeName)
		}, func(ctx context.Context, namespace, name string) (vmdrain.VM, bool, error) {
			return vmdrain.GetVM(ctx, w.dyn, namespace, name)
		}, d.NodeName, d.Clock.Now, d.Logger.With("component", "vmdrain")),
		CancelVMs: maintenance.CancelVMs(func(ctx context.Context) ([]vmdrain.Cancelled, error) {
			return vmdrain.CancelEvacuations(ctx, w.vmClient.Discovery(), w.dyn, d.NodeName)
		}),
	})
	var nm *maintenance.NodeMaintenanceSource
	if cfg.Maintenance.NodeMaintenance {
		nm = &maintenance.NodeMaintenanceSource{
			Client: w.dyn, Discovery: d.Client.Discovery(), NodeName: d.NodeName,
			Logger: engine.Logger, Clock: d.Clock,
		}
	}
	co := maintenance.ControllerOptions{Engine: engine, Slots: drainSlots, Gates: gates, Hooks: hk, NodeMaintenance: nm}
	if cfg.Reboot.Enabled {
		co.RebootDrain = maintenance.DrainRequest
	}
	return maintenance.NewController(co)
}

// reboot wires the reboot controller (reboot.enabled): its drain is asked
// of the maintenance lifecycle through its record, it asks for drain slots
// through the agent's one requester, lists pods for reboot.blockingPodSelector as
// access says, and reboots through logind with the reboot marked as its own
// for the shutdown guard.
func (w *wiring) reboot(d agent.Deps, access *podaccess.Reporter, drainSlots reboot.Slots, own *maintenance.OwnReboot, hk *maintenance.Hooks) (agent.Component, error) {
	cfg := w.cfg
	rc := cfg.Reboot
	log := d.Logger.With("component", "reboot")
	window, errs := rc.Schedule()
	if len(errs) > 0 {
		return nil, errors.Join(errs...) // Validate checked it already
	}
	need := reboot.NeedChecker{SentinelFile: rc.SentinelFile, SentinelCommand: rc.SentinelCommand}
	if len(rc.SentinelCommand) > 0 {
		need.Runner = &rebootsystemd.Runner{Dial: rebootsystemd.Dial(cfg.Shutdown.SystemBusAddress), Logger: log}
	}
	blockers, err := reboot.BlockerSources(rc, w.vmGate(d), reboot.NodePods{Access: access.Check, Node: d.NodeName})
	if err != nil {
		return nil, err // Validate checked it already
	}
	return reboot.NewController(reboot.ControllerOptions{
		Client: d.Client, NodeName: d.NodeName, Need: need, Window: window, Blockers: blockers,
		LoopBound: rc.LoopBound.Duration, RebootWithoutDrain: rc.RebootWithoutDrain, PreferNoScheduleTaint: rc.PreferNoScheduleTaint,
		CheckInterval: rc.CheckInterval.Duration, SlotHoldBound: rc.SlotHoldBound.Duration, BeforeRebootBound: rc.BeforeRebootBound.Duration,
		BlockerBound: rc.BlockerBound.Duration, ProceedPastBound: rc.OnBlockerBound == config.OnBoundProceed,
		Slots:       drainSlots,
		Rebooter:    own.Rebooter(shutdown.LogindRebooter{Connect: w.connectLogind}),
		Maintenance: hk.Maintenance,
		Clock:       d.Clock, Logger: log, Recorder: d.Recorder,
		Metrics: reboot.NewMetrics(d.Registry), WaitBound: w.waitBounds(d.Registry),
	}), nil
}

// shutdownGuard wires the shutdown guard (shutdown.enabled) to drainer.
func (w *wiring) shutdownGuard(d agent.Deps, drainer shutdown.Drainer) (agent.Component, error) {
	sc := w.cfg.Shutdown
	g, err := shutdown.NewGuard(shutdown.GuardOptions{
		Connect:            w.connectLogind,
		Drainer:            drainer,
		DrainBudget:        sc.DrainBudget.Duration,
		SafetyMargin:       sc.SafetyMargin.Duration,
		ManageLogindConfig: sc.ManageLogindConfig,
		LogindDropInDir:    sc.LogindDropInDir,
		Why:                "Draining node " + d.NodeName + " (VMs live-migrate, pods are evicted) before the host goes down",
		Clock:              d.Clock,
		Logger:             d.Logger, // the guard adds its own component key
		Metrics:            shutdown.NewMetrics(d.Registry),
		OnStatus:           func(s shutdown.Status) { d.Health.SetDetail("shutdown-guard", s.Detail()) },
	})
	if err != nil {
		return nil, err
	}
	return component{"shutdown", g.Run}, nil
}

// connectLogind connects to logind at shutdown.systemBusAddress.
func (w *wiring) connectLogind(ctx context.Context) (shutdown.Logind, error) {
	return shutdown.Connect(ctx, w.cfg.Shutdown.SystemBusAddress)
}

// configWatcher reloads the --config file when it changes, and hands the
// labeller (nil when off) the new configuration.
func (w *wiring) configWatcher(d agent.Deps, lab *labeller.Controller) agent.Component {
	path := w.configFile
	cw := &config.Watcher{
		Path: path, Current: w.cfg, Flags: w.flags, Clock: d.Clock,
		Logger: d.Logger.With("component", "config"),
		OnChange: func(next config.Config) {
			if lab != nil {
				lab.SetConfig(next.Labeller)
			}
		},
		OnInvalid: func(err error) {
			d.Recorder.Eventf(kube.NodeReference(d.NodeName),
				corev1.EventTypeWarning, "ConfigReloadRefused", "Configuration %s refused, the last good one stays in force: %v", path, err)
		},
	}
	return component{"config", cw.Run}
}

// component makes an agent component of a loop that needs no NodeView (the
// pod access report, the shutdown guard, the config file watcher), so their
// packages need not import pkg/agent.
type component struct {
	name string
	run  func(context.Context) error
}

func (c component) Name() string { return c.name }

func (c component) Run(ctx context.Context, _ agent.NodeView) error { return c.run(ctx) }

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
