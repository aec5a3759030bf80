package labeller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/events"
	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kube"
)

// SkipNodeAnnotation pauses all labelling of a node while it is "true", as in
// KubeVirt's node-labeller.
const SkipNodeAnnotation = "node-labeller.kubevirt.io/skip-node"

// FieldManager names the labeller in managedFields.
const FieldManager = "node-agent-labeller"

// DiscoverFunc takes a snapshot of the host CPU for cfg. The controller calls
// it at start, on re-discovery and on a configuration change, never on the
// path of a Node event.
type DiscoverFunc func(ctx context.Context, cfg config.LabellerConfig) (*hostcpu.HostCPU, error)

// KubeVirtState is what the cluster says about the KubeVirt CR.
type KubeVirtState struct {
	// Settings are those of the KubeVirt CR in force; nil when none is.
	Settings *KubeVirtSettings
	// Note says why none is, or remarks on the one chosen.
	Note string
}

// WatchKubeVirtFunc follows the KubeVirt CR until ctx ends: it calls report
// once the state is known and after each change, and never while it cannot
// tell (pkg/kubevirtcr Watcher, adapted by the wiring).
type WatchKubeVirtFunc func(ctx context.Context, report func(KubeVirtState))

// kubeVirtReport is one report of a watcher, tagged with the watcher's
// generation so that a stopped watcher's last word is not taken.
type kubeVirtReport struct {
	gen   int
	state KubeVirtState
}

// Controller keeps the owned CPU labels of the agent's own Node equal to
// what the policy computes from the latest discovery. It writes only when the
// desired and current labels differ, and never touches a key it does not own.
type Controller struct {
	client   kube.Interface
	nodeName string
	logger   *slog.Logger
	clock    clock.WithTicker
	recorder events.Recorder
	discover DiscoverFunc
	metrics  *Metrics

	configs chan config.LabellerConfig
	// watchKubeVirt follows the KubeVirt CR while labeller.kubeVirtCR is
	// auto; nil never reads it.
	watchKubeVirt WatchKubeVirtFunc
	kubeVirt      chan kubeVirtReport
	// queue holds the one key, the node's name, while a sync is due: on a
	// Node event, after a discovery, and rate-limited after a failed patch.
	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	cfg     config.LabellerConfig
	desired *Result
	host    *hostcpu.HostCPU
	// kv is the KubeVirt CR's state in force; nil while a watcher has not
	// said yet, and then nothing is written: labels computed with the
	// configuration first and the CR's settings a moment later would change
	// a node's labels twice at every start.
	kv *KubeVirtState

	// Things said once, and again on change.
	warnedLibvirt  bool
	warnedObsolete string
	warnedSkip     string
	loggedSettings string
}

// Options configures a Controller.
type Options struct {
	Client   kube.Interface
	NodeName string
	Config   config.LabellerConfig
	Discover DiscoverFunc
	Logger   *slog.Logger
	Clock    clock.WithTicker
	Recorder events.Recorder
	// Metrics are built by the caller with NewMetrics on the agent's
	// registry; nil gives unregistered ones.
	Metrics *Metrics
	// WatchKubeVirt follows the KubeVirt CR while labeller.kubeVirtCR is
	// auto; nil leaves it unread, as ignore does.
	WatchKubeVirt WatchKubeVirtFunc
}

// NewController returns a labeller for opts.NodeName.
func NewController(o Options) (*Controller, error) {
	if o.Client == nil || o.NodeName == "" || o.Discover == nil {
		return nil, fmt.Errorf("labeller: client, node name and discover function are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Recorder == nil {
		o.Recorder = events.Discard{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return &Controller{
		client: o.Client, nodeName: o.NodeName, logger: o.Logger, clock: o.Clock, recorder: o.Recorder,
		discover: o.Discover, metrics: o.Metrics, cfg: o.Config,
		configs:       make(chan config.LabellerConfig, 1),
		watchKubeVirt: o.WatchKubeVirt,
		kubeVirt:      make(chan kubeVirtReport, 1),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryAfterFailure, retryAfterFailureCap),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "labeller", Clock: o.Clock}),
	}, nil
}

// Name implements agent.Component.
func (c *Controller) Name() string { return "labeller" }

// SetConfig hands the controller a new, already validated configuration; it
// re-discovers and re-labels with it.
func (c *Controller) SetConfig(cfg config.LabellerConfig) {
	select {
	case <-c.configs:
	default:
	}
	c.configs <- cfg
}

func (c *Controller) nodeRef() *corev1.ObjectReference {
	return kube.NodeReference(c.nodeName)
}

// enqueue asks for a sync of the node's labels.
func (c *Controller) enqueue() { c.queue.Add(c.nodeName) }

// Run implements agent.Component. Discovery runs here, at start, every
// rediscovery period and on a configuration change; the KubeVirt CR's
// watcher runs beside it while labeller.kubeVirtCR is auto, and its reports
// recompute the labels from the last discovery; syncs run in one worker off
// the queue, so a Node event never waits for a discovery.
func (c *Controller) Run(ctx context.Context, view agent.NodeView) error {
	defer c.queue.ShutDown()
	kv := &kubeVirtWatch{c: c}
	defer kv.stop()
	c.mu.Lock()
	mode := c.cfg.KubeVirtCR
	c.mu.Unlock()
	kv.start(ctx, mode)
	c.rediscover(ctx)
	if err := view.AddHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueue() },
		UpdateFunc: func(_, _ any) { c.enqueue() },
	}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.worker(ctx, view) })
	defer wg.Wait()
	c.enqueue()
	c.mu.Lock()
	period := c.cfg.RediscoveryPeriod.Duration
	c.mu.Unlock()
	ticker := c.clock.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			c.queue.ShutDown()
			return nil
		case cfg := <-c.configs:
			c.mu.Lock()
			changed := cfg.RediscoveryPeriod != c.cfg.RediscoveryPeriod
			modeChanged := cfg.KubeVirtCR != c.cfg.KubeVirtCR
			c.cfg = cfg
			c.mu.Unlock()
			if changed {
				ticker.Stop()
				ticker = c.clock.NewTicker(cfg.RediscoveryPeriod.Duration)
			}
			if modeChanged {
				kv.stop()
				kv.start(ctx, cfg.KubeVirtCR)
			}
			c.logger.Info("Configuration changed; discovering again")
			c.rediscover(ctx)
			c.enqueue()
		case r := <-c.kubeVirt:
			if r.gen != kv.gen {
				continue // a stopped watcher's
			}
			c.setKubeVirt(&r.state)
			c.recompute()
			c.enqueue()
		case <-ticker.C():
			c.rediscover(ctx)
			c.enqueue()
		}
	}
}

// kubeVirtWatch runs the KubeVirt CR's watcher for one labeller.kubeVirtCR
// setting at a time.
type kubeVirtWatch struct {
	c      *Controller
	gen    int
	cancel context.CancelFunc
	done   chan struct{}
}

// start follows the CR when mode is auto and there is a watcher; otherwise
// the CR's state is known at once: none.
func (w *kubeVirtWatch) start(ctx context.Context, mode string) {
	w.gen++
	if mode != config.KubeVirtCRAuto || w.c.watchKubeVirt == nil {
		note := "labeller.kubeVirtCR is " + mode
		if mode == config.KubeVirtCRAuto {
			note = "the KubeVirt CR is not watched"
		}
		w.c.setKubeVirt(&KubeVirtState{Note: note})
		return
	}
	w.c.setKubeVirt(nil)
	wctx, cancel := context.WithCancel(ctx)
	gen, done := w.gen, make(chan struct{})
	w.cancel, w.done = cancel, done
	go func() {
		defer close(done)
		w.c.watchKubeVirt(wctx, func(s KubeVirtState) {
			r := kubeVirtReport{gen: gen, state: s}
			// Only the latest report matters: replace an unread one.
			for {
				select {
				case w.c.kubeVirt <- r:
					return
				case <-w.c.kubeVirt:
				case <-wctx.Done():
					return
				}
			}
		})
	}()
}

func (w *kubeVirtWatch) stop() {
	if w.cancel != nil {
		w.cancel()
		<-w.done
		w.cancel = nil
	}
}

// setKubeVirt records the KubeVirt CR's state; nil means not known yet.
func (c *Controller) setKubeVirt(s *KubeVirtState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kv = s
}

// worker syncs the node's labels each time its key comes off the queue. A
// failed patch puts the key back rate-limited (retryAfterFailure doubling
// to retryAfterFailureCap); a success forgets its failures.
func (c *Controller) worker(ctx context.Context, view agent.NodeView) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		if err := c.sync(ctx, view); err != nil && ctx.Err() == nil {
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// rediscover takes a new snapshot and computes the desired labels. On a
// failure the previous desired labels stay in force.
func (c *Controller) rediscover(ctx context.Context) {
	c.mu.Lock()
	cfg := c.cfg
	c.mu.Unlock()
	start := c.clock.Now()
	h, err := c.discover(ctx, cfg)
	if err != nil {
		c.logger.Error("Host CPU discovery failed; keeping the labels computed before", "err", err)
		c.metrics.Syncs.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			c.recorder.Eventf(c.nodeRef(), corev1.EventTypeWarning, "CPUDiscoveryFailed",
				"Host CPU discovery failed; the CPU labels stay as they were and discovery is tried again in %s: %v", cfg.RediscoveryPeriod.Duration, err)
		}
		return
	}
	source := "libvirt"
	if h.LibvirtUnreachable != "" {
		source = "cpuid"
	}
	c.metrics.DiscoveryDuration.WithLabelValues(source).Observe(c.clock.Since(start).Seconds())
	c.mu.Lock()
	c.host = h
	c.mu.Unlock()
	if h.LibvirtUnreachable == "" {
		c.warnedLibvirt = false
	}
	c.logger.Info("Host CPU discovered", "source", source, "duration", c.clock.Since(start))
	c.recompute()
}

// policy is the label policy in force: the configuration's keys, and the
// KubeVirt CR's settings where there is one; ok is false while the CR's
// state is not known yet.
func (c *Controller) policy() (p Policy, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p = Policy{MinCPUModel: c.cfg.MinCPUModel, ObsoleteCPUModels: c.cfg.ObsoleteCPUModels}
	if c.kv == nil {
		return p, false
	}
	p.KubeVirt, p.KubeVirtNote = c.kv.Settings, c.kv.Note
	return p, true
}

// recompute turns the last discovery into the desired labels under the
// policy in force. Until discovery has succeeded once, or while the
// KubeVirt CR's state is not known, there is nothing to compute, and the
// Node's labels stay as they are.
func (c *Controller) recompute() {
	c.mu.Lock()
	h := c.host
	c.mu.Unlock()
	policy, ok := c.policy()
	if !ok {
		c.logger.Info("Waiting for the KubeVirt CR's state before labelling", "resource", "kubevirts.kubevirt.io")
		return
	}
	// Said once, and again when the settings or the reason for them change.
	if said := policy.Summary() + "\n" + policy.KubeVirtNote; said != c.loggedSettings {
		c.loggedSettings = said
		c.logger.Info("Labelling settings", "source", policy.Source(), "settings", policy.Summary(), "note", policy.KubeVirtNote)
	}
	if h == nil {
		return
	}
	res, err := policy.Labels(h)
	if err != nil {
		c.logger.Error("Computing labels failed; keeping the labels computed before", "err", err)
		return
	}
	for _, w := range res.Warnings {
		c.logger.Warn("Label skipped", "reason", w)
	}
	if h.LibvirtUnreachable != "" && !c.warnedLibvirt {
		c.warnedLibvirt = true
		var omitted []string
		for _, o := range res.Omitted {
			omitted = append(omitted, o.String())
		}
		c.logger.Warn("libvirt unavailable; labelling from cpuid only", "reason", h.LibvirtUnreachable, "omitted", strings.Join(omitted, "; "))
		c.recorder.Eventf(c.nodeRef(), corev1.EventTypeWarning, "LibvirtUnavailable",
			"libvirt unavailable (%s); CPU labels come from cpuid only, and these are not computed: %s", h.LibvirtUnreachable, strings.Join(res.OmittedPrefixes(), ", "))
	}
	if res.HostModelObsolete && h.HostModel != nil && c.warnedObsolete != h.HostModel.Name {
		c.warnedObsolete = h.HostModel.Name
		c.recorder.Eventf(c.nodeRef(), corev1.EventTypeWarning, "ObsoleteHostModel",
			"The host-model CPU %s is on the obsolete list (%s); KubeVirt will not schedule host-model VMs here", h.HostModel.Name, policy.Source())
	}
	if !res.HostModelObsolete {
		c.warnedObsolete = ""
	}
	c.mu.Lock()
	c.desired = res
	c.mu.Unlock()
	c.metrics.Managed.Set(float64(len(res.Labels)))
	c.logger.Info("Labels computed", "labels", len(res.Labels), "source", policy.Source())
}

// Diff returns the labels to set and the owned keys to remove so that current
// becomes desired. Keys of omitted families are left alone: not knowing them
// is no reason to remove them.
func Diff(current, desired map[string]string, keep []string) (set map[string]string, remove []string) {
	set = map[string]string{}
	for k, v := range desired {
		if cur, ok := current[k]; !ok || cur != v {
			set[k] = v
		}
	}
	for k := range current {
		if !IsOwnedKey(k) {
			continue
		}
		if _, ok := desired[k]; ok {
			continue
		}
		kept := false
		for _, p := range keep {
			if strings.HasPrefix(k, p) {
				kept = true
				break
			}
		}
		if !kept {
			remove = append(remove, k)
		}
	}
	sort.Strings(remove)
	return set, remove
}

// skipState reads the skip-node annotation. A value other than true or
// false is refused: nothing is changed, and the admin is told.
func skipState(node *corev1.Node) (skip bool, err error) {
	v, ok := node.Annotations[SkipNodeAnnotation]
	if !ok {
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		return true, nil
	case "false", "":
		return false, nil
	}
	return true, fmt.Errorf("annotation %s=%q is neither true nor false; labelling is paused until it is fixed", SkipNodeAnnotation, v)
}

// sync compares the Node's owned labels with the desired ones and sends one
// patch when they differ. It returns an error when the patch failed and
// should be tried again.
func (c *Controller) sync(ctx context.Context, view agent.NodeView) error {
	c.mu.Lock()
	res := c.desired
	c.mu.Unlock()
	if res == nil {
		return nil
	}
	node, err := view.Get()
	if err != nil {
		// Not in the informer's cache yet; its Add event enqueues again.
		return nil
	}
	start := c.clock.Now()
	defer func() { c.metrics.SyncDuration.Observe(c.clock.Since(start).Seconds()) }()
	skip, serr := skipState(node)
	if serr != nil {
		if c.warnedSkip != node.Annotations[SkipNodeAnnotation] {
			c.warnedSkip = node.Annotations[SkipNodeAnnotation]
			c.logger.Error("Bad skip-node annotation", "err", serr)
			c.recorder.Eventf(c.nodeRef(), corev1.EventTypeWarning, "BadSkipNodeAnnotation", "%v", serr)
		}
	}
	if skip {
		c.metrics.Syncs.WithLabelValues("skipped").Inc()
		return nil
	}
	set, remove := Diff(node.Labels, res.Labels, res.OmittedPrefixes())
	if len(set) == 0 && len(remove) == 0 {
		c.metrics.Syncs.WithLabelValues("unchanged").Inc()
		return nil
	}
	if err := c.patch(ctx, node.ResourceVersion, set, remove); err != nil {
		if apierrors.IsConflict(err) {
			// The Node changed under us; its informer event, or the
			// rate-limited retry, brings a new sync with the fresh state.
			c.logger.Debug("Label patch conflicted; retrying", "err", err)
			c.metrics.Syncs.WithLabelValues("conflict").Inc()
			return err
		}
		c.metrics.Syncs.WithLabelValues("error").Inc()
		c.logger.Error("Patching labels failed", "err", err)
		return err
	}
	c.metrics.Syncs.WithLabelValues("changed").Inc()
	c.logger.Info("Labels updated", "added", len(set), "removed", len(remove))
	c.recorder.Eventf(c.nodeRef(), corev1.EventTypeNormal, "CPULabelsChanged", "CPU labels changed: %d added or updated, %d removed", len(set), len(remove))
	return nil
}

const (
	// retryAfterFailure is the first wait before a failed label patch is
	// tried again; it doubles up to retryAfterFailureCap.
	retryAfterFailure    = time.Second
	retryAfterFailureCap = time.Minute
)

// patch sends one merge patch that sets and removes only owned keys. The
// resourceVersion in the patch makes it conditional: if the Node changed
// since we read it, the apiserver answers 409 and nothing is written.
func (c *Controller) patch(ctx context.Context, resourceVersion string, set map[string]string, remove []string) error {
	labels := map[string]*string{}
	for k, v := range set {
		labels[k] = &v
	}
	for _, k := range remove {
		labels[k] = nil
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": resourceVersion, "labels": labels}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, c.nodeName, types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager})
	return err
}
