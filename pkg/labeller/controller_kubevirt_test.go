package labeller

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/agent/agenttest"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// fakeKubeVirt plays the KubeVirt CR's watcher: it reports what the test
// sends, and counts the watchers running.
type fakeKubeVirt struct {
	states  chan KubeVirtState
	running atomic.Int32
}

func (f *fakeKubeVirt) watch(ctx context.Context, report func(KubeVirtState)) {
	f.running.Add(1)
	defer f.running.Add(-1)
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-f.states:
			report(s)
		}
	}
}

// TestLabellerFollowsKubeVirtCR: nothing is written before the KubeVirt CR's
// state is known, so the first patch already carries the CR's settings; a
// change of the CR relabels from the last discovery; labeller.kubeVirtCR:
// ignore stops the watcher and the configuration's keys apply again.
func TestLabellerFollowsKubeVirtCR(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}})
	var mu sync.Mutex
	var patches []map[string]*string
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var p struct {
			Metadata struct {
				Labels map[string]*string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p); err != nil {
			t.Error(err)
		}
		mu.Lock()
		patches = append(patches, p.Metadata.Labels)
		mu.Unlock()
		return false, nil, nil
	})
	host := kubeVirtHost("Haswell")
	var discoveries atomic.Int32
	kv := &fakeKubeVirt{states: make(chan KubeVirtState)}
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := &labellerBed{t: t, client: client, clock: clock, view: &agenttest.NodeView{Client: kubetest.Wrap(client), Name: testNode}}
	c, err := NewController(Options{Client: kubetest.Wrap(client), NodeName: testNode, Config: config.Default().Labeller,
		Discover: func(context.Context, config.LabellerConfig) (*hostcpu.HostCPU, error) {
			discoveries.Add(1)
			return host, nil
		},
		Logger: slog.New(slog.DiscardHandler), Clock: clock, Recorder: record.NewFakeRecorder(100),
		WatchKubeVirt: kv.watch})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, b.view) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	has := func(key string) func() bool { return func() bool { return b.labels()[key] == "true" } }
	hasNot := func(key string) func() bool { return func() bool { _, ok := b.labels()[key]; return !ok } }

	kv.states <- KubeVirtState{Settings: &KubeVirtSettings{CR: "kubevirt/kubevirt", ObsoleteCPUModels: []string{"Haswell"}, MinCPUModel: "Penryn"}}
	b.waitFor("the CR's obsolete list", has(kubevirtlabels.ObsoleteHostModelLabel))
	b.waitFor("every feature, no minimum model under a CR", has(kubevirtlabels.CPUFeatureLabelPrefix+"sse2"))
	if b.labels()[kubevirtlabels.CPUModelLabelPrefix+"Haswell"] != "" || b.labels()[kubevirtlabels.CPUModelLabelPrefix+"qemu64"] != "true" {
		t.Errorf("labels %v; want Haswell obsolete and qemu64 not (the CR's list replaces the defaults)", b.labels())
	}
	mu.Lock()
	first := patches[0]
	mu.Unlock()
	if first[kubevirtlabels.ObsoleteHostModelLabel] == nil || first[kubevirtlabels.CPUFeatureLabelPrefix+"sse2"] == nil {
		t.Errorf("the first patch %v was not made with the CR's settings", first)
	}

	kv.states <- KubeVirtState{Settings: &KubeVirtSettings{CR: "kubevirt/kubevirt", CrossArchitectureVirtualization: true}}
	b.waitFor("the gate's vm-arch label", has(kubevirtlabels.VMArchLabelPrefix+"amd64"))
	b.waitFor("the default list again", hasNot(kubevirtlabels.ObsoleteHostModelLabel))
	b.waitFor("Haswell's label back", has(kubevirtlabels.CPUModelLabelPrefix+"Haswell"))
	if n := discoveries.Load(); n != 1 {
		t.Errorf("%d discoveries; a change of the CR relabels from the last one", n)
	}

	cfg := config.Default().Labeller
	cfg.KubeVirtCR = config.KubeVirtCRIgnore
	c.SetConfig(cfg)
	b.waitFor("the configuration's minimum model", hasNot(kubevirtlabels.CPUFeatureLabelPrefix+"sse2"))
	b.waitFor("no vm-arch without the CR", hasNot(kubevirtlabels.VMArchLabelPrefix+"amd64"))
	b.waitFor("the watcher stopped", func() bool { return kv.running.Load() == 0 })
}
