package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-agent/node-agent/test/testenv"
)

// kuredIdleRSSMiB is kured's idle RSS as issue 14 gives it. The Go module
// proxy here serves no version of github.com/kubereboot/kured (v1.13.2 to
// v1.17.1 and the old github.com/weaveworks/kured were refused on
// 2026-11-23), so the table prints it as a reference, not a measurement.
const kuredIdleRSSMiB = 59

// idleFor is how long the agents idle before their memory is read, as the
// issue's acceptance asks.
const idleFor = 60 * time.Second

// BenchmarkFootprint measures what node-agent costs a node: binary, discovery
// helper and image size, idle memory with the labeller on and off (host processes, whose
// shutdown guard finds no system bus and retries) and in a systemd-nspawn
// machine whose logind holds the guard's delay lock, the peak of a discovery
// in the daemon and in its child, and the time from start to labels with an
// empty and with a warm libvirt cache.
// It prints figures and asserts none.
func BenchmarkFootprint(b *testing.B) {
	opts := testenv.Options{Logger: slog.New(slog.DiscardHandler)}
	dir := b.TempDir()
	agentBin := agentBinary(b)
	env := testenv.StartForTest(b, opts)
	ctx := b.Context()
	const on, off, inMachine = "footprint-labeller-on", "footprint-labeller-off", "footprint-logind"
	if err := env.AddNodes(ctx, []string{on, off, inMachine}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		f := footprint{}
		f.binary = fileSize(agentBin)
		f.helper = fileSize(testenv.HelperBinary(agentBin))
		f.image = imageSize(b)

		onDir := filepath.Join(dir, "on")
		start := time.Now()
		a := startAgent(b, env, agentBin, on, onDir)
		f.cold = waitLabels(b, env, a, on, start)
		f.daemonDiscoveryPeak = procStatus(a.Cmd.Process.Pid, "VmHWM")
		offDir := filepath.Join(dir, "off")
		aOff := startAgent(b, env, agentBin, off, offDir, "--labeller-enabled=false")
		aOff.WaitReady(b)
		machine := startLogindAgent(ctx, b, env, agentBin, inMachine)

		b.Logf("the agents idle for %s", idleFor)
		time.Sleep(idleFor)
		f.idleOn = readMemory(b, a)
		f.idleOff = readMemory(b, aOff)
		if machine != nil {
			f.idleLogind = machine.memory(ctx, b)
		}
		f.childPeak = maxChildRSS(b, a)

		// Warm: the same state directory, a new process, the labels gone.
		a.stop(b)
		if _, err := env.Client().CoreV1().Nodes().Patch(ctx, on, types.MergePatchType, []byte(`{"metadata":{"labels":null}}`), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		a = startAgent(b, env, agentBin, on, onDir)
		f.warm = waitLabels(b, env, a, on, start)
		f.print(b)
	}
}

type footprint struct {
	binary, helper, image          int64
	cold, warm                     time.Duration
	daemonDiscoveryPeak, childPeak int64
	idleOn, idleOff                memory
	idleLogind                     memory // zero without the machine
}

// memory is one process's memory as the kernel and the Go runtime see it.
type memory struct {
	rss          int64            // VmRSS
	rollup       map[string]int64 // /proc/PID/smaps_rollup, bytes
	heapInuse    float64          // go_memstats_heap_inuse_bytes
	stackInuse   float64          // go_memstats_stack_inuse_bytes
	goSys        float64          // go_memstats_sys_bytes: all the runtime got from the OS
	heapReleased float64          // go_memstats_heap_released_bytes
}

func (f footprint) print(b *testing.B) {
	var s strings.Builder
	row := func(what, value string) { fmt.Fprintf(&s, "| %-58s | %14s |\n", what, value) }
	fmt.Fprintf(&s, "\nnode-agent footprint (this machine, %s)\n\n", loadAverage())
	row("figure", "value")
	row(strings.Repeat("-", 58), strings.Repeat("-", 14))
	row("binary size (stripped)", mibString(f.binary))
	row("discovery helper size (stripped; links libvirt)", mibString(f.helper))
	row("image size (bin/node-agent-image.txt)", f.imageString())
	row(fmt.Sprintf("idle RSS after %s, labeller and shutdown guard on", idleFor), mibString(f.idleOn.rss))
	row(fmt.Sprintf("idle RSS after %s, labeller off, shutdown guard on", idleFor), mibString(f.idleOff.rss))
	row(fmt.Sprintf("idle RSS after %s, nspawn machine, logind lock held", idleFor), f.idleLogind.rssString())
	row("daemon peak RSS over start-up and a discovery (VmHWM)", mibString(f.daemonDiscoveryPeak))
	row("peak RSS during a discovery: child (ru_maxrss)", mibString(f.childPeak))
	row("peak RSS during a drain of 110 pods", "BenchmarkDrain")
	row("time from start to labels, empty libvirt cache (cold)", secs(f.cold))
	row("time from start to labels, warm libvirt cache", secs(f.warm))
	row("kured idle RSS (reference; the proxy serves no kured)", fmt.Sprintf("%d MiB", kuredIdleRSSMiB))
	fmt.Fprintf(&s, "\nidle memory breakdown (MiB)      labeller on  labeller off  in a machine\n")
	for _, k := range []string{"Rss", "Pss_Anon", "Pss_File", "Anonymous", "Shared_Clean", "Private_Clean", "Private_Dirty"} {
		fmt.Fprintf(&s, "  smaps_rollup %-18s %10.1f  %12.1f  %12.1f\n", k, mib(f.idleOn.rollup[k]), mib(f.idleOff.rollup[k]), mib(f.idleLogind.rollup[k]))
	}
	for _, m := range []struct {
		name             string
		on, off, machine float64
	}{
		{"Go heap in use", f.idleOn.heapInuse, f.idleOff.heapInuse, f.idleLogind.heapInuse},
		{"Go stacks in use", f.idleOn.stackInuse, f.idleOff.stackInuse, f.idleLogind.stackInuse},
		{"Go runtime total from the OS", f.idleOn.goSys, f.idleOff.goSys, f.idleLogind.goSys},
		{"Go heap released to the OS", f.idleOn.heapReleased, f.idleOff.heapReleased, f.idleLogind.heapReleased},
	} {
		fmt.Fprintf(&s, "  %-31s %10.1f  %12.1f  %12.1f\n", m.name, m.on/(1<<20), m.off/(1<<20), m.machine/(1<<20))
	}
	b.Log(s.String())
}

func (m memory) rssString() string {
	if m.rss <= 0 {
		return "not measured"
	}
	return mibString(m.rss)
}

func (f footprint) imageString() string {
	if f.image <= 0 {
		return "no image (make image)"
	}
	return mibString(f.image)
}

// labelPoll is how often waitLabels reads the Node. It was 50 ms, which
// added 25 ms on average to a warm start of about 0.15 s.
const labelPoll = 5 * time.Millisecond

// waitLabels waits until the Node has a libvirt-derived label, and returns
// the time since start.
func waitLabels(b *testing.B, env *testenv.Env, a *agentProcess, node string, start time.Time) time.Duration {
	b.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		n, err := env.Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil {
			for k := range n.Labels {
				if strings.HasPrefix(k, "host-model-cpu.node.kubevirt.io/") {
					return time.Since(start)
				}
			}
		}
		time.Sleep(labelPoll)
	}
	b.Fatalf("no host-model-cpu label on %s after 3 minutes\n%s", node, a.Tail(40))
	return 0
}

func readMemory(b *testing.B, a *agentProcess) memory {
	b.Helper()
	resp, err := http.Get("http://" + a.MetricsAddr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return memoryOf(a.Cmd.Process.Pid, string(body))
}

// memoryOf is process pid's memory, with the Go runtime's figures from its
// metrics exposition.
func memoryOf(pid int, exposition string) memory {
	return memory{rss: procStatus(pid, "VmRSS"), rollup: smapsRollup(pid),
		heapInuse:    metricValue(exposition, "go_memstats_heap_inuse_bytes"),
		stackInuse:   metricValue(exposition, "go_memstats_stack_inuse_bytes"),
		goSys:        metricValue(exposition, "go_memstats_sys_bytes"),
		heapReleased: metricValue(exposition, "go_memstats_heap_released_bytes"),
	}
}

var maxRSSField = regexp.MustCompile(`msg="Discovery child finished".* maxRSSBytes=(\d+)`)

// maxChildRSS is the largest ru_maxrss the agent logged for a discovery child.
func maxChildRSS(b *testing.B, a *agentProcess) int64 {
	data, err := os.ReadFile(a.LogPath)
	if err != nil {
		b.Fatal(err)
	}
	var peak int64
	for _, m := range maxRSSField.FindAllStringSubmatch(string(data), -1) {
		if v, _ := strconv.ParseInt(m[1], 10, 64); v > peak {
			peak = v
		}
	}
	return peak
}

// procStatus reads a "kB" field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return kB(v)
		}
	}
	return -1
}

func smapsRollup(pid int) map[string]int64 {
	out := map[string]int64{}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.HasSuffix(v, "kB") {
			out[k] = kB(v)
		}
	}
	return out
}

func kB(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
	return n << 10
}

func metricValue(exposition, name string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// imageSize reads the compressed size `make image` recorded
// (archive_bytes in bin/node-agent-image.txt), or -1.
func imageSize(b *testing.B) int64 {
	s, err := testenv.ReadImageSummary(filepath.Join(binDir(b), testenv.ImageSummaryFile))
	if err != nil || s.ArchiveBytes == 0 {
		return -1
	}
	return s.ArchiveBytes
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func mibString(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", mib(n))
}
