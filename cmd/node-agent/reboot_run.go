package main

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/reboot"
	rebootsystemd "github.com/node-agent/node-agent/pkg/reboot/systemd"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/shutdown"
)

// rebootComponent wires the reboot coordinator (reboot.enabled). It asks
// selfdrain for the drain through its record on the Node (rebootDrainRequest),
// takes the drain slots of the maintenance controller, and reboots through
// logind. podClient lists the node's pods for reboot.blockingPodSelector as
// the node itself.
func rebootComponent(cfg config.Config, podClient kube.Interface, slots func() *selfdrain.Slots, ownReboot *atomic.Bool) agent.Option {
	return agent.WithComponent(func(d agent.Deps) (agent.Component, error) {
		rc := cfg.Reboot
		window, err := reboot.ParseWindow(rc.Window.Days, rc.Window.Start, rc.Window.End, rc.Window.TimeZone)
		if err != nil {
			return nil, err // Validate checked it already
		}
		need := reboot.NeedChecker{SentinelFile: rc.SentinelFile, SentinelCommand: rc.SentinelCommand}
		if len(rc.SentinelCommand) > 0 {
			need.Runner = &rebootsystemd.Runner{Dial: rebootsystemd.Dial(cfg.Shutdown.SystemBusAddress), Logger: d.Logger.With("component", "reboot")}
		}
		var blockers []reboot.BlockerSource
		if rc.BlockingPodSelector != "" {
			sel, err := labels.Parse(rc.BlockingPodSelector)
			if err != nil {
				return nil, err
			}
			blockers = append(blockers, reboot.PodBlockers{Lister: reboot.NodePods{Client: podClient, Node: d.NodeName}, Selector: sel})
		}
		if rc.PrometheusURL != "" {
			re, err := reboot.CompileAlertRegexp(rc.BlockingAlertRegexp)
			if err != nil {
				return nil, err
			}
			blockers = append(blockers, reboot.AlertBlockers{URL: rc.PrometheusURL, Match: re, Client: &http.Client{Timeout: 10 * time.Second}})
		}
		return reboot.NewCoordinator(reboot.Options{
			Client: d.Client, NodeName: d.NodeName, Need: need, Window: window, Blockers: blockers,
			LoopBound: rc.LoopBound.Duration, RebootWithoutDrain: rc.RebootWithoutDrain,
			CheckInterval: rc.CheckInterval.Duration, SlotHoldBound: rc.SlotHoldBound.Duration,
			Slots:       slotsAdapter{slots},
			Rebooter:    logindRebooter{address: cfg.Shutdown.SystemBusAddress, ownReboot: ownReboot},
			Maintenance: rebootMaintenance,
			Clock:       d.Clock, Logger: d.Logger.With("component", "reboot"), Recorder: d.Recorder,
			Metrics: reboot.NewMetrics(d.Registry),
		}), nil
	})
}

// rebootDrainRequest reads the reboot coordinator's request for a drain
// from its record on the Node, for selfdrain.
func rebootDrainRequest(node *corev1.Node) string {
	rec, err := reboot.ParseRecord(node)
	if err != nil || rec == nil || !rec.Drain {
		return ""
	}
	return "reboot coordinator: " + rec.Message
}

// rebootMaintenance tells the coordinator what selfdrain's record on the
// Node says.
func rebootMaintenance(node *corev1.Node) (reboot.Maintenance, error) {
	st, err := selfdrain.ParseStatus(node)
	if err != nil {
		return reboot.Maintenance{}, err
	}
	m := reboot.Maintenance{Other: strings.TrimSpace(node.Annotations[selfdrain.MaintenanceAnnotation]) != ""}
	if st.Active() {
		if st.Trigger != selfdrain.TriggerReboot {
			m.Other = true
		} else {
			m.Active = true
			m.Drained = st.Phase == selfdrain.PhaseSucceeded
			m.TimedOut = st.Phase == selfdrain.PhaseFailed
		}
	}
	return m, nil
}

// slotsAdapter hands the coordinator selfdrain's drain slots; the Slots
// exist once the maintenance component is built, before any component runs.
type slotsAdapter struct{ slots func() *selfdrain.Slots }

func (a slotsAdapter) Acquire(ctx context.Context, onWait func(error)) (reboot.Slot, error) {
	h, err := a.slots().AcquireHeld(ctx, onWait)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// logindRebooter asks logind to reboot, on a connection of its own, after
// telling the shutdown guard that this reboot is the coordinator's.
type logindRebooter struct {
	address   string
	ownReboot *atomic.Bool
}

func (r logindRebooter) Reboot(ctx context.Context) error {
	l, err := shutdown.Connect(ctx, r.address)
	if err != nil {
		return err
	}
	defer l.Close()
	r.ownReboot.Store(true)
	if err := l.Reboot(ctx); err != nil {
		r.ownReboot.Store(false)
		return err
	}
	return nil
}
