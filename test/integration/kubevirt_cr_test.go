package integration

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/node-agent/node-agent/pkg/kubevirtcr"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestLabellerFollowsKubeVirtCR is issue 31's items 3 and 4 on the real
// control plane, with the agent running as the shipped ServiceAccount (so
// deploy/rbac.yaml's read-only grant on kubevirts is what it reads with) and
// a kubevirts.kubevirt.io CRD of the test's own (testdata/kubevirt-crd.yaml):
//   - the CRD served but no CR: node-agent's configuration applies (its
//     default minimum model Penryn, KubeVirt's default obsolete list);
//   - a CR with obsoleteCPUModels: its list replaces the defaults,
//     obsolete-host-model follows it, no minimum model is subtracted;
//   - a change of the CR relabels the node: the CrossArchitectureVirtualization
//     gate adds kubevirt.io/vm-arch-amd64;
//   - the CRD deleted: node-agent's configuration again;
//   - the log says which settings won, once and on each change, and
//     `node-agent labels --kubeconfig` prints the same labels and settings.
//
// Each expected label set is what `node-agent labels` prints for the same
// host and settings; the properties the issue names are also checked one by
// one. A CRD installed after the agent started is picked up at the next
// discovery recheck, 30 minutes later; kubevirtcr's unit tests show that on
// a fake clock.
func TestLabellerFollowsKubeVirtCR(t *testing.T) {
	requireLibvirt(t)
	env := fullEnv(t)
	installAgentIdentity(t, env)
	ctx := t.Context()
	c := env.Client()
	dyn, err := dynamic.NewForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	kb := &deployBed{env: env, c: c, kubectl: kubectlBinary(t, testenv.DefaultOptions())}
	crd := filepath.Join("testdata", "kubevirt-crd.yaml")
	if _, err := kb.run(t, nil, "apply", "--server-side", "--field-manager=kubevirt-test", "-f", crd); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "kubevirts.kubevirt.io served", func() (bool, error) {
		st, err := kubevirtcr.Read(ctx, c.Discovery(), dyn)
		return err == nil && st.Note != kubevirtcr.NotServed, nil
	})
	if err := env.AddNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}

	// `node-agent labels` with its own embedded libvirt root (one process
	// at a time may open a root), as admin, for each state of the CR.
	labelsRoot := t.TempDir()
	labels := func(what string) (map[string]string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, agentBinary, "labels", "-o", "json", "--virt-type", "qemu",
			"--libvirt-uri", "qemu:///embed?root="+filepath.Join(labelsRoot, "libvirt"), "--state-dir", labelsRoot,
			"--kubeconfig", env.KubeconfigPath())
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node-agent labels (%s): %v\n%s", what, err, stderr.String())
		}
		var m map[string]string
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("node-agent labels (%s): %v\n%s", what, err, out)
		}
		t.Logf("node-agent labels, %s: %d labels; %s", what, len(m), firstLine(stderr.String(), "Settings:"))
		return m, stderr.String()
	}
	root := t.TempDir()
	agent := startAgent(t, env, "node-1", "--libvirt-uri", "qemu:///embed?root="+filepath.Join(root, "libvirt"),
		"--virt-type", "qemu", "--shutdown-enabled=false")
	agent.WaitReady(t)
	owned := func() map[string]string { return testenv.OwnedLabels(getNode(t, c, "node-1").Labels) }
	waitLabels := func(what string, want map[string]string) {
		t.Helper()
		testenv.WaitFor(t, 2*time.Minute, "node-1 labelled as `node-agent labels` prints, "+what, func() (bool, error) {
			return len(testenv.DiffLabels(owned(), want)) == 0, nil
		})
	}

	// No CR: node-agent's configuration.
	own, stderr := labels("no CR")
	if !strings.Contains(stderr, "Settings: node-agent's configuration") || !strings.Contains(stderr, "no KubeVirt CR") {
		t.Errorf("labels without a CR says:\n%s", stderr)
	}
	waitLabels("no CR", own)
	hostModel := ""
	for k := range own {
		if m, ok := strings.CutPrefix(k, kubevirtlabels.HostModelCPULabelPrefix); ok {
			hostModel = m
		}
	}
	if hostModel == "" || own[kubevirtlabels.ObsoleteHostModelLabel] != "" || own[kubevirtlabels.CPUModelMigrationLabelPrefix+"qemu64"] != "" {
		t.Fatalf("without a CR: host model %q, obsolete-host-model %q, qemu64 %q; want a host model, neither label (KubeVirt's defaults)",
			hostModel, own[kubevirtlabels.ObsoleteHostModelLabel], own[kubevirtlabels.CPUModelMigrationLabelPrefix+"qemu64"])
	}

	// A CR with obsoleteCPUModels, as virt-operator leaves it (status.phase).
	kvs := dyn.Resource(kubevirtcr.GVR).Namespace("kubevirt")
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt"},
		"spec": map[string]any{"configuration": map[string]any{
			"obsoleteCPUModels": map[string]any{hostModel: true, "Westmere": true},
			"minCPUModel":       "Penryn",
		}},
	}}
	created, err := kvs.Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]any{"phase": "Deployed"}
	if _, err := kvs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	withList, stderr := labels("the CR's obsolete list")
	if !strings.Contains(stderr, "Settings: KubeVirt CR kubevirt/kubevirt") {
		t.Errorf("labels with the CR says:\n%s", stderr)
	}
	waitLabels("the CR's obsolete list", withList)
	got := owned()
	switch {
	case got[kubevirtlabels.ObsoleteHostModelLabel] != "true":
		t.Errorf("host model %s on the CR's list, yet no %s", hostModel, kubevirtlabels.ObsoleteHostModelLabel)
	case got[kubevirtlabels.CPUModelMigrationLabelPrefix+"Westmere"] != "":
		t.Errorf("Westmere, on the CR's list, still labelled")
	case got[kubevirtlabels.CPUModelMigrationLabelPrefix+"qemu64"] != "true":
		t.Errorf("qemu64 not labelled: the CR's list should replace KubeVirt's defaults")
	case countPrefix(got, kubevirtlabels.CPUFeatureLabelPrefix) <= countPrefix(own, kubevirtlabels.CPUFeatureLabelPrefix):
		t.Errorf("%d cpu-feature labels under the CR, %d under the configuration's Penryn: no minimum model should apply under a CR",
			countPrefix(got, kubevirtlabels.CPUFeatureLabelPrefix), countPrefix(own, kubevirtlabels.CPUFeatureLabelPrefix))
	}

	// A change of the CR relabels: no list (the defaults, no
	// obsolete-host-model), the cross-architecture gate on.
	current, err := kvs.Get(ctx, "kubevirt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Object["spec"] = map[string]any{"configuration": map[string]any{
		"developerConfiguration": map[string]any{"featureGates": []any{labeller.CrossArchitectureGate}},
	}}
	if _, err := kvs.Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	withGate, _ := labels("the CR's feature gate")
	waitLabels("the CR's feature gate", withGate)
	got = owned()
	if got[kubevirtlabels.VMArchLabelPrefix+"amd64"] != "true" || got[kubevirtlabels.ObsoleteHostModelLabel] != "" || got[kubevirtlabels.CPUModelMigrationLabelPrefix+"qemu64"] != "" {
		t.Errorf("with the gate and no list: vm-arch-amd64 %q, obsolete-host-model %q, qemu64 %q; want true, none, none",
			got[kubevirtlabels.VMArchLabelPrefix+"amd64"], got[kubevirtlabels.ObsoleteHostModelLabel], got[kubevirtlabels.CPUModelMigrationLabelPrefix+"qemu64"])
	}

	// KubeVirt uninstalled: the CRD goes, and node-agent's configuration
	// applies again at once (the watch ends; discovery says so).
	if _, err := kb.run(t, nil, "delete", "-f", crd, "--wait=true"); err != nil {
		t.Fatal(err)
	}
	waitLabels("after the CRD was deleted", own)

	// The log: which settings won, each time they changed, never twice the
	// same in a row. The CR's deletion comes first, then the watch ends
	// and discovery says the resource is gone.
	settingsLines := func() []string {
		var said []string
		for _, line := range strings.Split(agent.Log(), "\n") {
			if strings.Contains(line, `msg="Labelling settings"`) {
				said = append(said, line)
			}
		}
		return said
	}
	testenv.WaitFor(t, time.Minute, "the agent to log that the resource is gone", func() (bool, error) {
		return strings.Contains(strings.Join(settingsLines(), "\n"), kubevirtcr.NotServed), nil
	})
	said := settingsLines()
	for _, want := range []string{`source="node-agent's configuration"`, `note="no KubeVirt CR"`, `source="KubeVirt CR kubevirt/kubevirt"`, "CrossArchitectureVirtualization on", kubevirtcr.NotServed} {
		if !strings.Contains(strings.Join(said, "\n"), want) {
			t.Errorf("no settings line of the agent's log says %s:\n%s", want, strings.Join(said, "\n"))
		}
	}
	for i := 1; i < len(said); i++ {
		if afterTime(said[i]) == afterTime(said[i-1]) {
			t.Errorf("settings logged twice in a row without a change: %s", said[i])
		}
	}
	t.Logf("the agent logged the settings %d times:\n%s", len(said), strings.Join(said, "\n"))
	// The CRD going away is no error: the watch ends quietly.
	for _, line := range strings.Split(agent.Log(), "\n") {
		if strings.Contains(line, "kubevirt") && (strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN")) {
			t.Errorf("the agent complained about the KubeVirt CR: %s", line)
		}
	}
}

// afterTime is a text log line without its time.
func afterTime(line string) string {
	if i := strings.Index(line, " level="); i >= 0 {
		return line[i:]
	}
	return line
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func countPrefix(m map[string]string, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
