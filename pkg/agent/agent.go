// Package agent owns the lifetime of `node-agent run`: the informer on the
// agent's own Node, the /metrics and health endpoints, and the components
// that act on that Node (internal/runagent says which). One context
// flows from main through Run into every component; cancelling it stops all.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/node-agent/node-agent/pkg/events"
	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/reasontext"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/metrics"
)

// shutdownGrace bounds how long the HTTP servers get to finish on stop.
const shutdownGrace = 3 * time.Second

// NodeView gives components read access to the agent's own Node, from the
// informer's cache, and lets them react to its changes.
type NodeView interface {
	// NodeName is the Node this agent owns.
	NodeName() string
	// Get returns the cached Node, or an error when it is not (yet) known.
	Get() (*corev1.Node, error)
	// AddHandler registers a handler for the Node's add, update and delete.
	AddHandler(h cache.ResourceEventHandler) error
}

// Component is a part of the agent with its own loop. Run blocks until ctx is
// cancelled or the component fails; a component that cannot do its work in
// this environment (for example no logind) logs why and returns nil.
type Component interface {
	Name() string
	Run(ctx context.Context, node NodeView) error
}

// ComponentFactory builds a component once the agent's shared parts exist.
type ComponentFactory func(deps Deps) (Component, error)

// ComponentsFactory builds several components that share what they are
// built from (one pod access, one drain controller), so that no factory
// reaches into another's results.
type ComponentsFactory func(deps Deps) ([]Component, error)

// Deps are the shared parts handed to component factories.
type Deps struct {
	Client   kube.Interface
	NodeName string
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Clock    clock.WithTicker
	Health   *Health
	// Recorder records Events; components record them on their Node.
	Recorder events.Recorder
}

// Agent runs node-agent for one Node.
type Agent struct {
	client      kube.Interface
	nodeName    string
	logger      *slog.Logger
	registry    *prometheus.Registry
	clock       clock.WithTicker
	metricsAddr string
	healthAddr  string
	factories   []ComponentsFactory
	built       bool
	health      *Health
	// startChecks run once before the own Node is watched (WithStartCheck).
	startChecks []func(ctx context.Context) error

	// listeners are set by tests that want the bound addresses.
	onListen func(name, addr string)
}

// Option configures an Agent.
type Option func(*Agent)

// WithKubernetesClient sets the client used for every API call.
func WithKubernetesClient(c kube.Interface) Option { return func(a *Agent) { a.client = c } }

// WithLogger sets the structured logger.
func WithLogger(l *slog.Logger) Option { return func(a *Agent) { a.logger = l } }

// WithRegistry sets the private Prometheus registry served on /metrics.
func WithRegistry(r *prometheus.Registry) Option { return func(a *Agent) { a.registry = r } }

// WithClock sets the clock; tests pass a fake one.
func WithClock(c clock.WithTicker) Option { return func(a *Agent) { a.clock = c } }

// WithMetricsAddress sets the /metrics listen address; "0" or "" disables it.
func WithMetricsAddress(addr string) Option { return func(a *Agent) { a.metricsAddr = addr } }

// WithHealthAddress sets the /healthz and /readyz listen address; "0" or ""
// disables it.
func WithHealthAddress(addr string) Option { return func(a *Agent) { a.healthAddr = addr } }

// WithComponent adds a component built by f when Run starts.
func WithComponent(f ComponentFactory) Option {
	return WithComponents(func(d Deps) ([]Component, error) {
		c, err := f(d)
		if err != nil {
			return nil, err
		}
		return []Component{c}, nil
	})
}

// WithComponents adds the components built by f when Run starts.
func WithComponents(f ComponentsFactory) Option {
	return func(a *Agent) { a.factories = append(a.factories, f) }
}

// WithStartCheck adds a check Run makes once before it watches its own
// Node; an error from it ends Run with that error (the agent exits non-zero
// and says why in one line), where waiting could never help: the own Node's
// read refused to every identity the agent has.
func WithStartCheck(f func(ctx context.Context) error) Option {
	return func(a *Agent) { a.startChecks = append(a.startChecks, f) }
}

// WithListenHook is called with each server's name and bound address.
func WithListenHook(f func(name, addr string)) Option { return func(a *Agent) { a.onListen = f } }

// New returns an agent for nodeName. A Kubernetes client is required.
func New(nodeName string, opts ...Option) (*Agent, error) {
	a := &Agent{
		nodeName: nodeName,
		logger:   slog.Default(),
		clock:    clock.RealClock{},
		health:   NewHealth(),
	}
	for _, o := range opts {
		o(a)
	}
	if a.nodeName == "" {
		return nil, errors.New("agent: empty node name; set --node-name or NODE_NAME")
	}
	if a.client == nil {
		return nil, errors.New("agent: no Kubernetes client; pass WithKubernetesClient")
	}
	if a.registry == nil {
		a.registry = metrics.NewRegistry()
	}
	a.logger = a.logger.With("node", nodeName)
	return a, nil
}

// Build runs the component factories with the agent's shared parts and
// recorder, and returns the components in the order they were added,
// without starting anything. Run calls it; a test of the wiring calls it
// instead of Run, to see what an agent is made of. Factories register their
// metrics on the agent's registry, so an agent is built once.
func (a *Agent) Build(recorder events.Recorder) ([]Component, error) {
	if a.built {
		return nil, errors.New("agent: components already built; an Agent runs once")
	}
	a.built = true
	deps := Deps{Client: a.client, NodeName: a.nodeName, Logger: a.logger, Registry: a.registry, Clock: a.clock, Health: a.health, Recorder: recorder}
	var components []Component
	for _, f := range a.factories {
		cs, err := f(deps)
		if err != nil {
			return nil, err
		}
		components = append(components, cs...)
	}
	return components, nil
}

// Health returns the agent's health registry, for components to add checks.
func (a *Agent) Health() *Health { return a.health }

// Run starts everything and blocks until ctx is cancelled or a part fails.
// It returns nil after a clean stop.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Only our own Node: the agent runs on every node, so its API cost must
	// not grow with the cluster.
	nodeInformer := kube.NodeInformer(a.client, fields.OneTermEqualSelector("metadata.name", a.nodeName).String())
	view := &nodeView{name: a.nodeName, informer: nodeInformer, lister: corelisters.NewNodeLister(nodeInformer.GetIndexer())}
	a.health.AddReadyCheck("node-synced", func() error {
		if !view.informer.HasSynced() {
			return errors.New("informer on own Node not synced yet")
		}
		if _, err := view.Get(); err != nil {
			return err
		}
		return nil
	})

	// All our Events are on one Node, so the writer's default limit per
	// object (25, then one per 5 minutes) would lose a long drain's
	// "finished" Event: the agent allows 100, then one a second, and its
	// components rate-limit their own per-pod Events.
	writer := events.NewWriter(events.Options{
		Sink: a.client.CoreV1().Events(""), Scheme: kube.Scheme, Logger: a.logger,
		Source: corev1.EventSource{Component: "node-agent", Host: a.nodeName},
		Burst:  100, Every: time.Second,
	})
	writer.Start(ctx)
	defer writer.Stop()
	// Every Event's message is made printable and cut (pkg/reasontext):
	// many quote texts others wrote.
	recorder := reasontext.Recorder(writer)

	components, err := a.Build(recorder)
	if err != nil {
		return err
	}

	errCh := make(chan error, 2+len(components))
	var wg sync.WaitGroup
	servers, err := a.startServers(ctx, errCh, &wg)
	if err != nil {
		return err
	}
	// After the servers, so that /healthz answers while a check waits for
	// an apiserver that is not reachable yet (the agent is not ready then).
	for _, check := range a.startChecks {
		if err := check(ctx); err != nil {
			a.stopServers(servers)
			wg.Wait()
			return err
		}
	}

	var informerDone sync.WaitGroup
	informerDone.Go(func() { nodeInformer.RunWithContext(ctx) })
	a.logger.Info("Watching own Node", "fieldSelector", "metadata.name="+a.nodeName)
	// Every component, so the first labels, waits on this sync.
	if err := kube.WaitForSync(ctx, func() (bool, error) { return view.informer.HasSynced(), nil }); err != nil {
		a.stopServers(servers)
		wg.Wait()
		informerDone.Wait()
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("agent: own Node informer did not sync")
	}
	if _, err := view.Get(); err != nil {
		a.logger.Warn("Own Node not found; not ready until it exists", "err", err)
	} else {
		a.logger.Info("Own Node synced")
	}

	for _, c := range components {
		wg.Add(1)
		go func(c Component) {
			defer wg.Done()
			if err := c.Run(ctx, view); err != nil && ctx.Err() == nil {
				errCh <- fmt.Errorf("%s: %w", c.Name(), err)
			}
		}(c)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errCh:
		a.logger.Error("Stopping after a failure", "err", runErr)
		cancel()
	}
	a.logger.Info("Stopping")
	a.stopServers(servers)
	wg.Wait()
	informerDone.Wait()
	return runErr
}

func (a *Agent) startServers(ctx context.Context, errCh chan<- error, wg *sync.WaitGroup) ([]*http.Server, error) {
	var servers []*http.Server
	start := func(name, addr string, h http.Handler) error {
		if addr == "" || addr == "0" {
			return nil
		}
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("%s server: listening on %s: %w; choose a free address with the matching --*-bind-address flag", name, addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		a.logger.Info("Serving", "server", name, "address", ln.Addr().String())
		if a.onListen != nil {
			a.onListen(name, ln.Addr().String())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errCh <- fmt.Errorf("%s server: %w", name, err)
			}
		}()
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{Registry: a.registry}))
	if err := start("metrics", a.metricsAddr, mux); err != nil {
		return nil, err
	}
	if err := start("health", a.healthAddr, a.health.Handler()); err != nil {
		a.stopServers(servers)
		return nil, err
	}
	return servers, nil
}

func (a *Agent) stopServers(servers []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
}

type nodeView struct {
	name     string
	informer cache.SharedIndexInformer
	lister   corelisters.NodeLister
}

func (v *nodeView) NodeName() string { return v.name }

func (v *nodeView) Get() (*corev1.Node, error) {
	n, err := v.lister.Get(v.name)
	if err != nil {
		return nil, fmt.Errorf("own Node %q: %w", v.name, err)
	}
	return n, nil
}

func (v *nodeView) AddHandler(h cache.ResourceEventHandler) error {
	_, err := v.informer.AddEventHandler(h)
	return err
}
