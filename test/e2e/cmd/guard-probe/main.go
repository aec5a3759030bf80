// Command guard-probe runs pkg/shutdown's Guard on the real D-Bus
// implementation against the real systemd-logind inside the end-to-end
// container. Its Drainer touches no cluster: the test steers it through a
// file, and the probe reports what happens as JSON lines, one per event,
// flushed to disk before the lock is released (the host may be gone a moment
// later).
//
// With --reboot it runs no Guard: it asks logind to reboot through
// shutdown.Logind's Reboot and exits, as the reboot controller will.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/node-agent/node-agent/pkg/shutdown"
)

// Event is one line of the events file.
type Event struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"`
	// State and Held come with "status" events: every change of the Guard's
	// Status, as reported by GuardOptions.OnStatus.
	State        string  `json:"state,omitempty"`
	Held         bool    `json:"held,omitempty"`
	InhibitDelay float64 `json:"inhibitDelaySeconds,omitempty"`
	DrainWindow  float64 `json:"drainWindowSeconds,omitempty"`
	Deadline     string  `json:"deadline,omitempty"`
	Detail       string  `json:"detail,omitempty"`
}

type recorder struct {
	mu sync.Mutex
	f  *os.File
}

func (r *recorder) record(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Time = time.Now()
	data, err := json.Marshal(e)
	if err != nil {
		slog.Error("Encoding an event", "err", err)
		return
	}
	if _, err := r.f.Write(append(data, '\n')); err != nil {
		slog.Error("Writing an event", "err", err)
		return
	}
	// The container may power off right after; the test reads this file
	// from the host afterwards.
	_ = r.f.Sync()
}

// drainer finishes when the file finish exists, or never when hang is set.
type drainer struct {
	rec    *recorder
	finish string
	hang   bool
}

func (d *drainer) Drain(ctx context.Context, deadline time.Time) (shutdown.Result, error) {
	d.rec.record(Event{Event: "drain-started", Deadline: deadline.UTC().Format(time.RFC3339Nano)})
	for {
		if !d.hang {
			if _, err := os.Stat(d.finish); err == nil {
				d.rec.record(Event{Event: "drain-finished"})
				return shutdown.Result{Complete: true, Message: "finish file present"}, nil
			}
		}
		select {
		case <-ctx.Done():
			d.rec.record(Event{Event: "drain-stopped", Detail: context.Cause(ctx).Error()})
			return shutdown.Result{Message: "stopped"}, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (d *drainer) Undo(context.Context) error {
	d.rec.record(Event{Event: "undo"})
	return nil
}

func main() {
	var (
		events    = flag.String("events", "/e2e/events.jsonl", "file to append JSON events to")
		finish    = flag.String("finish-file", "/e2e/finish-drain", "the drain completes once this file exists")
		hang      = flag.Bool("hang", false, "never complete the drain; only the deadline ends it")
		address   = flag.String("system-bus-address", shutdown.DefaultSystemBusAddress, "D-Bus address of the system bus")
		budget    = flag.Duration("drain-budget", 5*time.Minute, "shutdown.drainBudget")
		margin    = flag.Duration("safety-margin", 2*time.Second, "shutdown.safetyMargin")
		manage    = flag.Bool("manage-logind-config", false, "shutdown.manageLogindConfig")
		dropInDir = flag.String("logind-drop-in-dir", "/etc/systemd/logind.conf.d", "shutdown.logindDropInDir")
		reboot    = flag.Bool("reboot", false, "ask logind to reboot the host and exit, instead of running the Guard")
	)
	flag.Parse()
	if *reboot {
		if err := rebootHost(*address); err != nil {
			fmt.Fprintln(os.Stderr, "guard-probe:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*events, *finish, *hang, *address, *budget, *margin, *manage, *dropInDir); err != nil {
		fmt.Fprintln(os.Stderr, "guard-probe:", err)
		os.Exit(1)
	}
}

func run(events, finish string, hang bool, address string, budget, margin time.Duration, manage bool, dropInDir string) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := os.MkdirAll(filepath.Dir(events), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(events, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := &recorder{f: f}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	g, err := shutdown.NewGuard(shutdown.GuardOptions{
		Connect:            func(ctx context.Context) (shutdown.Logind, error) { return shutdown.Connect(ctx, address) },
		Drainer:            &drainer{rec: rec, finish: finish, hang: hang},
		DrainBudget:        budget,
		SafetyMargin:       margin,
		ManageLogindConfig: manage,
		LogindDropInDir:    dropInDir,
		Logger:             log,
		OnStatus: func(st shutdown.Status) {
			rec.record(Event{Event: "status", State: string(st.State), Held: st.DelayLockHeld,
				InhibitDelay: st.InhibitDelay.Seconds(), DrainWindow: st.DrainWindow.Seconds(), Detail: st.Message})
		},
	})
	if err != nil {
		return err
	}
	rec.record(Event{Event: "started"})

	err = g.Run(ctx)
	st := g.Status()
	rec.record(Event{Event: "exit", State: string(st.State), Held: st.DelayLockHeld, Detail: st.Message})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func rebootHost(address string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := shutdown.Connect(ctx, address)
	if err != nil {
		return err
	}
	defer l.Close()
	return l.Reboot(ctx)
}
