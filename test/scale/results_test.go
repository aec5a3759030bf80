package scale

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/node-agent/node-agent/test/testenv"
)

// results is everything the benchmark measured, for the table and pictures.
type results struct {
	machine   string
	n         int
	nodeBytes [2]int
	objects   map[string]float64
	check     [][3]string
	phases    []phaseResult // start, idle, kured, restart
	runs      []rollRun     // fast drains, then realistic ones
	origin    time.Time
	events    []testenv.AuditEvent
}

func (r results) write(b *testing.B) {
	b.Helper()
	var md strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&md, format+"\n", args...) }
	w("# make scale: %d agents on one control plane", r.n)
	w("")
	w("Measured %s on %s (%s, Go %s).", time.Now().UTC().Format("2006-01-02 15:04 UTC"), r.machine, runtime.GOOS+"/"+runtime.GOARCH, runtime.Version())
	w("kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok from bin/; %d kwok nodes; %d agents run in one process by internal/runagent, each with its own token bound to its DaemonSet pod, clients, TCP connections and informers. deploy/components/flowcontrol installed: %v.", r.n+2*checkSize, r.n, withAPF)
	w("")
	w("## Process and in-process agents cost the same")
	w("")
	w("Requests per agent, from %d agents of each kind started together to a quiet minute after their labels:", checkSize)
	w("")
	w("| request | agent process | agent in-process |")
	w("| --- | ---: | ---: |")
	for _, row := range r.check {
		w("| %s | %s | %s |", row[0], row[1], row[2])
	}
	w("")
	w("## Phases")
	w("")
	w("| phase | took | requests | per agent | peak req/s | kube-apiserver cores, max RSS | etcd cores, max RSS | the %d agents' cores | 429s (all clients) |", r.n)
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, p := range r.phases {
		w("| %s | %.1f s | %d | %.2f | %.0f | %.2f, %.0f MiB | %.2f, %.0f MiB | %.2f | %.0f |", p.name, p.to.Sub(p.from).Seconds(), p.requests,
			float64(p.requests)/float64(r.n), p.peakRPS, p.apiCores, mib(p.apiRSS), p.etcdCores, mib(p.etcdRSS), p.fleetCores, p.throttled)
	}
	w("")
	for _, p := range r.phases {
		w("**%s.** Requests by kind: %s.", p.name, orNone(formatKinds(p.byKind, float64(r.n), "agent")))
		for _, e := range p.extra {
			w("- %s", e)
		}
		w("")
	}
	if len(r.phases) > 2 {
		idle, kured := r.phases[1], r.phases[2]
		w("**Against kured's lock pattern** at N = %d: node-agent's idle fleet made %.1f requests per minute (its watches reopening); the pattern, every node polling every %s, made %.1f per minute (%d in %.0f s), and at kured's default period of one hour it would make %d per hour.",
			r.n, float64(idle.requests)/idle.to.Sub(idle.from).Minutes(), kuredPeriod, float64(kured.requests)/kured.to.Sub(kured.from).Minutes(), kured.requests, kured.to.Sub(kured.from).Seconds(), r.n)
		w("")
	}
	for _, run := range r.runs {
		writeRolls(w, run)
	}
	w("## Storage")
	w("")
	w("A labelled Node is %d bytes of JSON (managed fields left out), of which %d are node-agent's and KubeVirt's labels and annotations. Objects in etcd at the end of idle: nodes %.0f, pods %.0f, leases %.0f, events %.0f.",
		r.nodeBytes[0], r.nodeBytes[1], r.objects["nodes"], r.objects["pods"], r.objects["leases.coordination.k8s.io"]+r.objects["leases"], r.objects["events"]+r.objects["events.events.k8s.io"])
	w("")
	w("![agent requests per second](requests.png)")
	w("")
	for _, run := range r.runs {
		w("")
		w("![nodes draining at once, %s](%s)", run.workload.name, run.pictureName())
	}

	if err := os.WriteFile(filepath.Join(outDir, "results.md"), []byte(md.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Log("\n" + md.String())

	// Requests per second over the whole run, phases shaded.
	end := r.origin
	for _, p := range r.phases {
		end = maxTime(end, p.to)
	}
	for _, run := range r.runs {
		for _, x := range run.rolls {
			end = maxTime(end, x.from.Add(x.total))
		}
	}
	secs := int(end.Sub(r.origin)/time.Second) + 1
	var bands []band
	for _, p := range r.phases {
		bands = append(bands, band{name: p.name, from: p.from.Sub(r.origin).Seconds(), to: p.to.Sub(r.origin).Seconds()})
	}
	for _, run := range r.runs {
		for _, x := range run.rolls {
			bands = append(bands, band{name: fmt.Sprintf("%s, limit %d", run.workload.name, x.limit), from: x.from.Sub(r.origin).Seconds(), to: x.from.Add(x.total).Sub(r.origin).Seconds()})
		}
	}
	rp, err := requestsPlot(fmt.Sprintf("API requests per second, %d agents", r.n), []rateSeries{
		{name: "node-agent fleet", colour: colourAgents, perSec: perSecond(r.events, agentUser, r.origin, secs)},
		{name: "node-agent-coordinator", colour: colourCoordinator, perSec: perSecond(r.events, coordinatorUser, r.origin, secs)},
		{name: "kured lock pattern", colour: colourKured, perSec: perSecond(r.events, kuredUser, r.origin, secs)},
	}, bands)
	if err != nil {
		b.Fatal(err)
	}
	if err := savePNG(filepath.Join(outDir, "requests.png"), []*plot.Plot{rp}, 10*vg.Inch, 4*vg.Inch); err != nil {
		b.Fatal(err)
	}
	for _, run := range r.runs {
		var dps []*plot.Plot
		for _, x := range run.rolls {
			p, err := drainingPlot(run.workload.name, x, run.pool)
			if err != nil {
				b.Fatal(err)
			}
			dps = append(dps, p)
		}
		if len(dps) > 0 {
			if err := savePNG(filepath.Join(outDir, run.pictureName()), dps, 10*vg.Inch, 3*vg.Inch); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Logf("wrote results.md, requests.png and the draining pictures in %s", outDir)
}

// writeRolls writes one run's section: its table, where a slot's time
// goes, and the requests per drained node.
func writeRolls(w func(string, ...any), run rollRun) {
	wl := run.workload
	w("## Rolling maintenance of %d nodes, %s", run.pool, wl.name)
	w("")
	if len(wl.terminations) == 0 {
		w("The pool runs %d pods per node, which kwok deletes as soon as they are evicted, so a drain is short and the hand-over of each slot weighs most.", podsPerPoolNode)
	} else {
		var ts []string
		for _, t := range wl.terminations {
			ts = append(ts, fmt.Sprintf("%.0f", t.Seconds()))
		}
		w("The pool runs %d pods per node, from %d Deployments whose evicted pods stay Terminating %s s (kwok's pod-delete Stage, delayed by the pod's %s annotation; terminationGracePeriodSeconds the same), so a drain lasts as long as its slowest pod and a node's agent waits for each pod to be gone. The pool is SCALE_SLOW_POOL nodes: at limit L, a run takes about ⌈pool ÷ L⌉ minutes.",
			podsPerPoolNode, len(wl.terminations), strings.Join(ts, ", "), testenv.PodDeleteDelayAnnotation)
	}
	w("")
	w("Every pool node asked at once; each node's maintenance ended as soon as it was drained. The drain slot coordinator (%d replicas of internal/runcoordinator in this process, one leading, with %s) restarted with each limit. One node's drain alone took %.2f s (the median of three); the ideal is ⌈pool ÷ limit⌉ × that.", coordinatorReplicas, qpsNote(), run.one.Seconds())
	w("")
	w("A node waits from its maintenance request until its status is Running, and drains while it is Running; it holds a slot while the coordinator's grant on its Node says Granted and answers the node's request (as the agent reads it: once the agent has withdrawn its request, the grant holds nothing, and the coordinator clears it after its next grants). The means are over the time in which at least `limit` nodes waited, from the benchmark's watch of every Node; slots busy is the mean holding a slot then ÷ the limit. Requests are counted from the requests until every node was given back and the agents were quiet.")
	w("")
	w("| slots.limit | took | ideal | ratio | most draining at once | mean draining while ≥ limit wait | mean holding a slot then | slots busy | that time | kube-apiserver cores | etcd cores |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, x := range run.rolls {
		w("| %d | %.1f s | %.1f s | %.2f | %d | %s | %s | %s | %.1f s | %.2f | %.2f |", x.limit, x.total.Seconds(), x.ideal.Seconds(), x.total.Seconds()/x.ideal.Seconds(), x.most,
			fmtMean(x.meanDraining), fmtMean(x.meanHolding), fmtPercent(x.busy()), x.waitingFor, x.apiCores, x.etcdCores)
	}
	w("")
	w("Where a slot's time goes, per node (medians): from the grant until the status is Running; Running (the drain); from the end of the drain until the slot is given back (the agent withdraws its request, which its grant then no longer answers):")
	w("")
	w("| slots.limit | granted → Running | Running | drained → slot given back |")
	w("| ---: | ---: | ---: | ---: |")
	for _, x := range run.rolls {
		w("| %d | %.2f s | %.2f s | %.2f s |", x.limit, x.steps.grantToRunning, x.steps.running, x.steps.drainedToReleased)
	}
	w("")
	w("Requests per drained node:")
	w("")
	w("| slots.limit | agents, all | agents on Nodes | agents on Leases | coordinator, all | coordinator on Nodes | on slot Leases | on the election Lease |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	d := float64(run.pool)
	for _, x := range run.rolls {
		w("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |", x.limit, float64(x.agentRequests)/d, float64(x.cost.agentNodes)/d, float64(x.cost.agentLeases)/d,
			float64(x.coordinatorRequests)/d, float64(x.cost.coordinatorNodes)/d, float64(x.cost.slotLeases)/d, float64(x.cost.electionLeases)/d)
	}
	w("")
	for _, x := range run.rolls {
		w("- limit %d, the agents' requests by kind: %s", x.limit, orNone(formatKinds(x.agentKinds, d, "drained node")))
		w("- limit %d, the coordinator's requests by kind: %s", x.limit, orNone(formatKinds(x.coordinatorKinds, d, "drained node")))
	}
	w("")
	if len(wl.terminations) > 0 {
		return
	}
	w("Before the coordinator (%s), each agent took and renewed a slot Lease itself:", before.run)
	w("")
	w("| slots.limit | took | ratio | mean draining while ≥ limit wait | agents on Nodes per drained node | agents on Leases per drained node |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, x := range before.rolls {
		w("| %d | %.1f s | %.2f | %s | %.2f | %.2f |", x.limit, x.took, x.ratio, x.meanDraining, x.nodes, x.leases)
	}
	w("")
}

// pictureName is the file of the run's draining picture: draining.png for
// the fast drains, as before the realistic ones were added.
func (run rollRun) pictureName() string {
	if len(run.workload.terminations) == 0 {
		return "draining.png"
	}
	return "draining-realistic.png"
}

func fmtPercent(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f %%", 100*v)
}

func fmtMean(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

// before are the rolling maintenances of the run checked in before the
// drain slot coordinator (docs/scale/results.md of 2026-11-25, N = 1,000, a
// pool of 100): the agents took and renewed slot Leases themselves. Node
// requests are patch nodes, patch nodes/status, get nodes and watch nodes
// of its breakdown; the mean draining while the limit waited was not
// measured then (its picture shows 8 to 20 draining at limit 20, in waves).
var before = struct {
	run   string
	rolls []struct {
		limit         int
		took, ratio   float64
		meanDraining  string
		nodes, leases float64
	}
}{
	run: "the run of 2026-11-25 at N = 1,000, a pool of 100",
	rolls: []struct {
		limit         int
		took, ratio   float64
		meanDraining  string
		nodes, leases float64
	}{
		{1, 52.8, 1.19, "not measured", 12.27, 5.65},
		{5, 39.3, 4.42, "not measured", 12.43, 9.08},
		{20, 40.5, 18.25, "not measured (8 to 20 in waves)", 13.80, 10.90},
	},
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func numCPU() int { return runtime.NumCPU() }

// readFirstLine returns the value of the first "key: value" line of path
// whose key is key.
func readFirstLine(path, key string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s: no %s", path, key)
}
