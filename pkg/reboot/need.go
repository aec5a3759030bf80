package reboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// CommandRunner runs a command on the host, outside the agent's container.
// pkg/reboot/systemd implements it with a transient systemd unit.
type CommandRunner interface {
	// Run runs argv to its end and returns its exit status. It returns an
	// error when the command could not be started or did not exit on its
	// own (killed by a signal, timed out): then there is no status.
	Run(ctx context.Context, argv []string) (int, error)
}

// NeedChecker finds whether the host needs a reboot.
type NeedChecker struct {
	// SentinelFile is reboot.sentinelFile, the path as the agent sees it;
	// empty: no file.
	SentinelFile string
	// SentinelCommand is reboot.sentinelCommand; empty: no command.
	SentinelCommand []string
	// Runner runs SentinelCommand; it may be nil when there is none.
	Runner CommandRunner
}

// Check says whether the host needs a reboot. The file is looked at first,
// and the command runs only when the file does not say so. An error means
// the need is unknown, and the caller must not reboot on it: a check that
// cannot be made never reboots a node.
func (c NeedChecker) Check(ctx context.Context) (Need, error) {
	if c.SentinelFile != "" {
		_, err := os.Stat(c.SentinelFile)
		switch {
		case err == nil:
			return Need{Needed: true, Why: fmt.Sprintf("sentinel file %s exists", c.SentinelFile)}, nil
		case !errors.Is(err, os.ErrNotExist):
			return Need{}, fmt.Errorf("looking for the sentinel file %s: %w; check the DaemonSet's mount of the host's directory", c.SentinelFile, err)
		}
	}
	if len(c.SentinelCommand) > 0 {
		if c.Runner == nil {
			return Need{}, fmt.Errorf("sentinel command %s: no way to run it on the host (no system bus connection)", quoteArgs(c.SentinelCommand))
		}
		status, err := c.Runner.Run(ctx, c.SentinelCommand)
		if err != nil {
			return Need{}, fmt.Errorf("sentinel command %s: %w", quoteArgs(c.SentinelCommand), err)
		}
		if status == 0 {
			return Need{Needed: true, Why: fmt.Sprintf("sentinel command %s exited 0", quoteArgs(c.SentinelCommand))}, nil
		}
	}
	return Need{Why: "no sentinel says so"}, nil
}

// quoteArgs renders argv for people, quoting the arguments that need it.
func quoteArgs(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\"'\\") {
			a = fmt.Sprintf("%q", a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
