package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/ownnode"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/shutdown"
	"github.com/node-agent/node-agent/pkg/slots"
)

// The whole handshake, with the real coordinator, the real drain controller
// and the rules of this package, in a real agent (its Node informer, its
// Events) on a fake apiserver: the coordinator asks for the drain through
// its record, selfdrain cordons and drains for it, the coordinator reboots
// through logind, and the shutdown guard lets that reboot go at once
// without touching the node; after the reboot a new agent undoes the drain
// and ends the reboot. The drain slots and logind are fakes: their
// packages test them.
func TestHandshakeRebootThroughDrainAndShutdown(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{BootID: "boot-1"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	})
	client := kubetest.Wrap(cs)
	sentinel := filepath.Join(t.TempDir(), "reboot-required")
	if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	slot := &slot{}
	host := &host{}

	// One agent's life: the components as internal/runagent wires them,
	// for the drain, the reboot and the shutdown guard.
	run := func() (stop func()) {
		own := new(OwnReboot)
		clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC))
		log := slog.New(slog.DiscardHandler)
		if os.Getenv("HANDSHAKE_TEST_LOG") != "" {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		a, err := agent.New("node-1", agent.WithKubernetesClient(client), agent.WithLogger(log), agent.WithClock(clk),
			agent.WithComponents(func(d agent.Deps) ([]agent.Component, error) {
				engine := selfdrain.NewEngine(selfdrain.EngineOptions{Client: d.Client, NodeName: d.NodeName,
					Config: config.Default().Drain, Logger: log, Clock: d.Clock, Recorder: d.Recorder})
				ctrl := NewController(ControllerOptions{Engine: engine, RebootDrain: DrainRequest, Slots: slot})
				host.setGuard(own.Drainer(ShutdownDrainer(ctrl)))
				window, err := reboot.ParseWindow(nil, "00:00", "00:00", "UTC")
				if err != nil {
					return nil, err
				}
				coord := reboot.NewController(reboot.ControllerOptions{
					Client: d.Client, NodeName: d.NodeName, Need: reboot.NeedChecker{SentinelFile: sentinel}, Window: window,
					LoopBound: 24 * time.Hour, SlotHoldBound: 30 * time.Minute, Slots: slot, Rebooter: own.Rebooter(host),
					PreferNoScheduleTaint: true, Maintenance: Maintenance, Clock: d.Clock, Logger: log, Recorder: d.Recorder,
				})
				return []agent.Component{ctrl, coord}, nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent: %v", err)
			}
		}
	}
	node := func() *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(what string, ok func(n *corev1.Node, rec *reboot.Record, st *selfdrain.Status) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			n := node()
			rec, _ := reboot.ParseRecord(n)
			st, _ := selfdrain.ParseStatus(n)
			if rec != nil && ok(n, rec, st) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s; record %+v, maintenance %+v, unschedulable %v", what, rec, st, n.Spec.Unschedulable)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	stop := run()
	waitFor("the reboot's drain done, the host asked to reboot", func(n *corev1.Node, rec *reboot.Record, st *selfdrain.Status) bool {
		return rec.Phase == reboot.PhaseRebootRequested && host.asked() > 0
	})
	n := node()
	st, _ := selfdrain.ParseStatus(n)
	if !n.Spec.Unschedulable || st == nil || st.Trigger != selfdrain.TriggerReboot || st.Phase != selfdrain.PhaseSucceeded {
		t.Fatalf("before the reboot: unschedulable %v, maintenance %+v; want cordoned and drained for the reboot", n.Spec.Unschedulable, st)
	}
	// Both writers of the Node's taints kept the other's (pkg/ownnode).
	drainTaint := config.Default().Drain.TaintKey
	if !ownnode.HasTaint(n, drainTaint, corev1.TaintEffectNoSchedule) || !ownnode.HasTaint(n, reboot.PendingTaintKey, reboot.PendingTaintEffect) {
		t.Fatalf("before the reboot: taints %v; want the drain taint and the reboot-pending taint", n.Spec.Taints)
	}
	if res := host.guardResult(); res.Message != OwnRebootMessage || !res.Complete {
		t.Errorf("the shutdown guard's drain of the coordinator's reboot: %+v; want it let go at once", res)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == selfdrain.ShuttingDownCondition {
			t.Errorf("the guard drained the coordinator's own reboot: %s %s", c.Type, c.Message)
		}
	}
	if kept := slot.keptFor(); kept != 30*time.Minute {
		t.Errorf("slot kept across the reboot for %s", kept)
	}
	stop()

	// The host reboots: the sentinel (in /run) is gone, a new boot ID, a
	// new agent.
	if err := os.Remove(sentinel); err != nil {
		t.Fatal(err)
	}
	n = node()
	n.Status.NodeInfo.BootID = "boot-2"
	if _, err := cs.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop = run()
	defer stop()
	waitFor("the reboot done, the drain undone", func(n *corev1.Node, rec *reboot.Record, st *selfdrain.Status) bool {
		return rec.State == reboot.Done && rec.Phase == reboot.PhaseIdle && !n.Spec.Unschedulable && !st.Active() &&
			!ownnode.HasTaint(n, reboot.PendingTaintKey, reboot.PendingTaintEffect)
	})
	if n := node(); len(n.Spec.Taints) != 0 {
		t.Errorf("after the reboot: taints %v; want none (the drain taint and the reboot-pending taint removed)", n.Spec.Taints)
	}
	if slot.taken() != 2 || !slot.released() {
		t.Errorf("slot taken %d times, released %v; want taken back after the reboot, then released", slot.taken(), slot.released())
	}
	if host.asked() != 1 {
		t.Errorf("logind asked %d times", host.asked())
	}
}

// slot is the coordinator's drain slot: free at once, kept or released,
// never taken back. The reboot's drain follows it (following).
type slot struct {
	mu       sync.Mutex
	acquires int
	kept     time.Duration
	release  bool
	// holding: the coordinator holds the slot; changed is closed when
	// that changes.
	holding bool
	changed chan struct{}
}

// Acquire takes the slot for the reboot controller. No maintenance drain
// gets one: this test asks for none (a reboot's drain runs in the
// coordinator's slot).
func (s *slot) Acquire(ctx context.Context, purpose slots.Purpose, _ func(error)) (slots.Slot, error) {
	if purpose != slots.PurposeReboot {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires++
	// A new holder: kept across no reboot yet.
	s.release, s.kept = false, 0
	s.setHolding(true)
	return s, nil
}

func (s *slot) Name() string { return "node-agent-drain-slot-0" }

func (s *slot) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release = s.kept == 0
	s.setHolding(!s.release)
}

func (s *slot) Lost() <-chan struct{} { return nil }
func (s *slot) LostReason() string    { return "" }

func (s *slot) setHolding(h bool) {
	s.holding = h
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
}

// Await is the slot as the reboot's drain follows it: it waits until the
// coordinator holds it, and takes none.
func (s *slot) Await(ctx context.Context, _ slots.Purpose, _ func(error)) (slots.Slot, error) {
	for {
		s.mu.Lock()
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		holding, changed := s.holding, s.changed
		s.mu.Unlock()
		if holding {
			return followed{}, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// followed is the coordinator's slot as the drain holds it: not the
// drain's to give back.
type followed struct{}

func (followed) Name() string          { return "node-agent-drain-slot-0" }
func (followed) Release()              {}
func (followed) Lost() <-chan struct{} { return nil }
func (followed) LostReason() string    { return "" }
func (followed) KeepAcrossReboot(context.Context, time.Duration) error {
	return errors.New("a followed slot is not the drain's to keep")
}

func (s *slot) KeepAcrossReboot(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept = d
	return nil
}

func (s *slot) keptFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept
}

func (s *slot) taken() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquires
}

func (s *slot) released() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.release
}

// host is logind: asked to reboot, it announces the shutdown to the
// shutdown guard, whose drain must let it go, and goes down (the test
// restarts the agent). A reboot counts once the guard answered, so that a
// test that saw it asked reads the guard's result.
type host struct {
	mu     sync.Mutex
	guard  shutdown.Drainer
	reboot int
	result shutdown.Result
}

func (h *host) setGuard(d shutdown.Drainer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.guard = d
}

func (h *host) Reboot(ctx context.Context) error {
	h.mu.Lock()
	guard := h.guard
	h.mu.Unlock()
	res, err := guard.Drain(ctx, time.Now().Add(time.Minute))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reboot++
	if err != nil {
		return err
	}
	h.result = res
	return nil
}

func (h *host) asked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reboot
}

func (h *host) guardResult() shutdown.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.result
}
