package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/node-agent/node-agent/internal/runagent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/hostcpu/subprocess"
	"github.com/node-agent/node-agent/test/testenv"
)

const (
	agentNamespace      = "node-agent"
	agentServiceAccount = "node-agent"
	agentUser           = "system:serviceaccount:" + agentNamespace + ":" + agentServiceAccount
	// kuredUser is the identity of the kured-pattern pollers.
	kuredUser = "scale-kured"
)

// fleet is the set of in-process agents, by node.
type fleet struct {
	b        *testing.B
	env      *testenv.Env
	tokens   map[string]string
	discover func(ctx context.Context, lc config.LabellerConfig) (*hostcpu.HostCPU, error)
	log      *slog.Logger

	mu     sync.Mutex
	agents map[string]*inProcessAgent
}

// inProcessAgent is one agent of the fleet, run by internal/runagent.
type inProcessAgent struct {
	cancel context.CancelFunc
	done   chan error
}

// agentConfig is the configuration of the DaemonSet's agents that matters
// here: defaults, no HTTP servers (1,000 agents share one process) and no
// shutdown guard (kwok nodes have no logind). The drain slot limit is the
// coordinator's (coordinatorConfig); agents do not read it.
func agentConfig(node string) config.Config {
	cfg := config.Default()
	cfg.NodeName = node
	cfg.MetricsBindAddress = "0"
	cfg.HealthProbeBindAddress = "0"
	cfg.Shutdown.Enabled = false
	cfg.LogLevel = "warn"
	return cfg
}

// restFor is the connection of one agent: its own token and, through a dial
// function of its own, its own TCP connection, as an agent in its own pod
// has (client-go shares one transport among configs that differ only in
// their token).
func (f *fleet) restFor(node string) *rest.Config {
	cfg := f.env.TokenConfig(f.tokens[node])
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	return cfg
}

// start starts the agents of nodes together (each in its own goroutine).
func (f *fleet) start(nodes []string) {
	f.b.Helper()
	var wg sync.WaitGroup
	for _, node := range nodes {
		cfg := agentConfig(node)
		if err := cfg.Validate(); err != nil {
			f.b.Fatal(err)
		}
		a, err := runagent.New(runagent.Options{Config: cfg, REST: f.restFor(node), Logger: f.log.With("node", node), Discover: f.discover})
		if err != nil {
			f.b.Fatalf("agent for %s: %v", node, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ia := &inProcessAgent{cancel: cancel, done: make(chan error, 1)}
		f.mu.Lock()
		f.agents[node] = ia
		f.mu.Unlock()
		wg.Add(1)
		go func() {
			wg.Done()
			ia.done <- a.Run(ctx)
		}()
	}
	wg.Wait()
}

// stop stops the agents of nodes and waits for them.
func (f *fleet) stop(nodes []string) {
	f.mu.Lock()
	var stopping []*inProcessAgent
	for _, n := range nodes {
		if a := f.agents[n]; a != nil {
			a.cancel()
			stopping = append(stopping, a)
			delete(f.agents, n)
		}
	}
	f.mu.Unlock()
	for _, a := range stopping {
		if err := <-a.done; err != nil && err != context.Canceled {
			f.b.Logf("an agent stopped with: %v", err)
		}
	}
}

func (f *fleet) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.agents))
	for n := range f.agents {
		out = append(out, n)
	}
	return out
}

// sharedDiscovery discovers this machine's CPU once, with the discovery
// helper as `node-agent run` does, and hands each agent its own copy of the
// result.
func sharedDiscovery(b *testing.B, dir string, log *slog.Logger) func(ctx context.Context, lc config.LabellerConfig) (*hostcpu.HostCPU, error) {
	b.Helper()
	bin := os.Getenv(testenv.BinDirEnv)
	if bin == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			b.Fatal(err)
		}
		bin = filepath.Join(root, "bin")
	}
	b.Setenv(subprocess.HelperEnv, filepath.Join(bin, subprocess.HelperName))
	cfg := config.Default()
	cfg.StateDir = filepath.Join(dir, "discovery-state")
	r, err := runagent.DiscoveryRunner(cfg.Labeller, cfg.StateDir, log)
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	hc, err := r.Discover(b.Context(), runagent.DiscoveryRequest(cfg.Labeller, cfg.StateDir, "warn"))
	if err != nil {
		b.Fatalf("discovering this machine's CPU for the fleet: %v", err)
	}
	b.Logf("discovered this machine's CPU once for every agent in %s", time.Since(began).Round(time.Millisecond))
	raw, err := json.Marshal(hc)
	if err != nil {
		b.Fatal(err)
	}
	return func(context.Context, config.LabellerConfig) (*hostcpu.HostCPU, error) {
		out := new(hostcpu.HostCPU)
		return out, json.Unmarshal(raw, out)
	}
}

// agentTokens returns, per node, a token of the agent's ServiceAccount
// bound to the DaemonSet's pod on that node, as the kubelet mounts it.
func agentTokens(ctx context.Context, b *testing.B, c kubernetes.Interface, nodes []string) map[string]string {
	b.Helper()
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	pods := map[string]*corev1.Pod{}
	testenv.WaitFor(b, 10*time.Minute, fmt.Sprintf("the node-agent DaemonSet's pods Running on %d nodes", len(nodes)), func() (bool, error) {
		list, err := c.CoreV1().Pods(agentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=node-agent"})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if want[p.Spec.NodeName] && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				pods[p.Spec.NodeName] = p
			}
		}
		return len(pods) == len(nodes), nil
	})
	tokens := map[string]string{}
	var mu sync.Mutex
	err := forEach(nodes, 16, func(n string) error {
		p := pods[n]
		tr, err := c.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, agentServiceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: ptr.To[int64](6 * 3600),
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("token for the pod on %s: %w", n, err)
		}
		mu.Lock()
		tokens[n] = tr.Status.Token
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return tokens
}

// forEach runs do for every item, at most par at a time, and returns the
// first error.
func forEach(items []string, par int, do func(string) error) error {
	sem := make(chan struct{}, par)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := do(it); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// fleetLogger keeps the fleet's warnings and errors: a thousand agents'
// start-up lines would be most of the log otherwise.
func fleetLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
