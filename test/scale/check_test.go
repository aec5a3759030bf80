package scale

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

// checkSameCost runs the same number of agents as processes (bin/node-agent
// run, each with its own token) and in this process (internal/runagent),
// started together, and compares the requests each kind of agent made from
// its start to the end of a quiet minute. It returns the comparison as
// table rows: request kind, per process agent, per in-process agent.
func checkSameCost(b *testing.B, env *testenv.Env, f *fleet, audit *testenv.AuditReader, tracker *nodeTracker, procNodes, inProcNodes []string, dir string) [][3]string {
	b.Helper()
	bin, err := testenv.AgentBinary()
	if err != nil {
		b.Fatal(err)
	}
	from := time.Now()
	var procs []*testenv.Agent
	for _, n := range procNodes {
		kc := filepath.Join(dir, n+".kubeconfig")
		if err := testenv.WriteKubeconfig(kc, env.TokenConfig(f.tokens[n])); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, testenv.StartAgent(b, testenv.AgentOptions{Binary: bin, Kubeconfig: kc, Node: n, LogLevel: "info",
			Args: []string{"--shutdown-enabled=false"}, Dir: filepath.Join(dir, n)}))
	}
	f.start(inProcNodes)
	both := append(append([]string{}, procNodes...), inProcNodes...)
	testenv.WaitFor(b, 5*time.Minute, "the check's nodes labelled", func() (bool, error) {
		got, _ := tracker.labelledAmong(both)
		return got == len(both), nil
	})
	settle(b, audit, 5*time.Second)
	time.Sleep(time.Minute)
	to := time.Now()
	if err := audit.Read(); err != nil {
		b.Fatal(err)
	}
	isProc := map[string]bool{}
	for _, n := range procNodes {
		isProc["node-agent/"+n] = true
	}
	isIn := map[string]bool{}
	for _, n := range inProcNodes {
		isIn["node-agent/"+n] = true
	}
	counts := map[string][2]int{}
	for _, e := range window(audit.Events(), agentUser, from, to) {
		k := requestKind(e)
		c := counts[k]
		switch {
		case isProc[e.UserAgent]:
			c[0]++
		case isIn[e.UserAgent]:
			c[1]++
		default:
			continue
		}
		counts[k] = c
	}
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var rows [][3]string
	var tp, ti int
	for _, k := range kinds {
		c := counts[k]
		tp += c[0]
		ti += c[1]
		rows = append(rows, [3]string{k, per(c[0], len(procNodes)), per(c[1], len(inProcNodes))})
	}
	rows = append(rows, [3]string{"all", per(tp, len(procNodes)), per(ti, len(inProcNodes))})
	b.Logf("process and in-process agents, requests per agent from start to a quiet minute later (%d of each):", len(procNodes))
	for _, r := range rows {
		b.Logf("  %-40s %8s %8s", r[0], r[1], r[2])
	}
	for _, a := range procs {
		if err := a.Stop(b); err != nil {
			b.Logf("stopping %s: %v", a.LogPath, err)
		}
	}
	f.stop(inProcNodes)
	return rows
}

func per(n, of int) string { return fmt.Sprintf("%.2f", float64(n)/float64(of)) }

func jsonSize(v any) (int, error) {
	data, err := json.Marshal(v)
	return len(data), err
}

// machine says what the benchmark ran on.
func machine() string {
	var parts []string
	if out, err := readFirstLine("/proc/cpuinfo", "model name"); err == nil {
		parts = append(parts, out)
	}
	parts = append(parts, fmt.Sprintf("%d cores", numCPU()))
	if out, err := readFirstLine("/proc/meminfo", "MemTotal"); err == nil {
		parts = append(parts, out)
	}
	return strings.Join(parts, ", ")
}
