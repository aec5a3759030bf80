package scale

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

// results is everything the benchmark measured, for the table and pictures.
type results struct {
	machine   string
	n, pool   int
	nodeBytes [2]int
	objects   map[string]float64
	check     [][3]string
	phases    []phaseResult // start, idle, kured, restart
	rolls     []rollResult
	oneDrain  time.Duration
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
		w("**%s.** Requests by kind: %s.", p.name, orNone(formatKinds(p.byKind, float64(r.n))))
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
	w("## Rolling maintenance of %d nodes", r.pool)
	w("")
	w("Every pool node asked at once; each node's maintenance ended as soon as it was drained. One node's drain alone took %.2f s (the median of three); the ideal is ⌈pool ÷ limit⌉ × that.", r.oneDrain.Seconds())
	w("")
	w("| drain.maxConcurrentNodes | took | ideal | ratio | most draining at once | agent requests | on Leases | kube-apiserver cores | etcd cores |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, x := range r.rolls {
		w("| %d | %.1f s | %.1f s | %.2f | %d | %d | %d | %.2f | %.2f |", x.limit, x.total.Seconds(), x.ideal.Seconds(), x.total.Seconds()/x.ideal.Seconds(), x.most, x.requests, x.leaseReqs, x.apiCores, x.etcdCores)
	}
	w("")
	for _, x := range r.rolls {
		w("- limit %d, requests by kind: %s", x.limit, formatKinds(x.byKind, float64(r.pool)))
	}
	w("")
	w("## Storage")
	w("")
	w("A labelled Node is %d bytes of JSON (managed fields left out), of which %d are node-agent's and KubeVirt's labels and annotations. Objects in etcd at the end of idle: nodes %.0f, pods %.0f, leases %.0f, events %.0f.",
		r.nodeBytes[0], r.nodeBytes[1], r.objects["nodes"], r.objects["pods"], r.objects["leases.coordination.k8s.io"]+r.objects["leases"], r.objects["events"]+r.objects["events.events.k8s.io"])
	w("")
	w("![agent requests per second](requests.png)")
	w("")
	w("![nodes draining at once](draining.png)")

	if err := os.WriteFile(filepath.Join(outDir, "results.md"), []byte(md.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Log("\n" + md.String())

	// Requests per second over the whole run, phases shaded.
	end := r.origin
	for _, p := range r.phases {
		end = maxTime(end, p.to)
	}
	for _, x := range r.rolls {
		end = maxTime(end, x.from.Add(x.total))
	}
	secs := int(end.Sub(r.origin)/time.Second) + 1
	rps := perSecond(r.events, agentUser, r.origin, secs)
	kr := perSecond(r.events, kuredUser, r.origin, secs)
	xs := make([]float64, secs)
	for i := range xs {
		xs[i] = float64(i)
	}
	var bands []band
	for _, p := range r.phases {
		bands = append(bands, band{name: p.name, from: p.from.Sub(r.origin).Seconds(), to: p.to.Sub(r.origin).Seconds()})
	}
	for _, x := range r.rolls {
		bands = append(bands, band{name: fmt.Sprintf("rolling, limit %d", x.limit), from: x.from.Sub(r.origin).Seconds(), to: x.from.Add(x.total).Sub(r.origin).Seconds()})
	}
	c := chart{title: fmt.Sprintf("API requests per second, %d agents", r.n), xLabel: "seconds since the joint start", yLabel: "req/s",
		series: []series{{name: "node-agent fleet", x: xs, y: rps}, {name: "kured lock pattern", x: xs, y: kr}}, bands: bands}
	if err := c.write(filepath.Join(outDir, "requests.png")); err != nil {
		b.Fatal(err)
	}
	var ds []series
	for _, x := range r.rolls {
		s := series{name: fmt.Sprintf("limit %d", x.limit), step: true, x: []float64{0}, y: []float64{0}}
		for _, p := range x.points {
			s.x = append(s.x, p.at.Sub(x.from).Seconds())
			s.y = append(s.y, p.v)
		}
		s.x = append(s.x, x.total.Seconds())
		s.y = append(s.y, 0)
		ds = append(ds, s)
	}
	dc := chart{title: fmt.Sprintf("Nodes draining at once, rolling maintenance of %d nodes", r.pool), xLabel: "seconds since the requests", yLabel: "nodes", series: ds}
	if err := dc.write(filepath.Join(outDir, "draining.png")); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %s, requests.png and draining.png in %s", "results.md", outDir)
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
