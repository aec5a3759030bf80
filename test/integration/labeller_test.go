package integration

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/test/testenv"
)

// requireLibvirt skips (or, under make test, fails) without the QEMU driver.
func requireLibvirt(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so", "/usr/bin/qemu-system-x86_64"} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv(testenv.IntegrationEnv) == "1" {
				t.Fatalf("%s missing: run hack/install-deps.sh (a failure, not a skip, because %s=1)", p, testenv.IntegrationEnv)
			}
			t.Skipf("%s missing: run hack/install-deps.sh", p)
		}
	}
}

func TestLabellerKeepsLabelsTrue(t *testing.T) {
	requireLibvirt(t)
	root := t.TempDir()
	uri := "qemu:///embed?root=" + filepath.Join(root, "libvirt")

	// What `node-agent labels` prints for these inputs.
	cmd := exec.Command(agentBinary, "labels", "-o", "json", "--libvirt-uri", uri, "--state-dir", root)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node-agent labels: %v", err)
	}
	var want map[string]string
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("labels -o json: %v\n%s", err, out)
	}
	if len(want) < 10 || want["cpu-model.node.kubevirt.io/Penryn"] == "" && len(testenv.OwnedLabels(want)) != len(want) {
		t.Fatalf("labels printed too few labels or foreign ones: %v", want)
	}
	t.Logf("node-agent labels printed %d labels", len(want))

	// The agent runs as the shipped ServiceAccount (see identity_test.go),
	// which needs the DaemonSet's pods, so the whole control plane runs.
	env := fullEnv(t)
	installAgentIdentity(t, env)
	c := env.Client()
	ctx := context.Background()
	foreign := map[string]string{
		"team":                                 "virt",
		"cpu-model.node.kubevirt.io.example/x": "true", // looks similar, is not owned
		"feature.node.kubernetes.io/cpu-x":     "true",
	}
	stale := map[string]string{
		"cpu-model.node.kubevirt.io/Cascadelake-Server": "true",
		"cpu-vendor.node.kubevirt.io/WrongVendor":       "true",
	}
	planted := maps.Clone(foreign)
	maps.Copy(planted, stale)
	if err := env.AddNode(ctx, "node-1", testenv.WithNodeLabels(planted)); err != nil {
		t.Fatal(err)
	}

	agent := startAgent(t, env, "node-1", "--libvirt-uri", uri, "--shutdown-enabled=false")
	agent.WaitReady(t)

	labelsNow := func() map[string]string { return getNode(t, c, "node-1").Labels }
	testenv.WaitFor(t, 2*time.Minute, "labels equal to `node-agent labels`", func() (bool, error) {
		return len(testenv.DiffLabels(testenv.OwnedLabels(labelsNow()), want)) == 0, nil
	})
	got := labelsNow()
	t.Logf("node-1 carries %d owned labels, exactly the set `labels -o json` printed", len(testenv.OwnedLabels(got)))
	for k, v := range foreign {
		if got[k] != v {
			t.Errorf("foreign label %s changed: %q", k, got[k])
		}
	}
	for k := range stale {
		if _, ok := got[k]; ok && want[k] == "" {
			t.Errorf("stale label %s not removed", k)
		}
	}

	// Steady state: no writes. The sync counter moves only on "unchanged".
	changed := scrape(t, agent.MetricsAddr, `node_agent_label_sync_total{result="changed"}`)
	unchanged := scrape(t, agent.MetricsAddr, `node_agent_label_sync_total{result="unchanged"}`)
	if err := patchNode(c, "node-1", `{"metadata":{"annotations":{"unrelated":"x"}}}`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "a sync after an unrelated change", func() (bool, error) {
		return scrape(t, agent.MetricsAddr, `node_agent_label_sync_total{result="unchanged"}`) > unchanged, nil
	})
	if after := scrape(t, agent.MetricsAddr, `node_agent_label_sync_total{result="changed"}`); after != changed {
		t.Errorf("an unrelated Node change caused %v label writes", after-changed)
	}

	// Deleting an owned label brings it back.
	var victim string
	for k := range want {
		if strings.HasPrefix(k, kubevirtlabels.CPUFeatureLabelPrefix) {
			victim = k
			break
		}
	}
	if err := patchNode(c, "node-1", `{"metadata":{"labels":{"`+victim+`":null}}}`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testenv.WaitFor(t, 30*time.Second, victim+" back", func() (bool, error) { return labelsNow()[victim] == want[victim], nil })
	t.Logf("deleted %s by hand; the agent put it back after %s", victim, time.Since(start).Round(time.Millisecond))

	// skip-node=true: nothing is corrected.
	if err := patchNode(c, "node-1", `{"metadata":{"annotations":{"`+labeller.SkipNodeAnnotation+`":"true"}}}`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "skip-node seen", func() (bool, error) {
		return scrape(t, agent.MetricsAddr, `node_agent_label_sync_total{result="skipped"}`) > 0, nil
	})
	// Read the counter before the edit: the agent may see the edit before
	// the test reads the counter again.
	skipped := scrape(t, agent.MetricsAddr, `node_agent_label_sync_total{result="skipped"}`)
	if err := patchNode(c, "node-1", `{"metadata":{"labels":{"`+victim+`":null,"cpu-model.node.kubevirt.io/Fake":"true"}}}`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the agent saw the hand edit", func() (bool, error) {
		return scrape(t, agent.MetricsAddr, `node_agent_label_sync_total{result="skipped"}`) > skipped, nil
	})
	if l := labelsNow(); l[victim] != "" || l["cpu-model.node.kubevirt.io/Fake"] != "true" {
		t.Errorf("labels corrected while skip-node=true")
	}

	// skip-node=false resumes at once.
	if err := patchNode(c, "node-1", `{"metadata":{"annotations":{"`+labeller.SkipNodeAnnotation+`":"false"}}}`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "labels corrected after skip-node=false", func() (bool, error) {
		return len(testenv.DiffLabels(testenv.OwnedLabels(labelsNow()), want)) == 0, nil
	})
	// And removing the annotation keeps it going.
	if err := patchNode(c, "node-1", `{"metadata":{"annotations":{"`+labeller.SkipNodeAnnotation+`":"true"}}}`); err != nil {
		t.Fatal(err)
	}
	if err := patchNode(c, "node-1", `{"metadata":{"labels":{"`+victim+`":null}}}`); err != nil {
		t.Fatal(err)
	}
	if err := patchNode(c, "node-1", `{"metadata":{"annotations":{"`+labeller.SkipNodeAnnotation+`":null}}}`); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "labels corrected after skip-node removed", func() (bool, error) {
		return labelsNow()[victim] == want[victim], nil
	})
}

func TestLabellerReloadsConfig(t *testing.T) {
	requireLibvirt(t)
	root := t.TempDir()
	uri := "qemu:///embed?root=" + filepath.Join(root, "libvirt")
	// The agent runs as the shipped ServiceAccount (see identity_test.go),
	// which needs the DaemonSet's pods, so the whole control plane runs.
	env := fullEnv(t)
	installAgentIdentity(t, env)
	c := env.Client()
	if err := env.AddNode(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(root, "config.yaml")
	write := func(s string) {
		// Write and rename, as the kubelet updates a mounted ConfigMap.
		tmp := cfgPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgPath); err != nil {
			t.Fatal(err)
		}
	}
	// virtType qemu: QEMU's TCG can run a few models (Penryn, Nehalem,
	// Westmere) on any x86 host, where KVM may offer none that is not
	// obsolete.
	// labeller.libvirtURI is a flag only (pkg/config/trust.go).
	write("labeller:\n  virtType: qemu\nshutdown:\n  enabled: false\n")
	agent := startAgent(t, env, "node-1", "--config", cfgPath, "--libvirt-uri", uri)
	agent.WaitReady(t)

	var model string
	// cpu-model-migration labels the usable models, as KubeVirt does.
	testenv.WaitFor(t, 2*time.Minute, "cpu-model-migration labels", func() (bool, error) {
		for k := range getNode(t, c, "node-1").Labels {
			if strings.HasPrefix(k, kubevirtlabels.CPUModelMigrationLabelPrefix) {
				model = strings.TrimPrefix(k, kubevirtlabels.CPUModelMigrationLabelPrefix)
				return true, nil
			}
		}
		return false, nil
	})
	// Marking that model obsolete removes its label.
	write("labeller:\n  virtType: qemu\n  obsoleteCPUModels: [" + model + "]\nshutdown:\n  enabled: false\n")
	testenv.WaitFor(t, time.Minute, model+" label removed after reload", func() (bool, error) {
		_, ok := getNode(t, c, "node-1").Labels[kubevirtlabels.CPUModelMigrationLabelPrefix+model]
		return !ok, nil
	})
	t.Logf("reloaded obsoleteCPUModels=[%s]; its cpu-model-migration label went away", model)

	// An invalid reload is refused with an Event; the labels stay.
	before := testenv.OwnedLabels(getNode(t, c, "node-1").Labels)
	write("labeller:\n  minCpuModel: Haswell\n")
	testenv.WaitFor(t, time.Minute, "ConfigReloadRefused event", func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=node-1,reason=ConfigReloadRefused"})
		return err == nil && len(evs.Items) > 0, err
	})
	time.Sleep(3 * time.Second) // a poll period: a wrongly applied reload would show by now
	if d := testenv.DiffLabels(before, testenv.OwnedLabels(getNode(t, c, "node-1").Labels)); len(d) > 0 {
		t.Errorf("labels changed after a refused reload: %v", d)
	}

	// A ConfigMap writer who points labeller.libvirtURI at libvirt's ext
	// transport, which runs the URI's command: the key is refused in the
	// file whatever its value (it is taken only from the command line), at
	// the reload as at a start, and nothing runs.
	mark := filepath.Join(root, "ran")
	script := filepath.Join(root, "payload.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("labeller:\n  libvirtURI: qemu+ext:///system?command=" + script + "\n  virtType: qemu\nshutdown:\n  enabled: false\n")
	testenv.WaitFor(t, time.Minute, "ConfigReloadRefused event for qemu+ext", func() (bool, error) {
		evs, err := c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=node-1,reason=ConfigReloadRefused"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "labeller.libvirtURI is taken only from the DaemonSet's arguments (--libvirt-uri)") {
				t.Logf("refused: %s", e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	// An accepted reload starts a discovery with the new URI at once;
	// give a refused one the same time to show that it did not.
	time.Sleep(3 * time.Second)
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("libvirt's ext transport ran %s after a reload that should have been refused", script)
	}
}

func patchNode(c kubernetes.Interface, name, patch string) error {
	_, err := c.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// TestLabelsWithoutLibvirt is issue 3's acceptance 2 at the command line:
// with libvirt unreachable, cpuid still gives cpu-feature and cpu-vendor
// labels, the exit status is 0, and stderr says what was left out and why.
func TestLabelsWithoutLibvirt(t *testing.T) {
	cmd := exec.Command(agentBinary, "labels", "-o", "json", "--libvirt-uri", "qemu:///system?socket=/nonexistent/libvirt-sock")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("labels exited with %v; stderr:\n%s", err, stderr.String())
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("stdout is not a JSON map: %v\n%s", err, out)
	}
	features, vendors := 0, 0
	for k := range got {
		switch {
		case strings.HasPrefix(k, kubevirtlabels.CPUFeatureLabelPrefix):
			features++
		case strings.HasPrefix(k, kubevirtlabels.CPUVendorLabelPrefix):
			vendors++
		case strings.HasPrefix(k, kubevirtlabels.CPUModelLabelPrefix), strings.HasPrefix(k, kubevirtlabels.MachineTypeLabelPrefix):
			t.Errorf("label %s needs libvirt, yet was printed without it", k)
		}
	}
	if features == 0 || vendors != 1 {
		t.Errorf("got %d cpu-feature and %d cpu-vendor labels, want some and one", features, vendors)
	}
	msg := stderr.String()
	for _, want := range []string{"Left out", "cpu-model.node.kubevirt.io/*", "libvirt unreachable"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr lacks %q:\n%s", want, msg)
		}
	}
	t.Logf("without libvirt: %d cpu-feature labels, %d cpu-vendor label; stderr:\n%s", features, vendors, msg)
}

// TestLabelsCommandModelFamilies is issue 20's acceptance on the test host's
// embedded libvirt: `node-agent labels -o json` gives cpu-model-migration to
// every known, non-obsolete model of `virsh domcapabilities` (usable or not)
// and cpu-model to the usable ones only, as KubeVirt v1.7 and later do.
func TestLabelsCommandModelFamilies(t *testing.T) {
	requireLibvirt(t)
	root := filepath.Join(t.TempDir(), "libvirt")
	uri := "qemu:///embed?root=" + root

	// virsh first: while node-agent has the embedded root open, no other
	// process can open it.
	virsh := exec.Command("virsh", "-q", "-c", uri, "domcapabilities", "--virttype", "qemu")
	var stderr strings.Builder
	virsh.Stderr = &stderr
	out, err := virsh.Output()
	if err != nil {
		t.Fatalf("virsh domcapabilities: %v\n%s", err, stderr.String())
	}
	dc, err := testenv.ParseDomainCapabilities(out)
	if err != nil {
		t.Fatal(err)
	}
	known, usable := dc.ModelFamilies((labeller.Policy{}).IsObsolete)

	cmd := exec.Command(agentBinary, "labels", "-o", "json", "--libvirt-uri", uri, "--virt-type", "qemu", "--state-dir", t.TempDir())
	stderr.Reset()
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("node-agent labels: %v\n%s", err, stderr.String())
	}
	var labels map[string]string
	if err := json.Unmarshal(out, &labels); err != nil {
		t.Fatalf("labels -o json: %v\n%s", err, out)
	}
	family := func(prefix string) []string { return testenv.LabelFamily(labels, prefix) }
	if got := family(kubevirtlabels.CPUModelMigrationLabelPrefix); !slices.Equal(got, known) {
		t.Errorf("cpu-model-migration: %v\nwant every known model of virsh: %v", got, known)
	}
	if got := family(kubevirtlabels.CPUModelLabelPrefix); !slices.Equal(got, usable) {
		t.Errorf("cpu-model: %v\nwant the usable models of virsh: %v", got, usable)
	}
	t.Logf("virsh domcapabilities --virttype qemu: %d known and %d usable models (default obsolete list removed); labels: %d cpu-model-migration, %d cpu-model",
		len(known), len(usable), len(family(kubevirtlabels.CPUModelMigrationLabelPrefix)), len(family(kubevirtlabels.CPUModelLabelPrefix)))
	if len(known) == len(usable) {
		t.Log("every known model is usable here, so this run cannot tell the two rules apart")
	}
}
