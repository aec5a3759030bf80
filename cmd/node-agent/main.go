// Command node-agent is the per-node agent for clusters that run virtual
// machines. This package only parses options and wires them to pkg/.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// PluginName is the name under which kubectl finds node-agent as a plugin
// (`kubectl node-agent ...`); `make install` links it to node-agent.
const PluginName = "kubectl-node_agent"

func pluginName(argv0 string) bool { return filepath.Base(argv0) == PluginName }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCommand()
	if pluginName(os.Args[0]) {
		// Installed as a kubectl plugin: help and errors say how it was
		// called.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl node-agent"}
	}
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-agent:", err)
		os.Exit(1)
	}
}
