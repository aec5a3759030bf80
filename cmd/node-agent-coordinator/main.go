// Command node-agent-coordinator decides, for the whole cluster, which
// nodes may drain now: it answers the agents' requests for drain slots. It
// runs as a Deployment of two replicas with leader election; this package
// only parses options and calls internal/runcoordinator.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/node-agent/node-agent/internal/runcoordinator"
	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/version"
)

const usage = `node-agent-coordinator grants the cluster's drain slots.

Each node-agent asks for a drain slot on its own Node (the annotation
node-agent.io/drain-slot-request) before it drains, for a maintenance or a
coordinated reboot. This coordinator alone answers (the annotation
node-agent.io/drain-slot, which no agent may write) and holds the slot
Leases (node-agent-drain-slot-<node> in slots.namespace):

  - first come, first served, within slots.limit for the whole cluster
    and within each of slots.pools, in the order a coordinator saw
    the requests (never the time a request states);
  - a reboot slot is refused while reboots are off (reboot.enabled, or
    --reboot-enabled);
  - a holder whose heartbeat stops for longer than slots.heartbeatBound (a
    rebooting host: reboot.slotHoldBound), whose Node is deleted, or that
    holds past drain.timeout and a margin (slots.heartbeatBound for a
    maintenance; reboot.slotHoldBound and 15 minutes for a reboot) loses
    its slot, and the next node goes on.

It reads the agents' configuration file (--config, the node-agent-config
ConfigMap); a changed file takes effect at the next restart. Of several
replicas one leads (a Lease named --leader-election-name); the others wait.
/readyz passes only on the one that leads and has read every Node and the
slot Leases; /readyz/election on every replica that has reached the
election Lease; /healthz on every replica that runs.

Usage:
  node-agent-coordinator [flags]

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "node-agent-coordinator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("node-agent-coordinator", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, usage)
		fs.PrintDefaults()
	}
	var (
		configFile, kubeconfig, identity, electionName string
		metricsAddr, healthAddr, logFormat, logLevel   string
		showVersion, rebootEnabled                     bool
	)
	host, _ := os.Hostname()
	fs.StringVar(&configFile, "config", "", "The agents' YAML configuration file (the node-agent-config ConfigMap); its drain and reboot keys are read. Empty: the defaults.")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path of a kubeconfig file. Empty: $KUBECONFIG, then ~/.kube/config, then the pod's service account.")
	fs.StringVar(&identity, "identity", firstNonEmpty(os.Getenv("POD_NAME"), host), "This replica's name in the leader election. Defaults to $POD_NAME, then the host name.")
	fs.StringVar(&electionName, "leader-election-name", "node-agent-coordinator", "Name of the leader election Lease, in slots.namespace.")
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":9466", "Address for /metrics (Prometheus). \"0\" disables it.")
	fs.StringVar(&healthAddr, "health-probe-bind-address", ":9467", "Address for /healthz (running), /readyz (leading and synced) and /readyz/election (in the election). \"0\" disables it.")
	fs.StringVar(&logFormat, "log-format", "text", "Log format: text or json.")
	fs.StringVar(&logLevel, "log-level", "info", "Log level: debug, info, warn or error.")
	fs.BoolVar(&showVersion, "version", false, "Print the version and exit.")
	// The agents' reboot component turns reboots on with their flag
	// --reboot-enabled, not the ConfigMap, so the coordinator needs the same
	// switch: without it every reboot slot request would be refused.
	fs.BoolVar(&rebootEnabled, "reboot-enabled", false, "Grant reboot slots, as the agents' --reboot-enabled=true asks; wins over reboot.enabled in --config. With reboots off, a reboot slot request is refused (answered Revoked).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q; see --help", fs.Args())
	}
	if showVersion {
		fmt.Printf("node-agent-coordinator %s (commit %s)\n", version.Version, version.Commit)
		return nil
	}
	cfg := config.Default()
	var deprecated []config.Deprecation
	if configFile != "" {
		loaded, old, err := config.Load(configFile, cfg, nil)
		if err != nil {
			return err
		}
		cfg, deprecated = loaded, old
	}
	if fs.Changed("reboot-enabled") {
		cfg.Reboot.Enabled = rebootEnabled
	}
	// The file is the agents', and Validate checks every key of it, the
	// agent's own nodeName too; the coordinator runs for no node, and the
	// shipped ConfigMap names none (each agent gets $NODE_NAME).
	if cfg.NodeName == "" {
		cfg.NodeName = "node-agent-coordinator"
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger, err := agent.NewLogger(os.Stderr, logFormat, logLevel)
	if err != nil {
		return err
	}
	config.LogDeprecations(logger, configFile, deprecated)
	restCfg, err := kube.RESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	return runcoordinator.Run(ctx, runcoordinator.Options{
		Config: cfg, REST: restCfg, Identity: identity, ElectionName: electionName,
		MetricsAddress: metricsAddr, HealthAddress: healthAddr, Logger: logger,
	})
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
