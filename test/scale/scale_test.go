package scale

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

// The benchmark's knobs, from the environment (`make scale` passes them).
var (
	// SCALE_NODES: agents and kwok nodes.
	fleetSize = envInt("SCALE_NODES", 1000)
	// SCALE_POOL: nodes in the rolling maintenance.
	poolSize = envInt("SCALE_POOL", 100)
	// SCALE_LIMITS: slots.limit of the rolling maintenances of fast drains.
	limits = envInts("SCALE_LIMITS", []int{1, 5, 20})
	// SCALE_SLOW_POOL: nodes in the rolling maintenance of realistic
	// drains. Each of its drains lasts up to a minute, so one limit takes
	// about ⌈pool ÷ limit⌉ minutes; 60 gives limit 20 three rounds of
	// grants and limit 5 twelve, about 16 minutes for both.
	slowPoolSize = envInt("SCALE_SLOW_POOL", 60)
	// SCALE_SLOW_LIMITS: slots.limit of the rolling maintenances of
	// realistic drains; "0" leaves that run out.
	slowLimits = envInts("SCALE_SLOW_LIMITS", []int{5, 20})
	// SCALE_IDLE: how long the fleet sits idle. client-go's informers end
	// and reopen each watch after 5 to 10 minutes (the reflector's random
	// timeoutSeconds), so a window of 10 minutes sees a whole cycle.
	idleFor = envDuration("SCALE_IDLE", 10*time.Minute)
	// SCALE_KURED_FOR: how long the kured-pattern pollers run.
	kuredFor = envDuration("SCALE_KURED_FOR", 2*time.Minute)
	// SCALE_APF: 0 installs deploy/ without components/flowcontrol.
	withAPF = os.Getenv("SCALE_APF") != "0"
	// SCALE_KURED_PERIOD: the kured-pattern pollers' period (kured's own
	// default --period is one hour; a shorter one gives a count in minutes
	// that scales linearly).
	kuredPeriod = envDuration("SCALE_KURED_PERIOD", 10*time.Second)
	// SCALE_CHECK: agents per kind in the process-versus-in-process check.
	checkSize = envInt("SCALE_CHECK", 5)
	// SCALE_OUT: where the table and pictures go.
	outDir = os.Getenv("SCALE_OUT")
	// SCALE_COORDINATOR_QPS: the coordinator's client-side rate limit
	// (kubeAPIQPS; burst twice that). 0, the default, keeps the
	// configuration's default, as node-agent-coordinator runs with it.
	coordinatorQPS = envInt("SCALE_COORDINATOR_QPS", 0)
	// SCALE_LOGS: where the fleet's log (warnings and errors) and the
	// coordinators' log (info) are kept; by default a temporary directory
	// removed at the end.
	logDir = os.Getenv("SCALE_LOGS")
)

// podsPerPoolNode is the pool's workload per node.
const podsPerPoolNode = 3

// slowTerminations are how long the pods of the realistic drains take to
// terminate once evicted, one Deployment each, so that a node's pods take
// different times and a drain lasts as long as its slowest pod: 20 to 60 s,
// the span of a service that finishes its requests within Kubernetes'
// default grace period of 30 s and of one given a minute. Fixed values
// rather than random ones keep runs comparable.
var slowTerminations = []time.Duration{20 * time.Second, 30 * time.Second, 40 * time.Second, 50 * time.Second, 60 * time.Second}

func BenchmarkScale(b *testing.B) {
	if os.Getenv(testenv.IntegrationEnv) == "" {
		b.Skipf("needs the test bed's control plane; set %s=1 (make scale does)", testenv.IntegrationEnv)
	}
	for b.Loop() {
		runScale(b)
	}
}

type phaseResult struct {
	name       string
	from, to   time.Time
	requests   int
	byKind     []kindCount
	peakRPS    float64
	apiCores   float64
	apiRSS     int64
	etcdCores  float64
	etcdRSS    int64
	throttled  float64 // 429s, every client
	fleetCores float64 // this process: the agents
	extra      []string
}

// rollRun is the rolling maintenances of one workload on one pool, one per
// limit.
type rollRun struct {
	workload rollWorkload
	pool     int
	rolls    []rollResult
	// one is one pool node's drain alone, the unit of each roll's ideal.
	one time.Duration
}

// rollWorkload is what a rolling maintenance drains off the pool's nodes.
type rollWorkload struct {
	// name heads the run's section of results.md ("fast drains").
	name string
	// namespace holds the workload; label selects the pool's nodes.
	namespace, label string
	limits           []int
	// terminations, when set, split the workload into one Deployment per
	// value whose evicted pods stay Terminating that long (kwok's
	// pod-delete Stage, delayed by testenv.PodDeleteDelayAnnotation), with
	// the same terminationGracePeriodSeconds. Empty: one Deployment whose
	// pods kwok deletes as soon as they are evicted.
	terminations []time.Duration
}

// rollResult is one rolling maintenance of the pool, under one limit.
type rollResult struct {
	limit        int
	total, ideal time.Duration
	// most is the most nodes draining at once.
	most   int
	levels roundLevels
	// meanDraining and meanHolding are the mean numbers of nodes draining
	// and holding a slot while at least limit nodes waited, over
	// waitingFor seconds.
	meanDraining, meanHolding, waitingFor float64
	steps                                 stepMedians
	// agentRequests and coordinatorRequests are everything each made
	// from the requests until the pool was given back and the agents
	// were quiet.
	agentRequests, coordinatorRequests int
	cost                               slotCost
	from                               time.Time
	agentKinds, coordinatorKinds       []kindCount
	apiCores, etcdCores                float64
}

// busy is the share of the limit's slots held while at least limit nodes
// waited: 1 when every slot was held all that time, NaN when never that
// many waited. Hand-overs lower it: a slot given back is idle until the
// coordinator grants it again.
func (r rollResult) busy() float64 { return r.meanHolding / float64(r.limit) }

func runScale(b *testing.B) {
	n := fleetSize
	pool := min(poolSize, n)
	ctx := b.Context()
	dir := b.TempDir()
	if outDir == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			b.Fatal(err)
		}
		outDir = filepath.Join(root, "bin", "scale")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		b.Fatal(err)
	}

	opts := testenv.DefaultOptions()
	opts.Logger = slog.New(slog.DiscardHandler)
	auditArgs, auditPath, err := testenv.AuditLog(dir, auditPolicy)
	if err != nil {
		b.Fatal(err)
	}
	opts.APIServerArgs = append(opts.APIServerArgs, auditArgs...)
	opts.StartTimeout = 3 * time.Minute
	env := testenv.StartForTest(b, opts)
	admin := adminClient(b, env)
	audit := testenv.NewAuditReader(auditPath, testenv.AuditStageRequestReceived)
	b.Logf("control plane ready (audit log %s); %d nodes, %d agents, pool %d, limits %v, realistic drains' pool %d, limits %v, deploy/components/flowcontrol %v",
		auditPath, n+2*checkSize, n, pool, limits, min(slowPoolSize, n), slowLimits, withAPF)

	samplerCtx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	procs := newProcSampler(env)
	go procs.run(samplerCtx)

	// Nodes: the fleet's, then the check's (process and in-process).
	fleetNodes := names("scale", n)
	checkProc := names("check-proc", checkSize)
	checkInProc := names("check-inproc", checkSize)
	began := time.Now()
	all := append(append(append([]string{}, fleetNodes...), checkProc...), checkInProc...)
	for i := 0; i < len(all); i += 100 {
		if err := env.AddNodes(ctx, all[i:min(i+100, len(all))]); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d kwok nodes Ready in %s", len(all), time.Since(began).Round(time.Second))
	if withAPF {
		// The agents get a priority level of their own.
		env.InstallDeploy(b, "flowcontrol")
	} else {
		env.InstallDeploy(b)
	}
	began = time.Now()
	tokens := agentTokens(ctx, b, admin, all)
	b.Logf("DaemonSet pods Running and %d bound tokens in %s", len(tokens), time.Since(began).Round(time.Second))

	tracker, err := newNodeTracker(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	logs := logDir
	if logs == "" {
		logs = dir
	} else if err := os.MkdirAll(logs, 0o755); err != nil {
		b.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(logs, "fleet.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	f := &fleet{b: b, env: env, tokens: tokens, discover: sharedDiscovery(b, dir, slog.New(slog.DiscardHandler)),
		log: fleetLogger(logFile), agents: map[string]*inProcessAgent{}}
	defer func() { f.stop(f.all()) }()
	// The drain slot coordinator runs through every phase, as its
	// Deployment does in a cluster; the rolling maintenances restart it
	// with their limits.
	coordLogPath := filepath.Join(logs, "coordinator.log")
	coordLog, err := os.Create(coordLogPath)
	if err != nil {
		b.Fatal(err)
	}
	defer coordLog.Close()
	coords := &coordinators{b: b, env: env, log: coordLog}
	defer coords.stop()
	defer func() {
		if b.Failed() {
			b.Logf("--- last lines of the coordinators' log ---\n%s", testenv.TailFile(coordLogPath, 40))
		}
	}()
	coords.start(firstLimit())

	// 0. The same agents as processes and in this process cost the same.
	checkTable := checkSameCost(b, env, f, audit, tracker, checkProc, checkInProc, dir)

	// 1. Start together.
	base, err := scrapeAPIServer(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	var memBefore runtime.MemStats
	runtime.ReadMemStats(&memBefore)
	startAt := time.Now()
	f.start(fleetNodes)
	testenv.WaitFor(b, 20*time.Minute, fmt.Sprintf("all %d nodes labelled", n), func() (bool, error) {
		got, _ := tracker.labelledAmong(fleetNodes)
		return got == n, nil
	})
	_, lastLabel := tracker.labelledAmong(fleetNodes)
	settle(b, audit, 5*time.Second)
	startEnd := time.Now()
	after, _ := scrapeAPIServer(ctx, admin)
	var memAfter runtime.MemStats
	runtime.ReadMemStats(&memAfter)
	start := phase(b, "start together", startAt, startEnd, audit, procs, base, after)
	start.extra = append(start.extra, coordinatorLine(audit, startAt, startEnd))
	times := tracker.labelTimes(fleetNodes)
	start.extra = append(start.extra,
		fmt.Sprintf("every Node labelled %.1f s after the start (half of them by %.1f s, 99%% by %.1f s)",
			lastLabel.Sub(startAt).Seconds(), times[len(times)/2].Sub(startAt).Seconds(), times[len(times)*99/100].Sub(startAt).Seconds()),
		fmt.Sprintf("benchmark process heap grew by %.0f MiB for %d agents (%.2f MiB each)",
			mib(int64(memAfter.HeapAlloc)-int64(memBefore.HeapAlloc)), n, mib(int64(memAfter.HeapAlloc)-int64(memBefore.HeapAlloc))/float64(n)))
	nodeBytes := nodeSize(b, admin, fleetNodes[0])

	// 2. Idle.
	idleAt := time.Now()
	time.Sleep(idleFor)
	idleEnd := time.Now()
	idleMetrics, _ := scrapeAPIServer(ctx, admin)
	idle := phase(b, "idle", idleAt, idleEnd, audit, procs, after, idleMetrics)
	agentWatches := idleMetrics.watches - base.watches
	watches := 0
	for _, k := range idle.byKind {
		if strings.HasPrefix(k.kind, "watch ") {
			watches += k.n
		}
	}
	idle.extra = append(idle.extra,
		fmt.Sprintf("%d requests in %s: %.1f per minute for the fleet, %.3f per agent; %d of them reopened watches (client-go ends each after 5 to 10 minutes), %d something else",
			idle.requests, idleFor, float64(idle.requests)/idleFor.Minutes(), float64(idle.requests)/idleFor.Minutes()/float64(n), watches, idle.requests-watches),
		fmt.Sprintf("open watches: %.0f for the whole control plane, %.0f more than before the fleet started (%.2f per agent; the coordinator's are among them)", idleMetrics.watches, agentWatches, agentWatches/float64(n)),
		coordinatorLine(audit, idleAt, idleEnd))

	// 3. The kured lock pattern at the same N.
	kured := kuredPattern(b, env, audit, procs, fleetNodes, kuredFor)

	// 4. Rolling maintenances: pods deleted as soon as they are evicted,
	// then pods that take 20 to 60 s to terminate.
	var runs []rollRun
	if len(limits) > 0 {
		runs = append(runs, rollingMaintenances(b, env, admin, coords, audit, procs, tracker, fleetNodes[:pool],
			rollWorkload{name: "fast drains", namespace: "pool", label: "scale.node-agent.io/pool", limits: limits}))
	}
	if len(slowLimits) > 0 {
		runs = append(runs, rollingMaintenances(b, env, admin, coords, audit, procs, tracker, fleetNodes[:min(slowPoolSize, n)],
			rollWorkload{name: "realistic drains", namespace: "slow-pool", label: "scale.node-agent.io/slow-pool", limits: slowLimits, terminations: slowTerminations}))
	}

	// 5. kube-apiserver restart with every agent connected.
	restart := restartAPIServer(b, env, audit, procs, f, admin)
	restart.extra = append(restart.extra, coordinatorLine(audit, restart.from, restart.to))

	stopSampler()
	if err := audit.Read(); err != nil {
		b.Fatal(err)
	}
	res := results{
		machine: machine(), n: n, nodeBytes: nodeBytes, objects: idleMetrics.objects,
		check: checkTable, phases: []phaseResult{start, idle, kured, restart}, runs: runs,
		origin: startAt, events: audit.Events(),
	}
	res.write(b)
}

// firstLimit is the limit the coordinator starts with: the first rolling
// maintenance's.
func firstLimit() int {
	if all := append(append([]int{}, limits...), slowLimits...); len(all) > 0 {
		return all[0]
	}
	return 1
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i+1)
	}
	return out
}

func adminClient(b *testing.B, env *testenv.Env) kubernetes.Interface {
	cfg := env.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.UserAgent = "scale-benchmark"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// settle waits until the agents made no request but watches for quiet, so
// a phase ends when its burst is over. Watches are left out: every
// informer reopens its watch every 5 to 10 minutes, which at a thousand
// agents is a few requests every second.
func settle(b *testing.B, audit *testenv.AuditReader, quiet time.Duration) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if err := audit.Read(); err != nil {
			b.Fatal(err)
		}
		ev := audit.Events()
		last := time.Time{}
		for i := len(ev) - 1; i >= 0; i-- {
			if ev[i].User.Username == agentUser && ev[i].Verb != "watch" {
				last = ev[i].Received.Time
				break
			}
		}
		if time.Since(last) >= quiet {
			return
		}
		time.Sleep(time.Second)
	}
}

// phase gathers one phase's figures.
func phase(b *testing.B, name string, from, to time.Time, audit *testenv.AuditReader, procs *procSampler, before, after apiserverMetrics) phaseResult {
	b.Helper()
	if err := audit.Read(); err != nil {
		b.Fatal(err)
	}
	ev := window(audit.Events(), agentUser, from, to)
	p := phaseResult{name: name, from: from, to: to, requests: len(ev), byKind: byKind(ev),
		peakRPS: peak(perSecond(ev, agentUser, from, int(to.Sub(from)/time.Second)+1)), throttled: after.code429 - before.code429}
	p.apiCores, p.apiRSS = procs.usage(testenv.BinKubeAPIServer, from, to)
	p.etcdCores, p.etcdRSS = procs.usage(testenv.BinEtcd, from, to)
	p.fleetCores, _ = procs.usage(fleetProcess, from, to)
	b.Logf("phase %q: %s, %d agent requests (peak %.0f/s), kube-apiserver %.2f cores / %.0f MiB, etcd %.2f cores / %.0f MiB, 429s %.0f",
		name, to.Sub(from).Round(100*time.Millisecond), p.requests, p.peakRPS, p.apiCores, mib(p.apiRSS), p.etcdCores, mib(p.etcdRSS), p.throttled)
	return p
}

// nodeSize is the JSON size of a labelled Node, and what the agent added to
// it (labels and annotations of node-agent and KubeVirt's families).
func nodeSize(b *testing.B, c kubernetes.Interface, name string) [2]int {
	b.Helper()
	n, err := c.CoreV1().Nodes().Get(b.Context(), name, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	n.ManagedFields = nil
	whole, _ := jsonSize(n)
	added := 0
	for k, v := range n.Labels {
		if strings.Contains(k, "kubevirt.io") || strings.Contains(k, "node-agent.io") {
			added += len(k) + len(v) + 6
		}
	}
	for k, v := range n.Annotations {
		if strings.Contains(k, "kubevirt.io") || strings.Contains(k, "node-agent.io") {
			added += len(k) + len(v) + 6
		}
	}
	return [2]int{whole, added}
}

// kuredPattern runs, for the same N and as long as the idle phase, the lock
// pattern of kured: every node reads one shared object (kured keeps its
// lock in an annotation of its DaemonSet) every period, whether or not a
// reboot is needed. The pollers start spread over one period, as kured's
// pods do.
func kuredPattern(b *testing.B, env *testenv.Env, audit *testenv.AuditReader, procs *procSampler, nodes []string, d time.Duration) phaseResult {
	b.Helper()
	cfg, err := env.UserConfig(kuredUser, "system:masters")
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // one client stands for N kured pods, each far under any limit
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.Context(), d)
	defer cancel()
	from := time.Now()
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offset := time.Duration(int64(kuredPeriod) * int64(i) / int64(len(nodes)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(offset):
			}
			t := time.NewTicker(kuredPeriod)
			defer t.Stop()
			for {
				_, _ = c.AppsV1().DaemonSets(agentNamespace).Get(ctx, "node-agent", metav1.GetOptions{})
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
	to := time.Now()
	if err := audit.Read(); err != nil {
		b.Fatal(err)
	}
	ev := window(audit.Events(), kuredUser, from, to)
	p := phaseResult{name: "kured lock pattern", from: from, to: to, requests: len(ev), byKind: byKind(ev),
		peakRPS: peak(perSecond(ev, kuredUser, from, int(to.Sub(from)/time.Second)+1))}
	p.apiCores, p.apiRSS = procs.usage(testenv.BinKubeAPIServer, from, to)
	p.etcdCores, p.etcdRSS = procs.usage(testenv.BinEtcd, from, to)
	p.fleetCores, _ = procs.usage(fleetProcess, from, to) // the pollers, and the idle agents
	p.extra = append(p.extra,
		fmt.Sprintf("%d nodes each reading the lock object every %s: %d requests in %s (%.1f per second)",
			len(nodes), kuredPeriod, len(ev), d, float64(len(ev))/d.Seconds()),
		fmt.Sprintf("at kured's default period of 1h the same pattern makes %d requests per hour at this N, whether or not a node needs a reboot", len(nodes)))
	b.Logf("phase %q: %d requests in %s", p.name, len(ev), d)
	return p
}

// rollingMaintenances drains the pool node by node under each of wl's
// limits: every pool node is asked at once (the maintenance annotation), the
// agents ask the coordinator for drain slots, and each node's maintenance is
// ended as soon as it is drained, as an admin's automation would after its
// work. The pool runs podsPerPoolNode pods per node that only pool nodes
// take, so each drain's pods land on the pool's other nodes. The workload is
// deleted at the end, so that the next run's pool holds only its own.
func rollingMaintenances(b *testing.B, env *testenv.Env, c kubernetes.Interface, coords *coordinators, audit *testenv.AuditReader, procs *procSampler, tracker *nodeTracker, pool []string, wl rollWorkload) rollRun {
	b.Helper()
	ctx := b.Context()
	for _, n := range pool {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, wl.label)
		if _, err := c.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := env.CreateNamespace(ctx, wl.namespace); err != nil {
		b.Fatal(err)
	}
	deployments := poolDeployments(wl, len(pool)*podsPerPoolNode)
	for _, d := range deployments {
		if _, err := c.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	available := func() {
		for _, d := range deployments {
			waitAvailable(b, c, d)
		}
	}
	available()

	// One node's drain alone, the unit of the ideal: the median of three
	// nodes drained one after the other.
	var singles []time.Duration
	for i := range min(3, len(pool)) {
		took, _ := drainNodes(b, c, tracker, pool[i:i+1])
		singles = append(singles, took)
		available()
	}
	sort.Slice(singles, func(i, j int) bool { return singles[i] < singles[j] })
	one := singles[len(singles)/2]
	b.Logf("%s: one pool node's drain alone: %s (median of %v)", wl.name, one.Round(time.Millisecond), singles)

	run := rollRun{workload: wl, pool: len(pool), one: one}
	for _, limit := range wl.limits {
		// slots.limit is read by the coordinator when it
		// starts: its replicas restart with it, as a rollout of its
		// Deployment would. The agents keep running.
		coords.restart(limit)
		time.Sleep(5 * time.Second)
		settle(b, audit, 3*time.Second)
		tracker.beginRound(pool, limit)
		from := time.Now()
		total, back := drainNodes(b, c, tracker, pool)
		settle(b, audit, 3*time.Second)
		to := time.Now()
		rounds, most, overLimit := tracker.endRound()
		if err := audit.Read(); err != nil {
			b.Fatal(err)
		}
		agentEv := window(audit.Events(), agentUser, from, to)
		coordEv := window(audit.Events(), coordinatorUser, from, to)
		ideal := time.Duration(math.Ceil(float64(len(pool))/float64(limit))) * one
		r := rollResult{limit: limit, total: total, ideal: ideal, most: most, from: from,
			levels:        levelsOf(rounds, from, back),
			agentRequests: len(agentEv), coordinatorRequests: len(coordEv), cost: costOf(agentEv, coordEv),
			agentKinds: byKind(agentEv), coordinatorKinds: byKind(coordEv)}
		r.meanDraining, r.waitingFor = meanWhile(r.levels.draining, r.levels.waiting, limit, r.levels.end)
		r.meanHolding, _ = meanWhile(r.levels.holding, r.levels.waiting, limit, r.levels.end)
		r.steps = medians(rounds)
		r.apiCores, _ = procs.usage(testenv.BinKubeAPIServer, from, to)
		r.etcdCores, _ = procs.usage(testenv.BinEtcd, from, to)
		drained := float64(len(pool))
		b.Logf("%s, rolling maintenance of %d nodes, limit %d: %s (ideal %s, %.2fx), at most %d draining at once; while %d or more waited (%.1f s): %.2f draining, %.2f holding a slot on average (%s of the limit busy); per drained node: %.2f agent and %.2f coordinator requests on Nodes, %.2f on slot Leases and %.2f on the election Lease (coordinator), %.2f on Leases by the agents",
			wl.name, len(pool), limit, total.Round(100*time.Millisecond), ideal.Round(100*time.Millisecond), total.Seconds()/ideal.Seconds(), most,
			limit, r.waitingFor, r.meanDraining, r.meanHolding, fmtPercent(r.busy()),
			float64(r.cost.agentNodes)/drained, float64(r.cost.coordinatorNodes)/drained, float64(r.cost.slotLeases)/drained, float64(r.cost.electionLeases)/drained, float64(r.cost.agentLeases)/drained)
		b.Logf("%s, limit %d, per node (median): granted to Running %.2f s, Running %.2f s, drained to slot given back %.2f s",
			wl.name, limit, r.steps.grantToRunning, r.steps.running, r.steps.drainedToReleased)
		if len(overLimit) > 0 {
			b.Errorf("%s, limit %d: more nodes drained or held a slot at once than the limit:\n%s", wl.name, limit, strings.Join(overLimit, "\n"))
		}
		run.rolls = append(run.rolls, r)
		available()
	}
	removeWorkload(b, c, deployments)
	return run
}

// poolDeployments is wl's workload of replicas pods, split as evenly as can
// be among its Deployments.
func poolDeployments(wl rollWorkload, replicas int) []*appsv1.Deployment {
	if len(wl.terminations) == 0 {
		d := testenv.NewDeployment(wl.namespace, "work", int32(replicas), "")
		d.Spec.Template.Spec.NodeSelector = map[string]string{wl.label: "true"}
		return []*appsv1.Deployment{d}
	}
	var out []*appsv1.Deployment
	for i, t := range wl.terminations {
		n := replicas / len(wl.terminations)
		if i < replicas%len(wl.terminations) {
			n++
		}
		d := testenv.NewDeployment(wl.namespace, fmt.Sprintf("work-%ds", int(t.Seconds())), int32(n), "")
		d.Spec.Template.Spec.NodeSelector = map[string]string{wl.label: "true"}
		// kwok deletes a Terminating pod after the delay its
		// annotation names, whatever the grace period; the grace
		// period says the same, as it would of a real pod's shutdown.
		d.Spec.Template.Annotations = map[string]string{testenv.PodDeleteDelayAnnotation: t.String()}
		d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(t.Seconds()))
		out = append(out, d)
	}
	return out
}

// removeWorkload deletes the Deployments and waits until their pods are
// gone.
func removeWorkload(b *testing.B, c kubernetes.Interface, deployments []*appsv1.Deployment) {
	b.Helper()
	ctx := b.Context()
	for _, d := range deployments {
		err := c.AppsV1().Deployments(d.Namespace).Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
	ns := deployments[0].Namespace
	testenv.WaitFor(b, 10*time.Minute, fmt.Sprintf("the pods of namespace %s gone", ns), func() (bool, error) {
		l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 0, nil
	})
}

// drainNodes asks for maintenance of every node at once, ends each node's
// maintenance once it is drained, and returns the time from the first
// request to the last node drained. It then waits for every node to be
// given back (uncordoned), and returns when that was too.
func drainNodes(b *testing.B, c kubernetes.Interface, tracker *nodeTracker, nodes []string) (took time.Duration, back time.Time) {
	b.Helper()
	ctx := b.Context()
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	tracker.resetSucceeded()
	ended := make(chan string, len(nodes))
	var mu sync.Mutex
	endedSet := map[string]bool{}
	tracker.mu.Lock()
	tracker.onUpdate = func(n *corev1.Node) {
		if !want[n.Name] {
			return
		}
		st, _ := selfdrain.ParseStatus(n)
		if !st.Active() || st.Phase != selfdrain.PhaseSucceeded {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if endedSet[n.Name] {
			return
		}
		endedSet[n.Name] = true
		ended <- n.Name
	}
	tracker.mu.Unlock()
	defer func() {
		tracker.mu.Lock()
		tracker.onUpdate = nil
		tracker.mu.Unlock()
	}()
	from := time.Now()
	err := forEach(nodes, 32, func(n string) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"scale benchmark"}}}`, selfdrain.MaintenanceAnnotation)
		_, err := c.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	var last time.Time
	deadline := time.After(30 * time.Minute)
	var endWG sync.WaitGroup
	for range nodes {
		select {
		case n := <-ended:
			last = time.Now()
			endWG.Add(1)
			go func() {
				defer endWG.Done()
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, selfdrain.MaintenanceAnnotation)
				if _, err := c.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					b.Errorf("ending the maintenance of %s: %v", n, err)
				}
			}()
		case <-deadline:
			b.Fatalf("only %d of %d nodes drained in 30 minutes", tracker.succeededCount(nodes), len(nodes))
		}
	}
	endWG.Wait()
	testenv.WaitFor(b, 10*time.Minute, "every drained node given back", func() (bool, error) {
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			n := &list.Items[i]
			if want[n.Name] && n.Spec.Unschedulable {
				return false, nil
			}
		}
		return true, nil
	})
	return last.Sub(from), time.Now()
}

func waitAvailable(b *testing.B, c kubernetes.Interface, d *appsv1.Deployment) {
	b.Helper()
	testenv.WaitFor(b, 10*time.Minute, "the pool's Deployment available", func() (bool, error) {
		got, err := c.AppsV1().Deployments(d.Namespace).Get(b.Context(), d.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return got.Status.AvailableReplicas == *d.Spec.Replicas && got.Status.UpdatedReplicas == *d.Spec.Replicas, nil
	})
}

// restartAPIServer restarts kube-apiserver under the connected fleet and
// measures how long until every agent has its Node watch back, and the
// burst of requests that brings.
func restartAPIServer(b *testing.B, env *testenv.Env, audit *testenv.AuditReader, procs *procSampler, f *fleet, c kubernetes.Interface) phaseResult {
	b.Helper()
	agents := f.all()
	from := time.Now()
	if err := env.RestartAPIServer(b.Context()); err != nil {
		b.Fatal(err)
	}
	ready := time.Now()
	before, _ := scrapeAPIServer(b.Context(), c)
	want := map[string]bool{}
	for _, n := range agents {
		want["node-agent/"+n] = true
	}
	// Each agent's watch of its Node breaks with the apiserver and is
	// reopened; the first tries may come before kube-apiserver is ready
	// (and be refused while its RBAC cache fills). An agent is back at its
	// last watch request of the reconnection burst: the burst is over when
	// every agent has asked since the restart began and none has asked
	// for 5 s.
	back := map[string]time.Time{}
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		if err := audit.Read(); err != nil {
			b.Fatal(err)
		}
		for _, e := range window(audit.Events(), agentUser, from, time.Now().Add(time.Hour)) {
			if e.Verb == "watch" && e.Resource() == "nodes" && want[e.UserAgent] && e.Received.Time.After(back[e.UserAgent]) {
				back[e.UserAgent] = e.Received.Time
			}
		}
		var newest time.Time
		for _, at := range back {
			newest = maxTime(newest, at)
		}
		if len(back) == len(want) && time.Since(newest) > 5*time.Second {
			break
		}
	}
	var last time.Time
	for _, at := range back {
		last = maxTime(last, at)
	}
	settle(b, audit, 5*time.Second)
	to := time.Now()
	after, _ := scrapeAPIServer(b.Context(), c)
	p := phase(b, "kube-apiserver restart", from, to, audit, procs, before, after)
	p.extra = append(p.extra, fmt.Sprintf("kube-apiserver down and up again (ready) in %.1f s; %d of %d agents asked for their Node's watch again, the last of them %.1f s after it was ready",
		ready.Sub(from).Seconds(), len(back), len(want), last.Sub(ready).Seconds()))
	if len(back) < len(want) {
		b.Errorf("%d agents never watched their Node again after the restart", len(want)-len(back))
	}
	return p
}

func mib(v int64) float64 { return float64(v) / (1 << 20) }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envInts(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		if i, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && i > 0 {
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
