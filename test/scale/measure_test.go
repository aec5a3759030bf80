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
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// auditPolicy logs each request of the agents and of the kured-pattern
// pollers once, when it is received: a watch counts when it is opened,
// however long it stays open. Nothing else is logged, so the log's own cost
// stays small.
var auditPolicy = fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete"]
rules:
- level: Metadata
  users: [%q, %q]
- level: None
`, agentUser, kuredUser)

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
// own: when each got its CPU labels, and how many nodes are draining (in a
// drain slot) over time.
type nodeTracker struct {
	mu        sync.Mutex
	labelled  map[string]time.Time
	draining  map[string]bool
	succeeded map[string]time.Time
	series    []point // nodes draining at once, at each change
	onUpdate  func(*corev1.Node)
	// holders are the slot Leases' holders, by Lease name.
	holders map[string]string
	// overLimit, when set, receives a description of each moment more
	// nodes drain than limit.
	limit     int
	overLimit []string
}

type point struct {
	at time.Time
	v  float64
}

func newNodeTracker(ctx context.Context, c kubernetes.Interface) (*nodeTracker, error) {
	t := &nodeTracker{labelled: map[string]time.Time{}, draining: map[string]bool{}, succeeded: map[string]time.Time{}, holders: map[string]string{}}
	f := informers.NewSharedInformerFactory(c, 0)
	lf := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(agentNamespace))
	if _, err := lf.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { t.observeLease(o.(*coordinationv1.Lease)) },
		UpdateFunc: func(_, o any) { t.observeLease(o.(*coordinationv1.Lease)) },
	}); err != nil {
		return nil, err
	}
	lf.Start(ctx.Done())
	lf.WaitForCacheSync(ctx.Done())
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

func (t *nodeTracker) observeLease(l *coordinationv1.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
		t.holders[l.Name] = h
	} else {
		delete(t.holders, l.Name)
	}
}

func (t *nodeTracker) observe(n *corev1.Node) {
	now := time.Now()
	st, _ := selfdrain.ParseStatus(n)
	t.mu.Lock()
	if _, ok := t.labelled[n.Name]; !ok && hasCPULabels(n) {
		t.labelled[n.Name] = now
	}
	draining := st.Active() && st.Phase == selfdrain.PhaseRunning
	if draining != t.draining[n.Name] {
		if draining {
			t.draining[n.Name] = true
		} else {
			delete(t.draining, n.Name)
		}
		t.series = append(t.series, point{now, float64(len(t.draining))})
		if t.limit > 0 && len(t.draining) > t.limit {
			var names []string
			for name := range t.draining {
				names = append(names, name)
			}
			sort.Strings(names)
			t.overLimit = append(t.overLimit, fmt.Sprintf("%s: %d nodes Running (%s); slot holders %v",
				now.Format("15:04:05.000"), len(names), strings.Join(names, ","), t.holders))
		}
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

// drainingSeries returns the nodes-draining points between from and to,
// and the most at once.
func (t *nodeTracker) drainingSeries(from, to time.Time) (pts []point, most int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.series {
		if !p.at.Before(from) && !p.at.After(to) {
			pts = append(pts, p)
			most = max(most, int(p.v))
		}
	}
	return pts, most
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

func formatKinds(kc []kindCount, perAgent float64) string {
	var parts []string
	for _, k := range kc {
		if perAgent > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (%.2f/agent)", k.kind, k.n, float64(k.n)/perAgent))
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
