package config

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/utils/clock"
)

// Watcher reloads the --config file when its content changes: a mounted
// ConfigMap is updated in place by the kubelet. It polls, because the
// kubelet replaces the file through a symlink swap that inotify on the file
// itself does not follow. A valid new configuration goes to OnChange; an
// invalid one goes to OnInvalid and the last good configuration stays.
type Watcher struct {
	Path    string
	Current Config
	Flags   *pflag.FlagSet
	Clock   clock.WithTicker
	// Interval is how often the file is read; 0: DefaultWatchInterval.
	Interval time.Duration
	Logger   *slog.Logger
	// OnChange receives every valid configuration that differs from the
	// one in force.
	OnChange func(Config)
	// OnInvalid receives the error of a refused reload.
	OnInvalid func(error)
}

// DefaultWatchInterval is how often a Watcher reads its file: a change
// the kubelet projects (within about a minute) is applied seconds later,
// and a read of a small local file every two seconds costs nothing.
const DefaultWatchInterval = 2 * time.Second

// Run polls the file until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	last, _ := readLimited(w.Path)
	interval := w.Interval
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	t := w.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		data, err := readLimited(w.Path)
		if err != nil || bytes.Equal(data, last) {
			continue
		}
		last = data
		next, deprecated, err := Load(w.Path, Default(), w.Flags)
		if err == nil {
			LogDeprecations(w.Logger, w.Path, deprecated)
			next.NodeName = w.Current.NodeName
			err = next.Validate()
		}
		if err != nil {
			w.Logger.Error("Configuration reload refused; the last good configuration stays in force", "path", w.Path, "err", err)
			if w.OnInvalid != nil {
				w.OnInvalid(err)
			}
			continue
		}
		if reflect.DeepEqual(next, w.Current) {
			continue
		}
		if restart := restartOnly(w.Current, next); len(restart) > 0 {
			w.Logger.Warn("Configuration keys changed that take effect only after a restart", "keys", restart)
		}
		w.Logger.Info("Configuration reloaded", "path", w.Path)
		w.Current = next
		if w.OnChange != nil {
			w.OnChange(next)
		}
	}
}

// restartOnly lists the changed keys that a reload does not apply: all but
// the labeller's.
func restartOnly(a, b Config) []string {
	var out []string
	a.Labeller, b.Labeller = LabellerConfig{}, LabellerConfig{}
	if !reflect.DeepEqual(a.Drain, b.Drain) {
		out = append(out, "drain")
	}
	if !reflect.DeepEqual(a.Slots, b.Slots) {
		out = append(out, "slots")
	}
	if !reflect.DeepEqual(a.Shutdown, b.Shutdown) {
		out = append(out, "shutdown")
	}
	if !reflect.DeepEqual(a.Reboot, b.Reboot) {
		out = append(out, "reboot")
	}
	a.Drain, b.Drain, a.Shutdown, b.Shutdown = DrainConfig{}, DrainConfig{}, ShutdownConfig{}, ShutdownConfig{}
	a.Slots, b.Slots = SlotsConfig{}, SlotsConfig{}
	a.Reboot, b.Reboot = RebootConfig{}, RebootConfig{}
	if !reflect.DeepEqual(a, b) {
		out = append(out, "top-level keys")
	}
	return out
}
