package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	hostcpulibvirt "github.com/node-agent/node-agent/pkg/hostcpu/libvirt"
	"github.com/node-agent/node-agent/pkg/hostcpu/subprocess"
)

// discoverCPUCommand is the hidden subcommand `node-agent run` starts for each
// CPU discovery (see pkg/hostcpu/subprocess). It is the only path of `run`
// that loads libvirt.
const discoverCPUCommand = "discover-cpu"

// faultEnv names a file whose content makes discover-cpu misbehave, for the
// integration tests of the daemon's side: "hang", "signal" (killed by
// SIGKILL, as the OOM killer would) or "garbage" (prints what is not an
// answer). The file is read at each start, so a test can heal the child
// between periods. Unset or an empty file, the child runs normally.
const faultEnv = "NODE_AGENT_TEST_DISCOVERY_FAULT"

func newDiscoverCPUCommand() *cobra.Command {
	return &cobra.Command{
		Use:    discoverCPUCommand,
		Short:  "Discover the host CPU for `node-agent run` (JSON on stdin and stdout; internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path := os.Getenv(faultEnv); path != "" {
				injectFault(path)
			}
			return subprocess.Serve(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), func(ctx context.Context, req subprocess.Request) (*hostcpu.HostCPU, error) {
				var lvl slog.Level
				if err := lvl.UnmarshalText([]byte(req.LogLevel)); err != nil {
					lvl = slog.LevelInfo
				}
				log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
				d, err := hostcpu.NewDiscoverer(hostcpu.Options{
					LibvirtURI:   req.LibvirtURI,
					VirtType:     req.VirtType,
					StateDir:     req.StateDir,
					ExpandModels: req.ExpandModels,
					Dial:         hostcpulibvirt.Dial(log),
					Logger:       log,
				})
				if err != nil {
					return nil, err
				}
				return d.Discover(ctx)
			})
		},
	}
}

// injectFault misbehaves as the file at path says; see faultEnv.
func injectFault(path string) {
	data, _ := os.ReadFile(path)
	switch strings.TrimSpace(string(data)) {
	case "hang":
		os.Stderr.WriteString("discover-cpu: test fault: hanging\n")
		// Ignores SIGTERM too, as a process stuck in a C call would: only
		// the daemon's SIGKILL ends it.
		for {
			time.Sleep(time.Hour)
		}
	case "signal":
		os.Stderr.WriteString("discover-cpu: test fault: killing myself\n")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	case "garbage":
		os.Stdout.WriteString("this is not JSON\n")
		os.Exit(0)
	}
}
