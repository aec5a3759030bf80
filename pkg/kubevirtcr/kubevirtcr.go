// Package kubevirtcr owns reading KubeVirt's own configuration from the
// KubeVirt custom resource (kubevirts.kubevirt.io/v1): whether the cluster
// serves the resource, which CR is in force, and the fields of its
// spec.configuration that node-agent's labeller follows (obsoleteCPUModels,
// minCPUModel and developerConfiguration.featureGates), the VM defaults
// pkg/vmdrain applies, and the settings pkg/targetpod renders KubeVirt's
// migration target pod from (targetpod.go).
//
// KubeVirt's components read the CR of their own namespace that
// virt-operator has taken up (status.phase set) and is not deleting
// (pkg/virt-config/configuration.go GetConfigFromKubeVirtCR, kubevirt/kubevirt
// d923fdb); virt-operator refuses to install from more than one
// (checkForActiveInstall). node-agent does not know KubeVirt's namespace, so
// it reads the CRs of every namespace (there is normally one) and, should
// there be several, takes the oldest and says so.
//
// Watcher follows the CR with one informer on the resource and no polling of
// it; while the cluster does not serve the resource, it asks discovery again
// at a long interval, so that a KubeVirt installed later is picked up without
// a restart. Read is the one-shot form for `node-agent labels`. Nothing here
// knows about labels: the wiring hands the Settings to pkg/labeller.
package kubevirtcr

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/kube"
)

// GVR is the KubeVirt CR's resource.
var GVR = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "kubevirts"}

// Resource names GVR for people: kubevirts.kubevirt.io.
const Resource = "kubevirts.kubevirt.io"

// Settings are the fields of one KubeVirt CR node-agent reads.
type Settings struct {
	// CR is the CR's namespace/name.
	CR string
	// ObsoleteCPUModels are the keys of spec.configuration.obsoleteCPUModels,
	// sorted, whatever their values (KubeVirt tests presence); empty when
	// the CR has none.
	ObsoleteCPUModels []string
	// MinCPUModel is spec.configuration.minCPUModel.
	MinCPUModel string
	// FeatureGates are spec.configuration.developerConfiguration.featureGates.
	FeatureGates []string
	// EvictionStrategy and CPUModel are spec.configuration.evictionStrategy
	// and cpuModel: the defaults of VMs that set none (pkg/vmdrain).
	EvictionStrategy string
	CPUModel         string

	// The fields below are those pkg/targetpod renders KubeVirt's
	// migration target pod from, as the CR has them (no defaults applied:
	// zero means the CR does not set the field).

	// NodeSelectors are developerConfiguration.nodeSelectors.
	NodeSelectors map[string]string
	// MemoryOvercommit is developerConfiguration.memoryOvercommit (a
	// percentage); CPUAllocationRatio is developerConfiguration.cpuAllocationRatio.
	MemoryOvercommit   int
	CPUAllocationRatio int
	// UseEmulation is developerConfiguration.useEmulation.
	UseEmulation bool
	// AdditionalGuestMemoryOverheadRatio is
	// spec.configuration.additionalGuestMemoryOverheadRatio, a decimal
	// number as text.
	AdditionalGuestMemoryOverheadRatio string
	// DefaultRuntimeClass is spec.configuration.defaultRuntimeClass.
	DefaultRuntimeClass string
	// SerialConsoleLogDisabled says that
	// spec.configuration.virtualMachineOptions.disableSerialConsoleLog is
	// present (KubeVirt tests presence, not a value).
	SerialConsoleLogDisabled bool
	// NetworkBindings are, by binding plugin name, the
	// computeResourceOverhead.requests.memory of each entry of
	// spec.configuration.network.binding; a plugin without one is absent.
	NetworkBindings map[string]resource.Quantity
	// ObservedVersion is status.observedKubeVirtVersion: the release
	// virt-operator has deployed.
	ObservedVersion string
}

// State is what the cluster says about the KubeVirt CR.
type State struct {
	// Settings are those of the CR in force; nil when there is none.
	Settings *Settings
	// Note says why no CR is in force, or remarks on the one chosen
	// (several CRs, a field that does not decode); empty when there is one
	// CR and nothing to remark.
	Note string
}

// Equal reports whether s and o say the same.
func (s State) Equal(o State) bool {
	if s.Note != o.Note || (s.Settings == nil) != (o.Settings == nil) {
		return false
	}
	if s.Settings == nil {
		return true
	}
	a, b := s.Settings, o.Settings
	return a.CR == b.CR && a.MinCPUModel == b.MinCPUModel && a.EvictionStrategy == b.EvictionStrategy && a.CPUModel == b.CPUModel &&
		slices.Equal(a.ObsoleteCPUModels, b.ObsoleteCPUModels) && slices.Equal(a.FeatureGates, b.FeatureGates) &&
		maps.Equal(a.NodeSelectors, b.NodeSelectors) && a.MemoryOvercommit == b.MemoryOvercommit &&
		a.CPUAllocationRatio == b.CPUAllocationRatio && a.UseEmulation == b.UseEmulation &&
		a.AdditionalGuestMemoryOverheadRatio == b.AdditionalGuestMemoryOverheadRatio &&
		a.DefaultRuntimeClass == b.DefaultRuntimeClass && a.SerialConsoleLogDisabled == b.SerialConsoleLogDisabled &&
		a.ObservedVersion == b.ObservedVersion &&
		// Quantities compare by value: "1Gi" and "1024Mi" say the same.
		maps.EqualFunc(a.NetworkBindings, b.NetworkBindings, func(x, y resource.Quantity) bool { return x.Cmp(y) == 0 })
}

// NotServed is the Note of a cluster that serves no kubevirts.kubevirt.io.
const NotServed = "the cluster serves no " + Resource + " (KubeVirt is not installed)"

// Choose returns the state the CRs objs say: the CR in force is one that
// virt-operator has taken up (status.phase set) and is not being deleted, as
// KubeVirt's own components choose it; of several, the oldest (then by
// namespace and name), since virt-operator installs from one only.
func Choose(objs []*unstructured.Unstructured) State {
	var live, waiting []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetDeletionTimestamp() != nil {
			continue
		}
		if phase, _, _ := unstructured.NestedString(o.Object, "status", "phase"); phase == "" {
			waiting = append(waiting, o)
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		if len(waiting) > 0 {
			return State{Note: fmt.Sprintf("no KubeVirt CR in force: %s has no status.phase yet (virt-operator has not taken it up)", names(waiting))}
		}
		return State{Note: "no KubeVirt CR"}
	}
	slices.SortFunc(live, func(a, b *unstructured.Unstructured) int {
		if c := a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time); c != 0 {
			return c
		}
		return cmp.Compare(key(a), key(b))
	})
	s, problems := settingsOf(live[0])
	st := State{Settings: s}
	if len(live) > 1 {
		problems = append([]string{fmt.Sprintf("%d KubeVirt CRs in force (%s): virt-operator installs from one only; the oldest, %s, applies", len(live), names(live), s.CR)}, problems...)
	}
	st.Note = strings.Join(problems, "; ")
	return st
}

// settingsOf reads the fields of one CR. A field of the wrong type (possible
// only under a CRD without KubeVirt's schema) is left out and named.
func settingsOf(o *unstructured.Unstructured) (*Settings, []string) {
	s := &Settings{CR: key(o)}
	var problems []string
	conf := []string{"spec", "configuration"}
	if m, found, err := unstructured.NestedFieldNoCopy(o.Object, append(conf, "obsoleteCPUModels")...); err == nil && found && m != nil {
		if models, ok := m.(map[string]any); ok {
			for name := range models {
				s.ObsoleteCPUModels = append(s.ObsoleteCPUModels, name)
			}
			slices.Sort(s.ObsoleteCPUModels)
		} else {
			problems = append(problems, fmt.Sprintf("%s: spec.configuration.obsoleteCPUModels is a %T, not a map of model names; ignored", s.CR, m))
		}
	}
	for _, f := range []struct {
		key string
		to  *string
	}{{"minCPUModel", &s.MinCPUModel}, {"evictionStrategy", &s.EvictionStrategy}, {"cpuModel", &s.CPUModel}} {
		if v, found, err := unstructured.NestedFieldNoCopy(o.Object, append(conf, f.key)...); err == nil && found {
			if m, ok := v.(string); ok {
				*f.to = m
			} else {
				problems = append(problems, fmt.Sprintf("%s: spec.configuration.%s is a %T, not a string; ignored", s.CR, f.key, v))
			}
		}
	}
	gates, found, err := unstructured.NestedStringSlice(o.Object, append(conf, "developerConfiguration", "featureGates")...)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("%s: spec.configuration.developerConfiguration.featureGates is not a list of names; ignored", s.CR))
	case found:
		s.FeatureGates = gates
	}
	problems = append(problems, s.readTargetPodFields(o)...)
	return s, problems
}

func key(o *unstructured.Unstructured) string {
	return o.GetNamespace() + "/" + o.GetName()
}

func names(objs []*unstructured.Unstructured) string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = key(o)
	}
	return strings.Join(out, ", ")
}

// Read returns the state once: discovery, then one list of the CRs.
func Read(ctx context.Context, d kube.DiscoveryInterface, c dynamic.Interface) (State, error) {
	ok, err := kube.Serves(d, GVR)
	if err != nil {
		return State{}, err
	}
	if !ok {
		return State{Note: NotServed}, nil
	}
	list, err := c.Resource(GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return State{}, fmt.Errorf("listing %s: %w", Resource, err)
	}
	objs := make([]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	return Choose(objs), nil
}

// Watcher follows the KubeVirt CR.
type Watcher struct {
	Client    dynamic.Interface
	Discovery kube.DiscoveryInterface
	Logger    *slog.Logger
	Clock     clock.Clock
	// RecheckInterval is how long the watcher waits before asking
	// discovery again while the cluster serves no kubevirts.kubevirt.io,
	// or after reading them failed.
	RecheckInterval time.Duration
}

// Run reports the state once it is known, and again each time it changes,
// until ctx ends. It reports nothing while it cannot tell (discovery
// failing), so that a caller waiting for the first state changes nothing on
// a guess.
func (w *Watcher) Run(ctx context.Context, report func(State)) {
	var mu sync.Mutex
	var last *State
	send := func(s State) {
		mu.Lock()
		defer mu.Unlock()
		if last != nil && last.Equal(s) {
			return
		}
		last = &s
		report(s)
	}
	var warned string
	for ctx.Err() == nil {
		ok, err := kube.Serves(w.Discovery, GVR)
		switch {
		case err != nil:
			if err.Error() != warned {
				warned = err.Error()
				w.Logger.Warn("Cannot tell whether the cluster serves the KubeVirt CR; asking again", "resource", Resource, "err", err, "retryIn", w.RecheckInterval)
			}
		case !ok:
			send(State{Note: NotServed})
		default:
			err := w.watch(ctx, send)
			switch {
			case ctx.Err() != nil:
				return
			case apierrors.IsNotFound(err):
				// The CRD went away: ask discovery at once.
				w.Logger.Info("The KubeVirt CR's resource is gone", "resource", Resource)
				continue
			case apierrors.IsForbidden(err):
				send(State{Note: fmt.Sprintf("reading %s is forbidden (%v): grant list and watch on it (deploy/rbac.yaml) or set labeller.kubeVirtCR: ignore", Resource, err)})
			default:
				w.Logger.Warn("Watching the KubeVirt CR failed; asking again", "resource", Resource, "err", err, "retryIn", w.RecheckInterval)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.Clock.After(w.RecheckInterval):
		}
	}
}

// watch runs an informer on every KubeVirt CR and sends the state after its
// first list and after every change. It returns when ctx ends, or with the
// error that stopped it: the resource gone (NotFound) or refused
// (Forbidden). Other errors the informer retries itself, as every informer
// does.
func (w *Watcher) watch(ctx context.Context, send func(State)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var stopped error
	inf := kube.Informer(w.Client, &unstructured.Unstructured{}, w.Client.Resource(GVR), "")
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			mu.Lock()
			stopped = err
			mu.Unlock()
			cancel()
			return
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return err
	}
	current := func() State {
		var objs []*unstructured.Unstructured
		for _, o := range inf.GetStore().List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				objs = append(objs, u)
			}
		}
		return Choose(objs)
	}
	changed := func() {
		if inf.HasSynced() {
			send(current())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(_, _ any) { changed() },
		DeleteFunc: func(any) { changed() },
	}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		w.Logger.Debug("Watching the KubeVirt CR", "resource", Resource)
		send(current())
		<-ctx.Done()
	}
	mu.Lock()
	defer mu.Unlock()
	return stopped
}
