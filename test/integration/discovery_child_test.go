package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/hostcpu/subprocess"
	"github.com/node-agent/node-agent/test/testenv"
)

// discoveryFaultEnv is cmd/node-agent-discover's faultEnv: a file whose
// content makes the discovery helper hang, die on a signal or print garbage.
const discoveryFaultEnv = "NODE_AGENT_TEST_DISCOVERY_FAULT"

// TestLabellerSurvivesBrokenDiscovery runs the real agent with the real
// libvirt and breaks its discovery child three ways. Each time the labels
// stay, a CPUDiscoveryFailed Event says why, and once the child is healed the
// next period discovers again. The daemon never maps libvirt's libraries.
func TestLabellerSurvivesBrokenDiscovery(t *testing.T) {
	requireLibvirt(t)
	env := testenv.StartForTest(t, testenv.Options{})
	c := env.Client()
	ctx := context.Background()
	if err := env.AddNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	fault := filepath.Join(t.TempDir(), "fault")
	setFault := func(s string) {
		if err := os.WriteFile(fault, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setFault("")
	// The agent, and so each child it starts, inherits the environment.
	t.Setenv(discoveryFaultEnv, fault)

	// Warm libvirt's QEMU capabilities cache first, so that each of the
	// agent's discoveries takes milliseconds and a short timeout catches
	// only the hang.
	uri := "qemu:///embed?root=" + filepath.Join(t.TempDir(), "libvirt")
	start := time.Now()
	if out, err := exec.Command(agentBinary, "labels", "--libvirt-uri", uri).CombinedOutput(); err != nil {
		t.Fatalf("node-agent labels: %v\n%s", err, out)
	}
	t.Logf("cold discovery (node-agent labels, empty embedded root): %s", time.Since(start).Round(time.Millisecond))
	// libvirt rewrites a QEMU binary's cache file whenever it probes again,
	// so unchanged files after the agent's discoveries mean none re-probed.
	cacheDir := filepath.Join(strings.TrimPrefix(uri, "qemu:///embed?root="), "cache", "qemu", "capabilities")
	probed := cacheFiles(t, cacheDir)
	if len(probed) == 0 {
		t.Fatalf("no QEMU capabilities cache in %s after a discovery", cacheDir)
	}
	// A second discovery with nothing changed says how long a warm one
	// takes here, and whether libvirt keeps its cache at all: with a
	// placeholder file over /dev/kvm (a regular file, as some harnesses hide
	// KVM) libvirt counts KVM as usable, QEMU finds none, and libvirt probes
	// again on every connection. The hang timeout is then sized to a warm
	// discovery here, and the no-re-probe check below has nothing to check.
	start = time.Now()
	if out, err := exec.Command(agentBinary, "labels", "--libvirt-uri", uri).CombinedOutput(); err != nil {
		t.Fatalf("node-agent labels: %v\n%s", err, out)
	}
	warm := time.Since(start)
	libvirtKeepsCache := maps.Equal(cacheFiles(t, cacheDir), probed)
	timeout := max(3*time.Second, (3 * warm).Round(time.Second))
	t.Logf("warm discovery: %s; libvirt kept its QEMU cache: %v (/dev/kvm a KVM device: %v); discovery timeout %s",
		warm.Round(time.Millisecond), libvirtKeepsCache, hostcpu.KVMDevice(hostcpu.KVMDevicePath), timeout)
	probed = cacheFiles(t, cacheDir)

	const period = 2 * time.Second
	agent := startAgent(t, env, "node-1", "--libvirt-uri="+uri, "--shutdown-enabled=false",
		"--rediscovery-period="+period.String(), "--discovery-timeout="+timeout.String())
	agent.WaitReady(t)

	labelsNow := func() map[string]string { return testenv.OwnedLabels(getNode(t, c, "node-1").Labels) }
	testenv.WaitFor(t, time.Minute, "CPU labels from libvirt", func() (bool, error) {
		for k := range labelsNow() {
			if strings.HasPrefix(k, "host-model-cpu.node.kubevirt.io/") { // libvirt-only
				return true, nil
			}
		}
		return false, nil
	})
	want := labelsNow()
	t.Logf("node-1 carries %d CPU labels", len(want))

	// libvirt is loaded by the children only.
	mapsData, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", agent.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if lines := libvirtMappings(string(mapsData)); lines != "" {
		t.Errorf("the daemon mapped libvirt's libraries:\n%s", lines)
	}

	discoveries := func() float64 {
		return scrape(t, agent.MetricsAddr, `node_agent_label_discovery_duration_seconds_count{source="libvirt"}`)
	}
	for _, tc := range []struct{ fault, why string }{
		{"hang", "gave no answer within " + timeout.String() + " and was killed"},
		{"signal", "died on signal killed"},
		{"garbage", "printed no valid answer"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			setFault(tc.fault)
			testenv.WaitFor(t, time.Minute, "a CPUDiscoveryFailed Event saying "+tc.why, func() (bool, error) {
				evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node-1,reason=CPUDiscoveryFailed"})
				if err != nil {
					return false, err
				}
				for _, e := range evs.Items {
					if strings.Contains(e.Message, tc.why) {
						t.Logf("Event: %s", e.Message)
						return true, nil
					}
				}
				return false, nil
			})
			if got := labelsNow(); !maps.Equal(got, want) {
				t.Errorf("labels changed after a failed discovery: %v", testenv.DiffLabels(got, want))
			}
			before := discoveries()
			setFault("")
			testenv.WaitFor(t, time.Minute, "a successful discovery in a later period", func() (bool, error) {
				return discoveries() > before, nil
			})
			if got := labelsNow(); !maps.Equal(got, want) {
				t.Errorf("labels changed after the child healed: %v", testenv.DiffLabels(got, want))
			}
		})
	}
	if now := cacheFiles(t, cacheDir); libvirtKeepsCache && !maps.Equal(now, probed) {
		t.Errorf("libvirt probed QEMU again during the agent's discoveries: cache files %v, after the first discovery %v", now, probed)
	}
	if err := agent.Stop(t); err != nil {
		t.Errorf("node-agent exited with %v", err)
	}
	// The child's stderr reached the agent's log.
	if !strings.Contains(agent.Log(), "test fault: hanging") {
		t.Errorf("the hanging child's stderr is not in the agent's log")
	}
}

// TestLabellerReportsMissingHelper runs the agent without its discovery
// helper: the agent stays up, and the labeller reports the missing file as it
// reports any failed discovery, with the path it tried and how to name
// another.
func TestLabellerReportsMissingHelper(t *testing.T) {
	env := testenv.StartForTest(t, testenv.Options{})
	c := env.Client()
	ctx := context.Background()
	if err := env.AddNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "node-agent-discover")
	t.Setenv(subprocess.HelperEnv, missing)
	agent := startAgent(t, env, "node-1", "--libvirt-uri=qemu:///system?socket=/nonexistent/libvirt-sock",
		"--shutdown-enabled=false", "--rediscovery-period=2s")
	agent.WaitReady(t)
	want := "discovery helper " + missing + " ($" + subprocess.HelperEnv + "): no such file"
	testenv.WaitFor(t, time.Minute, "a CPUDiscoveryFailed Event naming the missing helper", func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node-1,reason=CPUDiscoveryFailed"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, want) {
				t.Logf("Event: %s", e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err := agent.Stop(t); err != nil {
		t.Errorf("node-agent exited with %v", err)
	}
}

// libvirtMappings returns the first lines of a /proc/PID/maps that map one
// of libvirt's libraries (libvirt.so.0, its drivers). It looks at file names
// only: a directory may be called libvirt too, such as a checkout's.
func libvirtMappings(maps string) string {
	var out []string
	for _, l := range strings.Split(maps, "\n") {
		// address perms offset dev inode pathname
		if f := strings.Fields(l); len(f) >= 6 && strings.Contains(filepath.Base(strings.Join(f[5:], " ")), "libvirt") && len(out) < 3 {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// cacheFiles maps each file in dir to its modification time.
func cacheFiles(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi.ModTime()
	}
	return out
}
