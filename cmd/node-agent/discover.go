package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/hostcpu/subprocess"
	"github.com/node-agent/node-agent/pkg/labeller"
)

// discoveryRunner returns the runner of the discovery helper
// (cmd/node-agent-discover, beside this binary; see subprocess.FindHelper)
// for one labeller configuration. Every CPU discovery of `run` and of `labels`
// is a helper process: this binary links no libvirt (TestLinksNoLibvirt).
// A missing helper is an error of the discovery, which the labeller reports
// as it reports any other.
func discoveryRunner(lc config.LabellerConfig, stateDir string, log *slog.Logger) (*subprocess.Runner, error) {
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

// discoveryRequest is what the helper discovers with for lc; logLevel is
// the level of the helper's log on stderr.
func discoveryRequest(lc config.LabellerConfig, stateDir, logLevel string) subprocess.Request {
	return subprocess.Request{
		LibvirtURI:   lc.LibvirtURI,
		VirtType:     lc.VirtType,
		StateDir:     stateDir,
		ExpandModels: labeller.Policy{MinCPUModel: lc.MinCPUModel}.ExpandModels(),
		LogLevel:     logLevel,
	}
}

// discoverForLabels is the one discovery of `node-agent labels`. Saved files
// (opts.Offline) need no libvirt and are read in this process; this machine
// is discovered by the helper, as `run` discovers it, with the helper's log
// (at level) on stderr.
func discoverForLabels(ctx context.Context, opts hostcpu.Options, lc config.LabellerConfig, level slog.Level, stderr io.Writer) (*hostcpu.HostCPU, error) {
	if opts.Offline() {
		d, err := hostcpu.NewDiscoverer(opts)
		if err != nil {
			return nil, fmt.Errorf("--virt-type: %w", err)
		}
		return d.Discover(ctx)
	}
	r, err := discoveryRunner(lc, opts.StateDir, opts.Logger)
	if err != nil {
		return nil, err
	}
	r.Stderr = stderr
	req := discoveryRequest(lc, opts.StateDir, level.String())
	req.CPUMapDir = opts.CPUMapDir
	return r.Discover(ctx, req)
}
