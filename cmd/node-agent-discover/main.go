// Command node-agent-discover is node-agent's discovery helper: `node-agent
// run` and `node-agent labels` start it for each host CPU discovery, hand it
// a request as JSON on stdin and read the snapshot on stdout (the protocol is
// pkg/hostcpu/subprocess). It is the only binary of node-agent that links
// libvirt (libvirt.org/go/libvirt, through pkg/hostcpu/libvirt), so libvirt's
// libraries and threads live only while one discovery runs. This package only
// wires the request to pkg/hostcpu.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	hostcpulibvirt "github.com/node-agent/node-agent/pkg/hostcpu/libvirt"
	"github.com/node-agent/node-agent/pkg/hostcpu/subprocess"
)

func main() {
	if path := os.Getenv(faultEnv); path != "" {
		injectFault(path)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := subprocess.Serve(ctx, os.Stdin, os.Stdout, discover)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, subprocess.HelperName+":", err)
		os.Exit(1)
	}
}

// discover runs one discovery as the request says, logging to stderr, which
// the daemon passes on to its own log.
func discover(ctx context.Context, req subprocess.Request) (*hostcpu.HostCPU, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: req.Level()}))
	opts := req.Options()
	opts.Dial = hostcpulibvirt.Dial(log)
	opts.Logger = log
	d, err := hostcpu.NewDiscoverer(opts)
	if err != nil {
		return nil, err
	}
	return d.Discover(ctx)
}
