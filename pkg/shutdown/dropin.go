package shutdown

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
)

// This file owns logind's drop-in: with shutdown.manageLogindConfig, the
// Guard raises InhibitDelayMaxSec to the drain budget by writing a drop-in
// and making logind reload, then reads the delay back.

// DropInName is the file the Guard writes into the logind drop-in directory.
// logind reads the drop-ins of /etc, /run and /usr/lib/systemd/logind.conf.d
// sorted by file name and the last one wins, so "99-" puts this one after
// those of packages and admins that use lower numbers.
const DropInName = "99-node-agent.conf"

// DropInContent is the logind drop-in that lets delay locks be held for
// delay, rounded up to whole seconds.
func DropInContent(delay time.Duration) []byte {
	secs := int64(math.Ceil(delay.Seconds()))
	// logind.conf(5): InhibitDelayMaxSec takes a time span; a bare number is
	// seconds.
	return fmt.Appendf(nil, `# Written by node-agent because shutdown.manageLogindConfig is true: it lets
# node-agent's shutdown delay lock be held for shutdown.drainBudget, so that
# the node can be drained before the host goes down. node-agent rewrites this
# file when the budget changes and never deletes it: after turning the
# setting off, delete the file and reload logind (systemctl kill -s HUP
# systemd-logind).
[Login]
InhibitDelayMaxSec=%d
`, secs)
}

// WriteDropIn writes DropInName with DropInContent(delay) into dir, creating
// dir if needed. It writes only when the content differs from what is there,
// and replaces the file atomically so logind never reads half of it. It
// reports whether it wrote. logind reads the file only when told to reload.
func WriteDropIn(dir string, delay time.Duration) (bool, error) {
	if delay <= 0 {
		return false, fmt.Errorf("logind drop-in: delay %s must be positive", delay)
	}
	path := filepath.Join(dir, DropInName)
	want := DropInContent(delay)
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("logind drop-in directory %s: %w; check shutdown.logindDropInDir and that the host path is mounted writable", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+DropInName+".*")
	if err != nil {
		return false, fmt.Errorf("logind drop-in %s: %w; check that the host path is mounted writable", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(want); err != nil {
		tmp.Close()
		return false, fmt.Errorf("logind drop-in %s: writing: %w", path, err)
	}
	// CreateTemp makes 0600 files; logind runs as root and would read it,
	// but admins expect the mode of the other drop-ins.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return false, fmt.Errorf("logind drop-in %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("logind drop-in %s: writing: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("logind drop-in %s: %w", path, err)
	}
	return true, nil
}

// reloadPolls bounds how often the delay is read again after a reload.
// logind handles SIGHUP asynchronously, so the first read may still show the
// old value.
const (
	reloadPolls    = 20
	reloadPollWait = 100 * time.Millisecond
)

func (g *Guard) raiseDelay(ctx context.Context, l Logind, delay time.Duration) (time.Duration, error) {
	budget := g.opts.DrainBudget
	path := filepath.Join(g.opts.LogindDropInDir, DropInName)
	wrote, err := WriteDropIn(g.opts.LogindDropInDir, budget)
	if err != nil {
		g.log.Error("Cannot raise logind's InhibitDelayMaxSec; draining within the current delay", "err", err, "inhibitDelay", delay)
		return delay, nil
	}
	// Reload even when the file was already there: an earlier agent may have
	// written it and stopped before the reload.
	if err := l.ReloadConfig(ctx); err != nil {
		g.log.Error("Wrote the logind drop-in but could not make logind reload it; draining within the current delay",
			"dropIn", path, "err", err, "inhibitDelay", delay)
		return delay, nil
	}
	for i := 0; ; i++ {
		d, err := l.InhibitDelayMax(ctx)
		if err != nil {
			return 0, err
		}
		delay = d
		if delay >= budget || i == reloadPolls {
			break
		}
		if !g.sleep(ctx, reloadPollWait) {
			return 0, ctx.Err()
		}
	}
	if delay < budget {
		g.log.Warn("logind still caps the delay below the drain budget after reloading; a drop-in that sorts after ours, or logind.conf in /run, may override it",
			"dropIn", path, "inhibitDelay", delay, "drainBudget", budget)
	} else {
		g.log.Info("Raised logind's InhibitDelayMaxSec to the drain budget", "dropIn", path, "written", wrote, "inhibitDelay", delay)
	}
	return delay, nil
}
