package property

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/node-agent/node-agent/internal/runagent"
	"github.com/node-agent/node-agent/internal/runcoordinator"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/test/testenv"
)

const (
	// slotNamespace is slots.namespace: the slot Leases and the
	// coordinators' election.
	slotNamespace = "node-agent"
	// workNamespace holds the workload the drains evict.
	workNamespace = "work"
	// poolLabel marks the nodes of the pool poolName.
	poolLabel = "property.node-agent.io/pool"
	poolName  = "half"
	// clusterLimit is slots.limit; poolLimit the pool's.
	clusterLimit = 2
	poolLimit    = 1
	// zonePool is a pool of every node whose slots may be held by nodes of
	// zoneMaxDomains zones at once (slots.pools[].maxDomains); zoneOf
	// says each node's zone.
	zonePool       = "zones"
	zoneMaxDomains = 1
	// podsPerNode is each node's Deployment.
	podsPerNode = 3
	// fenceAnnotation is written by the bed only, to see how far a watch
	// has come (checker.fence).
	fenceAnnotation = "property.node-agent.io/fence"
)

// coordinatorIDs are the two replicas of node-agent-coordinator.
var coordinatorIDs = []string{"coordinator-a", "coordinator-b"}

// bed is the cluster under test: kwok nodes with a workload each, one
// in-process agent per node (internal/runagent, as `node-agent run`), two
// in-process coordinators (internal/runcoordinator, as
// `node-agent-coordinator`), and per node a host stand-in that plays its
// reboots.
type bed struct {
	t      *testing.T
	env    *testenv.Env
	admin  kubernetes.Interface
	dyn    dynamic.Interface
	nodes  []string
	logDir string
	// sentinel is, per node, the agent's reboot.sentinelFile.
	sentinel map[string]string
	buses    map[string]*hostBus
	logs     map[string]*os.File

	mu        sync.Mutex
	agents    map[string]*running // nil: stopped
	rebooting map[string]bool
	coords    map[string]*running
	boots     map[string]int
	// bootRand draws how long a host takes to boot: timing, not part of
	// the seeded sequence.
	bootRand *rand.Rand
	reboots  int
	hosts    sync.WaitGroup
}

// running is an agent or coordinator running in this process.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func (r *running) stop() error {
	r.cancel()
	err := <-r.done
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("prop-%d", i+1)
	}
	return out
}

// inPool says whether node is in the pool poolName: every other node.
func inPool(i int) bool { return i%2 == 1 }

// zoneOf is node i's zone (its topology.kubernetes.io/zone label): three
// zones in turn, and none for the last node, which pkg/slots counts as a
// failure domain of its own.
func zoneOf(i, n int) string {
	if i == n-1 {
		return ""
	}
	return "zone-" + string(rune('a'+i%3))
}

// newBed starts the control plane and everything on it but the agents and
// coordinators.
func newBed(t *testing.T, n int, seed uint64) *bed {
	t.Helper()
	daemon := requireDBusDaemon(t)
	env := testenv.StartForTest(t, testenv.DefaultOptions())
	ctx := t.Context()
	b := &bed{t: t, env: env, admin: env.Client(), nodes: nodeNames(n), sentinel: map[string]string{},
		buses: map[string]*hostBus{}, logs: map[string]*os.File{}, agents: map[string]*running{},
		rebooting: map[string]bool{}, coords: map[string]*running{}, boots: map[string]int{},
		bootRand: rand.New(rand.NewPCG(seed, 1))}
	var err error
	if b.dyn, err = dynamic.NewForConfig(env.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	b.logDir = os.Getenv(testenv.LogDirEnv)
	if b.logDir != "" {
		b.logDir = filepath.Join(b.logDir, "property-agents")
	} else {
		b.logDir = t.TempDir()
	}
	if err := os.MkdirAll(b.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{slotNamespace, workNamespace} {
		if _, err := env.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	b.installNodeMaintenanceCRDs()
	for i, node := range b.nodes {
		labels := map[string]string{}
		if inPool(i) {
			labels[poolLabel] = poolName
		}
		if z := zoneOf(i, len(b.nodes)); z != "" {
			labels[config.DefaultTopologyKey] = z
		}
		if err := env.AddNode(ctx, node, testenv.WithNodeLabels(labels)); err != nil {
			t.Fatal(err)
		}
		b.setBootID(ctx, node)
	}
	for i, node := range b.nodes {
		// Terminating pods take 4 to 16 seconds to go, as real ones take
		// their time, so that drains overlap and requests queue.
		d := testenv.NewDeployment(workNamespace, "app-"+node, podsPerNode, node)
		d.Spec.Template.Annotations = map[string]string{testenv.PodDeleteDelayAnnotation: fmt.Sprintf("%ds", 4*(1+i%4))}
		if _, err := b.admin.AppsV1().Deployments(workNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range b.nodes {
		testenv.WaitRunningOn(ctx, t, b.admin, workNamespace, node, podsPerNode)
	}
	busRoot, err := os.MkdirTemp("", "na-prop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(busRoot) })
	for _, node := range b.nodes {
		dir := filepath.Join(busRoot, node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b.sentinel[node] = filepath.Join(dir, "reboot-required")
		b.buses[node] = startHostBus(t, daemon, dir, node, b.hostReboot)
	}
	for _, name := range append(append([]string{}, b.nodes...), coordinatorIDs...) {
		f, err := os.Create(filepath.Join(b.logDir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		b.logs[name] = f
	}
	t.Cleanup(b.stopAll)
	return b
}

// installNodeMaintenanceCRDs creates the CRDs of
// deploy/components/nodemaintenance and waits until both groups are served.
func (b *bed) installNodeMaintenanceCRDs() {
	b.t.Helper()
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	dir := filepath.Join(testenv.DeployDir(b.t), "components", "nodemaintenance")
	for _, f := range []string{"crd-medik8s.yaml", "crd-kubevirt.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			b.t.Fatal(err)
		}
		for _, o := range testenv.DecodeObjects(b.t, data) {
			if _, err := b.dyn.Resource(crds).Create(b.t.Context(), o, metav1.CreateOptions{}); err != nil {
				b.t.Fatalf("creating %s from %s: %v", o.GetName(), f, err)
			}
		}
	}
	testenv.WaitFor(b.t, time.Minute, "the NodeMaintenance groups served", func() (bool, error) {
		groups, err := maintenance.ServedNodeMaintenanceGroups(b.admin.Discovery())
		return len(groups) == len(maintenance.NodeMaintenanceGroups), err
	})
}

// setBootID gives node a new status.nodeInfo.bootID, as a host's boot does;
// the reboot controller tells a reboot by it. kwok keeps a boot ID it
// finds.
func (b *bed) setBootID(ctx context.Context, node string) {
	b.mu.Lock()
	b.boots[node]++
	id := fmt.Sprintf("%s-boot-%d", node, b.boots[node])
	b.mu.Unlock()
	patch := fmt.Appendf(nil, `{"status":{"nodeInfo":{"bootID":%q}}}`, id)
	if _, err := b.admin.CoreV1().Nodes().PatchStatus(ctx, node, patch); err != nil {
		b.t.Errorf("setting the boot ID of %s: %v", node, err)
	}
}

// baseConfig is the ConfigMap every agent and coordinator reads.
func baseConfig() config.Config {
	cfg := config.Default()
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	cfg.LogLevel = "info"
	cfg.Labeller.Enabled = false
	cfg.Shutdown.Enabled = false
	cfg.Maintenance.NodeMaintenance = true
	cfg.Slots.Limit = clusterLimit
	cfg.Slots.Pools = []config.PoolConfig{{Name: poolName, Selector: poolLabel + "=" + poolName, Limit: poolLimit},
		{Name: zonePool, MaxDomains: zoneMaxDomains}}
	// The shortest the configuration allows: a silent agent's slot goes
	// on within the run.
	cfg.Slots.HeartbeatBound = metav1.Duration{Duration: 10 * time.Second}
	cfg.Reboot.Enabled = true
	cfg.Reboot.CheckInterval = metav1.Duration{Duration: time.Second}
	cfg.Reboot.SlotHoldBound = metav1.Duration{Duration: time.Minute}
	return cfg
}

func (b *bed) agentConfig(node string) config.Config {
	cfg := baseConfig()
	cfg.NodeName = node
	cfg.Reboot.SentinelFile = b.sentinel[node]
	cfg.Shutdown.SystemBusAddress = b.buses[node].address
	return cfg
}

// restFor is a client configuration of its own for user: its own client
// certificate and TCP connection, as a process of its own would have.
// deploy/ does not yet carry the coordinator's identity and the agents'
// right to write their slot request, so both run with credentials in
// system:masters; the admission policy is not what this test checks.
func (b *bed) restFor(user string) *rest.Config {
	cfg, err := b.env.UserConfig("property-"+user, "system:masters")
	if err != nil {
		b.t.Fatal(err)
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	return cfg
}

func (b *bed) logger(name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(b.logs[name], &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startAgent starts node's agent unless it runs or its host reboots; it
// reports whether it started one.
func (b *bed) startAgent(node string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.agents[node] != nil || b.rebooting[node] {
		return false
	}
	b.startAgentLocked(node)
	return true
}

func (b *bed) startAgentLocked(node string) {
	cfg := b.agentConfig(node)
	if err := cfg.Validate(); err != nil {
		b.t.Fatal(err)
	}
	a, err := runagent.New(runagent.Options{Config: cfg, REST: b.restFor("agent-" + node), Logger: b.logger(node)})
	if err != nil {
		b.t.Fatalf("agent for %s: %v", node, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	b.agents[node] = r
	go func() { r.done <- a.Run(ctx) }()
}

// stopAgent stops node's agent, as a killed process stops (its context
// cancelled: it stops, releases nothing and leaves its Node as it is); it
// reports whether one ran.
func (b *bed) stopAgent(node string) bool {
	b.mu.Lock()
	r := b.agents[node]
	b.agents[node] = nil
	b.mu.Unlock()
	if r == nil {
		return false
	}
	if err := r.stop(); err != nil {
		b.t.Errorf("the agent of %s stopped with: %v", node, err)
	}
	return true
}

// killAgent stops node's agent unless its host reboots.
func (b *bed) killAgent(node string) bool {
	b.mu.Lock()
	rebooting := b.rebooting[node]
	b.mu.Unlock()
	return !rebooting && b.stopAgent(node)
}

func (b *bed) startCoordinator(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.coords[id] != nil {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	b.coords[id] = r
	o := runcoordinator.Options{
		Config: baseConfig(), REST: b.restFor(id), Identity: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		MetricsAddress: "0", HealthAddress: "0", Logger: b.logger(id),
	}
	go func() { r.done <- runcoordinator.Run(ctx, o) }()
	return true
}

func (b *bed) stopCoordinator(id string) bool {
	b.mu.Lock()
	r := b.coords[id]
	b.coords[id] = nil
	b.mu.Unlock()
	if r == nil {
		return false
	}
	if err := r.stop(); err != nil {
		b.t.Errorf("coordinator %s stopped with: %v", id, err)
	}
	return true
}

// down lists the agents (not rebooting) and coordinators that do not run.
func (b *bed) down() (agents, coords []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.nodes {
		if b.agents[n] == nil && !b.rebooting[n] {
			agents = append(agents, n)
		}
	}
	for _, id := range coordinatorIDs {
		if b.coords[id] == nil {
			coords = append(coords, id)
		}
	}
	return agents, coords
}

// hostReboot is logind's stand-in asked to reboot node's host: the host goes
// down (its agent stops), loses /run (the sentinel), boots with a new boot
// ID, and its agent starts again.
func (b *bed) hostReboot(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rebooting[node] {
		return
	}
	b.rebooting[node] = true
	b.reboots++
	boot := 500*time.Millisecond + time.Duration(b.bootRand.Int64N(int64(2500*time.Millisecond)))
	b.hosts.Add(1)
	// Not in logind's call: the agent that asked is stopped, and waits for
	// its call's answer.
	go b.playReboot(node, boot)
}

func (b *bed) playReboot(node string, boot time.Duration) {
	defer b.hosts.Done()
	b.stopAgent(node)
	if err := os.Remove(b.sentinel[node]); err != nil && !errors.Is(err, os.ErrNotExist) {
		b.t.Error(err)
	}
	b.setBootID(context.Background(), node)
	time.Sleep(boot)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rebooting[node] = false
	if b.agents[node] == nil {
		b.startAgentLocked(node)
	}
}

// stopAll stops every agent and coordinator, after the hosts that reboot.
func (b *bed) stopAll() {
	b.hosts.Wait()
	for _, n := range b.nodes {
		b.stopAgent(n)
	}
	for _, id := range coordinatorIDs {
		b.stopCoordinator(id)
	}
	for _, f := range b.logs {
		f.Close()
	}
}

// annotate sets (value not nil) or removes an annotation of node as an admin
// does, and returns the Node's resourceVersion after the write.
func (b *bed) annotate(ctx context.Context, node, key string, value *string) (string, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	if err != nil {
		return "", err
	}
	n, err := b.admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("annotating %s with %s: %w", node, key, err)
	}
	return n.ResourceVersion, nil
}

func (b *bed) createNodeMaintenance(ctx context.Context, group, name, node string) error {
	_, err := maintenance.RequestNodeMaintenance(ctx, b.dyn, group, name, node, "property test")
	return err
}

func (b *bed) deleteNodeMaintenance(ctx context.Context, group, name string) error {
	return b.dyn.Resource(maintenance.NodeMaintenanceGVR(group)).Delete(ctx, name, metav1.DeleteOptions{})
}

// nodeMaintenanceLeft lists the NodeMaintenance objects of either group.
func (b *bed) nodeMaintenanceLeft(ctx context.Context) ([]string, error) {
	var out []string
	for _, g := range maintenance.NodeMaintenanceGroups {
		l, err := b.dyn.Resource(maintenance.NodeMaintenanceGVR(g)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range l.Items {
			out = append(out, g+"/"+o.GetName())
		}
	}
	return out, nil
}

// withdrawAll removes every request an admin or the host made: the
// maintenance and reboot annotations, the NodeMaintenance objects, and the
// sentinel files.
func (b *bed) withdrawAll(ctx context.Context) {
	b.t.Helper()
	for _, node := range b.nodes {
		for _, key := range []string{selfdrain.MaintenanceAnnotation, reboot.RequestAnnotation} {
			if _, err := b.annotate(ctx, node, key, nil); err != nil {
				b.t.Error(err)
			}
		}
		if err := os.Remove(b.sentinel[node]); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.t.Error(err)
		}
	}
	left, err := b.nodeMaintenanceLeft(ctx)
	if err != nil {
		b.t.Error(err)
	}
	for _, id := range left {
		g, name, _ := strings.Cut(id, "/")
		if err := b.deleteNodeMaintenance(ctx, g, name); err != nil {
			b.t.Error(err)
		}
	}
}
