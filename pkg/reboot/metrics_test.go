package reboot

import (
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMetricsObserve(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 11, 20, 6, 0, 0, 0, time.UTC))
	tests := []struct {
		name     string
		rec      *Record
		required float64
		since    float64
		reason   string // the one reason series at 1; "" for none
	}{
		{name: "no record", rec: nil},
		{name: "not needed", rec: &Record{State: NotNeeded, Reason: string(NotNeeded)}, reason: "NotNeeded"},
		{name: "pending outside the window", rec: &Record{State: Pending, Reason: string(OutsideWindow), Since: &since},
			required: 1, since: float64(since.Unix()), reason: "OutsideWindow"},
		{name: "waiting for a slot", rec: &Record{State: Pending, Reason: string(WaitingForSlot), Since: &since},
			required: 1, since: float64(since.Unix()), reason: "WaitingForDrainSlot"},
		{name: "rebooting", rec: &Record{State: Rebooting, Reason: string(Rebooting), Since: &since, Phase: PhaseRebootRequested},
			required: 1, since: float64(since.Unix()), reason: "Rebooting"},
		{name: "done", rec: &Record{State: Done, Reason: string(Done)}, reason: "Done"},
		{name: "loop", rec: &Record{State: RebootLoop, Reason: string(RebootLoop), Since: &since},
			required: 1, since: float64(since.Unix()), reason: "RebootLoop"},
		{name: "drain failed", rec: &Record{State: DrainFailed, Reason: string(DrainFailed), Since: &since},
			required: 1, since: float64(since.Unix()), reason: "DrainFailed"},
		// The need unknown keeps the state last found; the reason says so.
		{name: "unknown after not needed", rec: &Record{State: NotNeeded, Reason: ReasonUnknown, Since: &since},
			since: float64(since.Unix()), reason: ReasonUnknown},
		{name: "unknown after pending", rec: &Record{State: Pending, Reason: ReasonUnknown, Since: &since},
			required: 1, since: float64(since.Unix()), reason: ReasonUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMetrics(nil)
			// Another state first, so that every value below is one
			// Observe set, not one left from NewMetrics.
			m.Observe(&Record{State: Draining, Reason: string(Draining), Since: &metav1.Time{Time: since.Add(time.Hour)}})
			m.Observe(tt.rec)
			if got := testutil.ToFloat64(m.Required); got != tt.required {
				t.Errorf("required = %v, want %v", got, tt.required)
			}
			if got := testutil.ToFloat64(m.RequiredSince); got != tt.since {
				t.Errorf("required_since = %v, want %v", got, tt.since)
			}
			for _, r := range Reasons {
				want := 0.0
				if r == tt.reason {
					want = 1
				}
				if got := testutil.ToFloat64(m.Reason.WithLabelValues(r)); got != want {
					t.Errorf("reason %s = %v, want %v", r, got, want)
				}
			}
			if n := testutil.CollectAndCount(m.Reason); n != len(Reasons) {
				t.Errorf("reason series = %d, want one per reason (%d)", n, len(Reasons))
			}
		})
	}
}

func TestMetricsExposition(t *testing.T) {
	reg := prom.NewRegistry()
	m := NewMetrics(reg)
	since := metav1.NewTime(time.Unix(1795000000, 0))
	m.Observe(&Record{State: Pending, Reason: string(BlockedByPods), Since: &since})
	m.Rebooted()
	m.Loop()
	m.Loop()
	want := `
# HELP node_agent_reboot_required 1 while the reboot controller finds that this node needs a reboot (sentinel file or command, or the node-agent.io/reboot annotation) or has one under way, else 0, as kured's kured_reboot_required. While the need cannot be found out, it keeps the last state found. Exported only with reboot.enabled.
# TYPE node_agent_reboot_required gauge
node_agent_reboot_required 1
# HELP node_agent_reboot_required_since_timestamp_seconds Unix time since which the node has needed a reboot, or the need has been unknown, without a break; 0 while none is needed. Exported only with reboot.enabled.
# TYPE node_agent_reboot_required_since_timestamp_seconds gauge
node_agent_reboot_required_since_timestamp_seconds 1.795e+09
# HELP node_agent_reboot_attempts_total Ends of the reboot controller's attempts, by result: rebooted (the host came back from a reboot the controller asked for, counted by the agent that starts after it), drain_failed (the drain did not finish within drain.timeout; no reboot), loop (the host came back still needing a reboot). Exported only with reboot.enabled.
# TYPE node_agent_reboot_attempts_total counter
node_agent_reboot_attempts_total{result="drain_failed"} 0
node_agent_reboot_attempts_total{result="loop"} 2
node_agent_reboot_attempts_total{result="rebooted"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"node_agent_reboot_required", "node_agent_reboot_required_since_timestamp_seconds", "node_agent_reboot_attempts_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.Reason.WithLabelValues(string(BlockedByPods))); got != 1 {
		t.Errorf("reason BlockedByPods = %v, want 1", got)
	}
}

// TestMetricsCountersStartAtZero: every result is exported before the first
// one happens, so that increase() over a node's first reboot sees it.
func TestMetricsCountersStartAtZero(t *testing.T) {
	m := NewMetrics(nil)
	if n := testutil.CollectAndCount(m.Reboots); n != len(results) {
		t.Fatalf("attempts_total series = %d, want %d", n, len(results))
	}
	m.DrainFailed()
	if got := testutil.ToFloat64(m.Reboots.WithLabelValues(ResultDrainFailed)); got != 1 {
		t.Errorf("drain_failed = %v, want 1", got)
	}
}

// TestNilMetrics: the controller may run without metrics.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.Observe(&Record{State: Pending})
	m.Rebooted()
	m.DrainFailed()
	m.Loop()
}
