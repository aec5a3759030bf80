package scale

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/slots"
	"github.com/node-agent/node-agent/test/testenv"
)

// auditPolicy logs each request of the agents, the coordinator and the
// kured-pattern pollers once, when it is received: a watch counts when it is
// opened, however long it stays open. Nothing else is logged, so the log's
// own cost stays small.
var auditPolicy = fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete"]
rules:
- level: Metadata
  users: [%q, %q, %q]
- level: None
`, agentUser, coordinatorUser, kuredUser)

// fleetProcess names this process, the fleet's agents, among the sampled.
const fleetProcess = "fleet"

// procSample is one reading of a control-plane process.
type procSample struct {
	at       time.Time
	cpu      float64 // seconds of CPU since the process started
	rssBytes int64
}

// procSampler reads kube-apiserver's and etcd's CPU time and RSS every
// second. A restarted kube-apiserver is a new process: its CPU time
// starts again from zero, which usage() accounts for.
type procSampler struct {
	env     *testenv.Env
	mu      sync.Mutex
	samples map[string][]procSample // by component
	pids    map[string][]int
}

func newProcSampler(env *testenv.Env) *procSampler {
	return &procSampler{env: env, samples: map[string][]procSample{}, pids: map[string][]int{}}
}

func (s *procSampler) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		comps := append(s.env.Components(), testenv.Component{Name: fleetProcess, PID: os.Getpid()})
		for _, c := range comps {
			if c.Name != testenv.BinKubeAPIServer && c.Name != testenv.BinEtcd && c.Name != fleetProcess || c.PID == 0 {
				continue
			}
			cpu, rss, err := readProc(c.PID)
			if err != nil {
				continue
			}
			s.mu.Lock()
			if p := s.pids[c.Name]; len(p) == 0 || p[len(p)-1] != c.PID {
				s.pids[c.Name] = append(p, c.PID)
				// A new process: mark the break with a zero reading.
				s.samples[c.Name] = append(s.samples[c.Name], procSample{at: time.Now(), cpu: -1})
			}
			s.samples[c.Name] = append(s.samples[c.Name], procSample{at: time.Now(), cpu: cpu, rssBytes: rss})
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// usage is a component's CPU (in cores, averaged) and highest RSS between
// from and to.
func (s *procSampler) usage(name string, from, to time.Time) (cores float64, maxRSS int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cpu float64
	var prev *procSample
	for i := range s.samples[name] {
		x := &s.samples[name][i]
		if x.at.Before(from) || x.at.After(to) {
			if x.at.Before(from) {
				prev = x
				if x.cpu < 0 {
					prev = nil
				}
			}
			continue
		}
		if x.cpu < 0 {
			prev = nil
			continue
		}
		if prev != nil {
			cpu += x.cpu - prev.cpu
		}
		prev = x
		maxRSS = max(maxRSS, x.rssBytes)
	}
	if d := to.Sub(from).Seconds(); d > 0 {
		cores = cpu / d
	}
	return cores, maxRSS
}

// readProc reads a process's CPU seconds (user and system) and RSS.
func readProc(pid int) (cpu float64, rss int64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command may hold spaces; the fields after it start past ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	const clockTicks = 100 // USER_HZ on Linux
	cpu = (utime + stime) / clockTicks
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			rss = kb * 1024
		}
	}
	return cpu, rss, nil
}

// apiserverMetrics are the kube-apiserver figures the benchmark reads from
// its /metrics: open watches and refused requests.
type apiserverMetrics struct {
	watches float64 // apiserver_longrunning_requests{verb="WATCH"}
	code429 float64 // apiserver_request_total{code="429"}
	objects map[string]float64
}

func scrapeAPIServer(ctx context.Context, c kubernetes.Interface) (apiserverMetrics, error) {
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apiserverMetrics{}, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return apiserverMetrics{}, err
	}
	m := apiserverMetrics{objects: map[string]float64{}}
	label := func(ls []*dto.LabelPair, name string) string {
		for _, l := range ls {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	if f := fams["apiserver_longrunning_requests"]; f != nil {
		for _, x := range f.Metric {
			if label(x.Label, "verb") == "WATCH" {
				m.watches += x.GetGauge().GetValue()
			}
		}
	}
	if f := fams["apiserver_request_total"]; f != nil {
		for _, x := range f.Metric {
			if label(x.Label, "code") == "429" {
				m.code429 += x.GetCounter().GetValue()
			}
		}
	}
	if f := fams["apiserver_storage_objects"]; f != nil {
		for _, x := range f.Metric {
			m.objects[label(x.Label, "resource")] = x.GetGauge().GetValue()
		}
	}
	return m, nil
}

// nodeTracker follows every Node through an informer of the benchmark's
// own: when each got its CPU labels, and, during a rolling maintenance, when
// each was asked, held a drain slot and drained (nodeRound).
type nodeTracker struct {
	mu        sync.Mutex
	labelled  map[string]time.Time
	draining  map[string]bool // maintenance status Running
	holding   map[string]bool // the coordinator's grant Granted, answering the node's request
	succeeded map[string]time.Time
	// rounds holds the nodes of the rolling maintenance under way; nil
	// between them.
	rounds   map[string]*nodeRound
	onUpdate func(*corev1.Node)
	// overLimit, when set, receives a description of each moment more
	// nodes drain, or hold a slot, than limit.
	limit     int
	overLimit []string
	lastOver  string
	most      int
}

func newNodeTracker(ctx context.Context, c kubernetes.Interface) (*nodeTracker, error) {
	t := &nodeTracker{labelled: map[string]time.Time{}, draining: map[string]bool{}, holding: map[string]bool{}, succeeded: map[string]time.Time{}}
	f := informers.NewSharedInformerFactory(c, 0)
	inf := f.Core().V1().Nodes().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { t.observe(o.(*corev1.Node)) },
		UpdateFunc: func(_, o any) { t.observe(o.(*corev1.Node)) },
	})
	if err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return t, nil
}

// hasCPULabels reports labels the labeller sets: a cpu-model or
// host-model label of KubeVirt's families.
func hasCPULabels(n *corev1.Node) bool {
	for k := range n.Labels {
		if strings.HasPrefix(k, "cpu-model.node.kubevirt.io/") || strings.HasPrefix(k, "host-model-cpu.node.kubevirt.io/") {
			return true
		}
	}
	return false
}

func (t *nodeTracker) observe(n *corev1.Node) {
	now := time.Now()
	st, _ := selfdrain.ParseStatus(n)
	g, _ := slots.ParseGrant(n)
	req, _ := slots.ParseRequest(n)
	_, asked := n.Annotations[selfdrain.MaintenanceAnnotation]
	draining := st.Active() && st.Phase == selfdrain.PhaseRunning
	// A node holds a slot while the grant answers its request, as the
	// agent (slots.Requester) and test/property read it: the grant of a
	// request withdrawn holds nothing, and the coordinator clears it after
	// its next grants.
	holding := req != nil && g.Answers(req) && g.State == slots.Granted
	t.mu.Lock()
	if _, ok := t.labelled[n.Name]; !ok && hasCPULabels(n) {
		t.labelled[n.Name] = now
	}
	setMember(t.draining, n.Name, draining)
	setMember(t.holding, n.Name, holding)
	if t.limit > 0 {
		t.most = max(t.most, len(t.draining))
		if len(t.draining) > t.limit || len(t.holding) > t.limit {
			// Once per state, not per Node update while it lasts.
			state := fmt.Sprintf("%d nodes Running (%s); %d holding a slot (%s)",
				len(t.draining), strings.Join(sortedKeys(t.draining), ","), len(t.holding), strings.Join(sortedKeys(t.holding), ","))
			if state != t.lastOver {
				t.lastOver = state
				t.overLimit = append(t.overLimit, now.Format("15:04:05.000")+": "+state)
			}
		}
	}
	if r := t.rounds[n.Name]; r != nil {
		r.observe(now, asked, holding, draining, st.Active() && st.Phase == selfdrain.PhaseSucceeded)
	}
	if st.Active() && st.Phase == selfdrain.PhaseSucceeded {
		if _, ok := t.succeeded[n.Name]; !ok {
			t.succeeded[n.Name] = now
		}
	}
	cb := t.onUpdate
	t.mu.Unlock()
	if cb != nil {
		cb(n)
	}
}

// observe moves the round on by what one Node update shows.
func (r *nodeRound) observe(now time.Time, asked, holding, draining, succeeded bool) {
	if r.asked.IsZero() {
		if !asked {
			return
		}
		r.asked = now
	}
	if r.granted.IsZero() && holding {
		r.granted = now
	}
	if !r.granted.IsZero() && r.released.IsZero() && !holding {
		r.released = now
	}
	if r.started.IsZero() && (draining || succeeded) {
		r.started = now
	}
	if !r.started.IsZero() && r.drained.IsZero() && !draining {
		r.drained = now
	}
}

func setMember(m map[string]bool, k string, in bool) {
	if in {
		m[k] = true
	} else {
		delete(m, k)
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// beginRound starts following nodes through a rolling maintenance under
// limit.
func (t *nodeTracker) beginRound(nodes []string, limit int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rounds = map[string]*nodeRound{}
	for _, n := range nodes {
		t.rounds[n] = &nodeRound{}
	}
	t.limit, t.overLimit, t.lastOver, t.most = limit, nil, "", 0
}

// endRound stops following the round and returns what it saw: each node's
// way, the most nodes draining at once, and the moments over the limit.
func (t *nodeTracker) endRound() (rounds map[string]nodeRound, most int, overLimit []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rounds = map[string]nodeRound{}
	for n, r := range t.rounds {
		rounds[n] = *r
	}
	most, overLimit = t.most, t.overLimit
	t.rounds, t.limit, t.overLimit, t.lastOver, t.most = nil, 0, nil, "", 0
	return rounds, most, overLimit
}

// labelledAmong counts the nodes of names labelled, and the time the last
// of them was.
func (t *nodeTracker) labelledAmong(names []string) (n int, last time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, name := range names {
		if at, ok := t.labelled[name]; ok {
			n++
			if at.After(last) {
				last = at
			}
		}
	}
	return n, last
}

func (t *nodeTracker) labelTimes(names []string) []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Time
	for _, name := range names {
		if at, ok := t.labelled[name]; ok {
			out = append(out, at)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func (t *nodeTracker) resetSucceeded() {
	t.mu.Lock()
	t.succeeded = map[string]time.Time{}
	t.mu.Unlock()
}

func (t *nodeTracker) succeededCount(names []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, name := range names {
		if _, ok := t.succeeded[name]; ok {
			n++
		}
	}
	return n
}

// requestKind names what a request did (testenv.AuditEvent.Kind).
func requestKind(e testenv.AuditEvent) string { return e.Kind() }

// window is the audit events of user received between from and to.
func window(events []testenv.AuditEvent, user string, from, to time.Time) []testenv.AuditEvent {
	var out []testenv.AuditEvent
	for _, e := range events {
		at := e.Received.Time
		if e.User.Username == user && !at.Before(from) && at.Before(to) {
			out = append(out, e)
		}
	}
	return out
}

// byKind counts events by requestKind, largest first.
func byKind(events []testenv.AuditEvent) []kindCount {
	m := map[string]int{}
	for _, e := range events {
		m[requestKind(e)]++
	}
	out := make([]kindCount, 0, len(m))
	for k, n := range m {
		out = append(out, kindCount{k, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].n != out[j].n {
			return out[i].n > out[j].n
		}
		return out[i].kind < out[j].kind
	})
	return out
}

type kindCount struct {
	kind string
	n    int
}

// formatKinds lists the counts, each also divided by per (0: not) and
// named unit ("agent", "drained node").
func formatKinds(kc []kindCount, per float64, unit string) string {
	var parts []string
	for _, k := range kc {
		if per > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (%.2f/%s)", k.kind, k.n, float64(k.n)/per, unit))
		} else {
			parts = append(parts, fmt.Sprintf("%s %d", k.kind, k.n))
		}
	}
	return strings.Join(parts, ", ")
}

// perSecond buckets events into seconds from origin.
func perSecond(events []testenv.AuditEvent, user string, origin time.Time, seconds int) []float64 {
	out := make([]float64, seconds)
	for _, e := range events {
		if e.User.Username != user {
			continue
		}
		i := int(e.Received.Time.Sub(origin) / time.Second)
		if i >= 0 && i < seconds {
			out[i]++
		}
	}
	return out
}

func peak(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// slotCost are the requests of a window that the drain slots change: on
// Nodes and on Leases, by the agents and by the coordinator.
type slotCost struct {
	// agentNodes: the agents' requests on their Nodes (nodes and
	// nodes/status: cordon, status, request for a slot, reads, watches).
	agentNodes int
	// agentLeases: the agents' requests on Leases; none since the
	// coordinator holds the slots.
	agentLeases int
	// coordinatorNodes: the coordinator's requests on Nodes (grants, and
	// its watch of every Node).
	coordinatorNodes int
	// slotLeases and electionLeases: the coordinator's requests on the
	// slot Leases (create, delete, list) and on its election Lease.
	slotLeases, electionLeases int
}

func costOf(agent, coordinator []testenv.AuditEvent) slotCost {
	var c slotCost
	for _, e := range agent {
		switch e.Resource() {
		case "nodes", "nodes/status":
			c.agentNodes++
		case "leases":
			c.agentLeases++
		}
	}
	for _, e := range coordinator {
		switch e.Resource() {
		case "nodes", "nodes/status":
			c.coordinatorNodes++
		case "leases":
			if e.ObjectRef.Name == electionName {
				c.electionLeases++
			} else {
				c.slotLeases++
			}
		}
	}
	return c
}

// coordinatorLine says what the coordinator's replicas asked of the
// apiserver between from and to, for a phase's notes.
func coordinatorLine(audit *testenv.AuditReader, from, to time.Time) string {
	ev := window(audit.Events(), coordinatorUser, from, to)
	return fmt.Sprintf("the coordinator (%d replicas, one leading): %d requests (%.2f per second): %s",
		coordinatorReplicas, len(ev), float64(len(ev))/to.Sub(from).Seconds(), orNone(formatKinds(byKind(ev), 0, "")))
}
