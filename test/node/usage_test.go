package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testUsage reports the agent container's memory (its cgroup's usage and the
// agent's RSS) and CPU after 60 s idle. deploy/daemonset.yaml's requests
// and limits are set from these figures. It reports; it asserts no bound.
func (b *bed) testUsage(t *testing.T) {
	pod := b.agentPod(t, time.Minute, "")
	pid, err := b.node.ContainerPID(t.Context(), agentNS, pod.Name, "node-agent")
	if err != nil {
		t.Fatal(err)
	}
	memCg, err := cgroupDir(pid, "memory")
	if err != nil {
		t.Fatal(err)
	}
	cpuCg, err := cgroupDir(pid, "cpuacct")
	if err != nil {
		t.Fatal(err)
	}
	cpu0 := readInt(t, filepath.Join(cpuCg, "cpuacct.usage"))
	t0 := time.Now()
	const idle = 60 * time.Second
	time.Sleep(idle)
	cpu1 := readInt(t, filepath.Join(cpuCg, "cpuacct.usage"))
	wall := time.Since(t0)

	usage := readInt(t, filepath.Join(memCg, "memory.usage_in_bytes"))
	peak := readInt(t, filepath.Join(memCg, "memory.max_usage_in_bytes"))
	stat := readKV(t, filepath.Join(memCg, "memory.stat"))
	status := readKV(t, fmt.Sprintf("/proc/%d/status", pid))
	// The working set is what kubectl top and the kubelet's eviction
	// count (cAdvisor): the usage less the inactive file pages, which the
	// kernel reclaims first.
	t.Logf("agent container after %s idle: cgroup memory usage %.1f MiB (rss %.1f MiB, cache %.1f MiB, of which inactive %.1f MiB), working set %.1f MiB, peak %.1f MiB; agent VmRSS %s, VmHWM %s; CPU %.1f millicores over the %s",
		idle, mib(usage), mib(stat["total_rss"]), mib(stat["total_cache"]), mib(stat["total_inactive_file"]),
		mib(usage)-mib(stat["total_inactive_file"]), mib(peak),
		status["VmRSS"], status["VmHWM"], float64(cpu1-cpu0)/float64(wall.Nanoseconds())*1000, wall.Round(time.Second))
}

// cgroupDir returns the cgroup v1 directory of pid for a controller.
func cgroupDir(pid int, controller string) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == controller {
				// The mount may be named after several controllers
				// (cpu,cpuacct); find the directory that has it.
				matches, _ := filepath.Glob("/sys/fs/cgroup/*" + controller + "*" + f[2])
				for _, m := range matches {
					if fi, err := os.Stat(m); err == nil && fi.IsDir() {
						return m, nil
					}
				}
			}
		}
	}
	return "", fmt.Errorf("no %s cgroup of pid %d", controller, pid)
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func readKV(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		// "VmRSS:\t 1234 kB" in /proc/PID/status, "rss 1234" in memory.stat.
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			k, v, ok = strings.Cut(line, " ")
		}
		if ok {
			out[strings.TrimSuffix(k, ":")] = strings.TrimSpace(v)
		}
	}
	return out
}

func mib[T int64 | string](v T) float64 {
	switch x := any(v).(type) {
	case int64:
		return float64(x) / (1 << 20)
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return float64(n) / (1 << 20)
	}
	return 0
}
