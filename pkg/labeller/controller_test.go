package labeller

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/agent/agenttest"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kube/kubetest"
)

// Unit tests of the labelling controller on the fake clientset, with a
// discovery that returns a fixed host.

const testNode = "node-1"

type labellerBed struct {
	t      *testing.T
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	view   *agenttest.NodeView
	want   map[string]string
}

// startLabeller runs a controller for a host with a scalable TSC until the
// test ends.
func startLabeller(t *testing.T, prepare func(*fake.Clientset)) *labellerBed {
	t.Helper()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode,
		Labels: map[string]string{"kubernetes.io/hostname": testNode}}})
	if prepare != nil {
		prepare(client)
	}
	host := &hostcpu.HostCPU{TSC: &hostcpu.TSC{Scalable: true}, ModelFeatures: map[string][]string{"Penryn": nil}}
	cfg := config.Default().Labeller
	res, err := Policy{MinCPUModel: cfg.MinCPUModel, ObsoleteCPUModels: cfg.ObsoleteCPUModels}.Labels(host)
	if err != nil || len(res.Labels) == 0 {
		t.Fatalf("the test host has no labels: %v", err)
	}
	b := &labellerBed{t: t, client: client, clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		view: &agenttest.NodeView{Client: kubetest.Wrap(client), Name: testNode}, want: res.Labels}
	c, err := NewController(Options{Client: kubetest.Wrap(client), NodeName: testNode, Config: cfg,
		Discover: func(context.Context, config.LabellerConfig) (*hostcpu.HostCPU, error) { return host, nil },
		Logger:   slog.New(slog.DiscardHandler), Clock: b.clock, Recorder: record.NewFakeRecorder(100)})
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
	return b
}

func (b *labellerBed) labels() map[string]string {
	n, err := b.view.Get()
	if err != nil {
		b.t.Fatal(err)
	}
	return n.Labels
}

func (b *labellerBed) labelled() bool {
	got := b.labels()
	for k, v := range b.want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// waitFor steps the fake clock until ok holds; the limit only turns a hang
// into a failure.
func (b *labellerBed) waitFor(what string, ok func() bool) {
	b.t.Helper()
	limit := time.After(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-limit:
			b.t.Fatalf("timed out waiting for %s; labels %v", what, b.labels())
		case <-tick.C:
			b.clock.Step(100 * time.Millisecond)
		}
	}
}

func (b *labellerBed) patch(patch string) {
	b.t.Helper()
	if _, err := b.client.CoreV1().Nodes().Patch(context.Background(), testNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.t.Fatal(err)
	}
	if err := b.view.Touch(); err != nil {
		b.t.Fatal(err)
	}
}

func TestLabellerLabelsAndRestores(t *testing.T) {
	b := startLabeller(t, nil)
	b.waitFor("the labels", b.labelled)
	if b.labels()["kubernetes.io/hostname"] != testNode {
		t.Error("a label the labeller does not own was changed")
	}
	// An owned label removed by hand comes back at the next Node event.
	var key string
	for k := range b.want {
		key = k
		break
	}
	b.patch(`{"metadata":{"labels":{"` + key + `":null}}}`)
	b.waitFor("the removed label to come back", b.labelled)
}

func TestLabellerPausedBySkipNode(t *testing.T) {
	b := startLabeller(t, func(c *fake.Clientset) {
		n, _ := c.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", testNode)
		node := n.(*corev1.Node)
		node.Annotations = map[string]string{SkipNodeAnnotation: "true"}
		if err := c.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, node, ""); err != nil {
			t.Fatal(err)
		}
	})
	var patches int
	var mu sync.Mutex
	b.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		patches++
		return false, nil, nil
	})
	b.patch(`{"metadata":{"annotations":{"` + SkipNodeAnnotation + `":"false"}}}`)
	b.waitFor("the labels once skip-node is false", b.labelled)
	mu.Lock()
	defer mu.Unlock()
	// The test's own annotation patch, then the labeller's one.
	if patches != 2 {
		t.Errorf("%d patches of the Node, want 2: none while skip-node was true", patches)
	}
}

// A patch refused with a conflict (the Node changed meanwhile) is tried
// again without a Node event.
func TestLabellerRetriesAConflict(t *testing.T) {
	var once sync.Once
	b := startLabeller(t, func(c *fake.Clientset) {
		c.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			var err error
			once.Do(func() { err = apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, testNode, nil) })
			return err != nil, nil, err
		})
	})
	b.waitFor("the labels after the conflict", b.labelled)
}

// FuzzSkipState feeds skipState any value of the skip-node annotation: a
// value it cannot read pauses labelling (and says so), never resumes it.
func FuzzSkipState(f *testing.F) {
	for _, s := range []string{"true", "false", "", " TRUE ", "yes", "1", "tru\u00e9", "\x1b[2J"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		node := &corev1.Node{}
		node.Annotations = map[string]string{SkipNodeAnnotation: v}
		skip, err := skipState(node)
		if err != nil && !skip {
			t.Errorf("%q: an unreadable value resumed labelling", v)
		}
		if err == nil && skip != (strings.ToLower(strings.TrimSpace(v)) == "true") {
			t.Errorf("%q: skip %v", v, skip)
		}
	})
}
