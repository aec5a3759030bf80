package selfdrain

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// Metrics are the self-drain metrics. Every label is bounded: phases,
// results, triggers, and the PodDisruptionBudgets that cover pods of this one
// node. No metric carries a pod's name; the status annotation lists those.
type Metrics struct {
	DrainDuration     *prometheus.HistogramVec
	Evictions         *prometheus.CounterVec
	PendingPods       prometheus.Gauge
	MaintenanceActive prometheus.Gauge
	// Phase, StartTime and Progress mirror the status annotation on the
	// Node, so an alert sees what `kubectl get node` shows.
	Phase     *prometheus.GaugeVec
	StartTime prometheus.Gauge
	Progress  prometheus.Gauge
	// BlockedPods counts the pending pods whose last eviction the
	// apiserver refused with 429, by the PodDisruptionBudget it named. One
	// label holds namespace/name: a label "namespace" would clash with the
	// namespace of the agent's own pod that Prometheus adds to every series.
	BlockedPods *prometheus.GaugeVec
	// DrainTimeouts counts maintenance drains that passed drain.timeout.
	DrainTimeouts *prometheus.CounterVec
	// TimedOutPods mirrors the blockers of the node's maintenance status
	// after its drain timed out: the pods that stayed, by reason and, for
	// a budget's refusal, the budget. It is read from the record, so a
	// restarted agent shows it too, until the maintenance ends or a new
	// drain begins.
	TimedOutPods *prometheus.GaugeVec

	mu      sync.Mutex
	blocked map[pdbRef]bool     // series of BlockedPods now set
	left    map[blockerKey]bool // series of TimedOutPods now set
}

// blockerKey is one series of TimedOutPods.
type blockerKey struct {
	reason BlockerReason
	budget string
}

// phases are the values of the phase label, in order.
var phases = []Phase{PhaseWaiting, PhaseRunning, PhaseSucceeded, PhaseFailed}

// evictionResults are the values of evictions_total's result label; each is
// exported at 0 from the start, so increase() sees the first one.
var evictionResults = []string{"evicted", "blocked", "not_found", "error", "deleted", "awaiting_responder"}

// drainResults are the values of drain_duration_seconds' result label; with
// every trigger, each series is exported empty from the start, so that a
// rate over the histogram sees a node's first drain.
var drainResults = []string{"succeeded", "failed", "cancelled"}

// NewMetrics creates the metrics and registers them on reg when it is not
// nil. The wiring passes the result to the Engine (EngineOptions.Metrics);
// a nil *Metrics records nothing, so every method below may be called on it.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		DrainDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Name: "drain_duration_seconds",
			Help:    "Time from the start of a drain to its end, by trigger (annotation, nodemaintenance, reboot, shutdown) and result (succeeded, failed, cancelled).",
			Buckets: []float64{0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"trigger", "result"}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "drain", Name: "evictions_total",
			Help: "Eviction requests by result: evicted, blocked (429, e.g. a PodDisruptionBudget), not_found, error, deleted (drain.deleteAfter), awaiting_responder (an EvictionRequest left to the eviction responder the pod names, drain.evictionAPI).",
		}, []string{"result"}),
		PendingPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "drain_pending_pods",
			Help: "Pods still on the node that the current drain must evict.",
		}),
		MaintenanceActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "maintenance_active",
			Help: "1 while the node is in maintenance (cordoned by the agent for a drain), else 0.",
		}),
		Phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "maintenance_phase",
			Help: "1 for the phase of the node's maintenance status (Waiting, Running, Succeeded, Failed), 0 for the others; all 0 when no maintenance is in force.",
		}, []string{"phase"}),
		StartTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "maintenance_start_timestamp_seconds",
			Help: "Unix time of the startTime of the node's maintenance in force; 0 when there is none.",
		}),
		Progress: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "drain_progress_ratio",
			Help: "drainProgress of the node's maintenance status as a ratio (0 to 1); 0 when no maintenance is in force.",
		}),
		BlockedPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "drain_blocked_pods",
			Help: "Pods the current drain must evict whose last eviction was refused (429), by the PodDisruptionBudget the refusal named, as namespace/name (namespace/ when it named none).",
		}, []string{"poddisruptionbudget"}),
		DrainTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "drain_timeouts_total",
			Help: "Maintenance drains that passed drain.timeout and stopped evicting, by trigger (annotation, nodemaintenance, reboot). The drain slot of an annotation's or a NodeMaintenance object's drain goes to the next node then; a reboot's is the reboot controller's.",
		}, []string{"trigger"}),
		TimedOutPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "drain_timed_out_pods",
			Help: "Pods still on the node when its maintenance drain passed drain.timeout, by why they stayed (reason: PodDisruptionBudget, EvictionRefused, EvictionFailed, Terminating, WaitCompleted, DoNotDrain, OrderGroup, NotEvictedYet) and, for PodDisruptionBudget, the budget as namespace/name; from the maintenance status, until the maintenance ends or a new drain begins.",
		}, []string{"reason", "poddisruptionbudget"}),
		blocked: map[pdbRef]bool{},
		left:    map[blockerKey]bool{},
	}
	for _, r := range evictionResults {
		m.Evictions.WithLabelValues(r)
	}
	for _, tr := range []Trigger{TriggerAnnotation, TriggerNodeMaintenance, TriggerReboot, TriggerShutdown} {
		for _, r := range drainResults {
			m.DrainDuration.WithLabelValues(string(tr), r)
		}
	}
	for _, p := range phases {
		m.Phase.WithLabelValues(string(p))
	}
	for _, tr := range []Trigger{TriggerAnnotation, TriggerNodeMaintenance, TriggerReboot} {
		m.DrainTimeouts.WithLabelValues(string(tr))
	}
	if reg != nil {
		reg.MustRegister(m.DrainDuration, m.Evictions, m.PendingPods, m.MaintenanceActive,
			m.Phase, m.StartTime, m.Progress, m.BlockedPods, m.DrainTimeouts, m.TimedOutPods)
	}
	return m
}

// ObserveNode mirrors the Node's maintenance record st, or perr when it
// cannot be read: maintenance_active follows it always (an unreadable record
// counts as none), the phase, start time and progress only when it can be
// read, so a malformed record leaves their last values.
func (m *Metrics) ObserveNode(st *Status, perr error) {
	if m == nil {
		return
	}
	// A maintenance undone at its drain's timeout stays in force, but the
	// agent no longer holds the node cordoned: maintenance_active's 0.
	m.SetActive(st.Active() && st.UndoneAt == nil)
	if perr == nil {
		m.ObserveStatus(st)
	}
}

// ObserveStatus sets the phase, start time, progress and the pods a timed
// out drain left from the status annotation; st is nil when the Node has
// none.
func (m *Metrics) ObserveStatus(st *Status) {
	if m == nil {
		return
	}
	active := st.Active()
	var phase Phase
	if active {
		phase = st.Phase
	}
	metrics.SetOneOf(m.Phase, phases, phase)
	start, progress := 0.0, 0.0
	if active {
		if st.StartTime != nil {
			start = float64(st.StartTime.Unix())
		}
		progress = float64(st.DrainProgress) / 100
	}
	m.StartTime.Set(start)
	m.Progress.Set(progress)
	var left []Blocker
	if st.TimedOut() {
		left = st.Blockers
	}
	m.setTimedOut(left)
}

func (m *Metrics) SetActive(active bool) {
	if m == nil {
		return
	}
	v := 0.0
	if active {
		v = 1
	}
	m.MaintenanceActive.Set(v)
}

// ended clears what described the maintenance that just ended.
func (m *Metrics) ended() {
	if m == nil {
		return
	}
	m.MaintenanceActive.Set(0)
	m.PendingPods.Set(0)
	m.setBlocked(nil)
	m.setTimedOut(nil)
}

// countTimeout counts a maintenance drain that passed drain.timeout.
func (m *Metrics) countTimeout(trigger Trigger) {
	if m == nil {
		return
	}
	m.DrainTimeouts.WithLabelValues(string(trigger)).Inc()
}

// setTimedOut sets TimedOutPods to the counts of bs, keeping the series that
// stay (see setBlocked).
func (m *Metrics) setTimedOut(bs []Blocker) {
	if m == nil {
		return
	}
	now := map[blockerKey]int{}
	for _, b := range bs {
		now[blockerKey{b.Reason, b.PodDisruptionBudget}]++
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.left {
		if now[k] == 0 {
			m.TimedOutPods.DeleteLabelValues(string(k.reason), k.budget)
			delete(m.left, k)
		}
	}
	for k, n := range now {
		m.TimedOutPods.WithLabelValues(string(k.reason), k.budget).Set(float64(n))
		m.left[k] = true
	}
}

// drainProgress sets the pending pods and who blocks them.
func (m *Metrics) drainProgress(pending map[types.UID]*podState) {
	if m == nil {
		return
	}
	m.PendingPods.Set(float64(len(pending)))
	m.setBlocked(blockedCounts(pending))
}

func (m *Metrics) observeDrain(trigger Trigger, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.DrainDuration.WithLabelValues(string(trigger), result).Observe(d.Seconds())
}

func (m *Metrics) countEviction(result string) {
	if m == nil {
		return
	}
	m.Evictions.WithLabelValues(result).Inc()
}

// pdbRef names a PodDisruptionBudget; name is empty when a refusal named none.
type pdbRef struct{ namespace, name string }

// String is the value of the poddisruptionbudget label.
func (r pdbRef) String() string { return r.namespace + "/" + r.name }

// setBlocked sets BlockedPods to the counts in now. Series that went to no
// pods are deleted, and the others set in place rather than reset first, so
// a scrape never sees a blocked budget vanish for a moment (which would
// restart an alert's `for`).
func (m *Metrics) setBlocked(now map[pdbRef]int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ref := range m.blocked {
		if now[ref] == 0 {
			m.BlockedPods.DeleteLabelValues(ref.String())
			delete(m.blocked, ref)
		}
	}
	for ref, n := range now {
		if n > 0 {
			m.BlockedPods.WithLabelValues(ref.String()).Set(float64(n))
			m.blocked[ref] = true
		}
	}
}

// blockingBudget returns the PodDisruptionBudget an eviction refusal names,
// and whether err is a refusal (429) at all. kube-apiserver names the budget
// in a DisruptionBudget cause whose message starts "The disruption budget
// NAME " (pkg/registry/core/pod/storage/eviction.go, every variant); a
// budget lives in the pod's namespace.
func blockingBudget(namespace string, err error) (pdbRef, bool) {
	if !apierrors.IsTooManyRequests(err) {
		return pdbRef{}, false
	}
	ref := pdbRef{namespace: namespace}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return ref, true
	}
	for _, c := range status.Status().Details.Causes {
		if c.Type != policyv1.DisruptionBudgetCause {
			continue
		}
		rest, ok := strings.CutPrefix(c.Message, "The disruption budget ")
		if name, _, _ := strings.Cut(rest, " "); ok && name != "" {
			ref.name = name
			return ref, true
		}
	}
	return ref, true
}
