package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/node-agent/node-agent/internal/runagent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
)

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
	r, err := runagent.DiscoveryRunner(lc, opts.StateDir, opts.Logger)
	if err != nil {
		return nil, err
	}
	r.Stderr = stderr
	req := runagent.DiscoveryRequest(lc, opts.StateDir, level.String())
	req.CPUMapDir = opts.CPUMapDir
	return r.Discover(ctx, req)
}
