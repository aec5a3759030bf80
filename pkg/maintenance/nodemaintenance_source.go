package maintenance

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/node-agent/node-agent/pkg/selfdrain"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/node-agent/node-agent/pkg/kube"
)

// DefaultNodeMaintenanceRecheck is how often discovery is asked again for
// the NodeMaintenance groups the cluster does not serve yet: a minute after
// node-maintenance-operator's CRD is installed, its objects are served, for
// one discovery request a minute where it is not.
const DefaultNodeMaintenanceRecheck = time.Minute

// NodeMaintenanceSource watches the NodeMaintenance objects that name the
// agent's node, in whichever of NodeMaintenanceGroups the cluster serves,
// and writes their status and the agent's finalizer.
//
// The watch is on spec.nodeName=<node> where the CRD declares spec.nodeName
// a selectable field (the CRD in deploy/components/nodemaintenance does), so
// each agent receives only its own node's objects. The operator's CRD does
// not; the agent then watches every NodeMaintenance object and keeps those
// of its node. There are few: one per node in maintenance.
type NodeMaintenanceSource struct {
	Client    dynamic.Interface
	Discovery kube.DiscoveryInterface
	NodeName  string
	Logger    *slog.Logger
	Clock     clock.WithTicker
	// RecheckInterval is how often groups not served at start are looked
	// for again, so a CRD installed later is picked up without a restart;
	// 0: DefaultNodeMaintenanceRecheck.
	RecheckInterval time.Duration

	mu        sync.Mutex
	informers map[string]cache.SharedIndexInformer // by group
	// checked is true once discovery has answered for every group, so that
	// an empty cache means "no object" rather than "not known yet".
	checked bool
}

// Run looks for the served groups and watches them until ctx ends; changed
// is called after every change of the objects seen.
func (s *NodeMaintenanceSource) Run(ctx context.Context, changed func()) {
	s.mu.Lock()
	if s.informers == nil {
		s.informers = map[string]cache.SharedIndexInformer{}
	}
	s.mu.Unlock()
	for {
		if err := s.discover(ctx, changed); err != nil {
			s.Logger.Warn("Cannot tell which NodeMaintenance API groups the cluster serves; trying again", "err", err)
		}
		// The controller does nothing until Synced; the last event may
		// come before the cache counts as synced, so say so once it is.
		s.mu.Lock()
		synced := make([]cache.InformerSynced, 0, len(s.informers))
		for _, inf := range s.informers {
			synced = append(synced, inf.HasSynced)
		}
		s.mu.Unlock()
		if !cache.WaitForCacheSync(ctx.Done(), synced...) {
			return
		}
		changed()
		wait := s.RecheckInterval
		if wait <= 0 {
			wait = DefaultNodeMaintenanceRecheck
		}
		if !s.isChecked() {
			wait = min(wait, 5*time.Second)
		}
		s.mu.Lock()
		all := len(s.informers) == len(NodeMaintenanceGroups)
		s.mu.Unlock()
		if all {
			<-ctx.Done()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.Clock.After(wait):
		}
	}
}

func (s *NodeMaintenanceSource) isChecked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checked
}

// discover starts an informer for every served group that has none yet.
func (s *NodeMaintenanceSource) discover(ctx context.Context, changed func()) error {
	for _, group := range NodeMaintenanceGroups {
		s.mu.Lock()
		_, running := s.informers[group]
		s.mu.Unlock()
		if running {
			continue
		}
		served, err := s.served(group)
		if err != nil {
			return err
		}
		if !served {
			continue
		}
		inf, err := s.startInformer(ctx, group, changed)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.informers[group] = inf
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.checked = true
	groups := make([]string, 0, len(s.informers))
	for g := range s.informers {
		groups = append(groups, g)
	}
	s.mu.Unlock()
	slices.Sort(groups)
	s.Logger.Debug("NodeMaintenance API groups served", "groups", groups)
	return nil
}

func (s *NodeMaintenanceSource) served(group string) (bool, error) {
	gv := schema.GroupVersion{Group: group, Version: NodeMaintenanceVersion}.String()
	list, err := s.Discovery.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == NodeMaintenanceResource {
			return true, nil
		}
	}
	return false, nil
}

// startInformer watches group's objects, with the spec.nodeName field
// selector if the CRD allows it.
func (s *NodeMaintenanceSource) startInformer(ctx context.Context, group string, changed func()) (cache.SharedIndexInformer, error) {
	gvr := NodeMaintenanceGVR(group)
	sel := fields.OneTermEqualSelector("spec.nodeName", s.NodeName).String()
	_, err := s.Client.Resource(gvr).List(ctx, metav1.ListOptions{FieldSelector: sel, Limit: 1})
	switch {
	case apierrors.IsBadRequest(err):
		// The CRD has no selectableFields for spec.nodeName.
		s.Logger.Info("NodeMaintenance CRD has no selectable field spec.nodeName; watching every object of the group and keeping this node's", "group", group)
		sel = ""
	case err != nil:
		return nil, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
	}
	inf := kube.Informer(s.Client, &unstructured.Unstructured{}, s.Client.Resource(gvr), sel)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(_, _ any) { changed() },
		DeleteFunc: func(any) { changed() },
	}); err != nil {
		return nil, err
	}
	go inf.RunWithContext(ctx)
	s.Logger.Info("Serving NodeMaintenance objects", "group", group, "fieldSelector", sel)
	return inf, nil
}

// Synced reports whether the objects are known: every served group was
// found and its cache is filled.
func (s *NodeMaintenanceSource) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checked {
		return false
	}
	for _, inf := range s.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Groups returns the groups being watched.
func (s *NodeMaintenanceSource) Groups() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for g := range s.informers {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

// Objects returns the cached objects whose spec.nodeName is this node.
func (s *NodeMaintenanceSource) Objects() []*NodeMaintenance {
	s.mu.Lock()
	infs := make([]cache.SharedIndexInformer, 0, len(s.informers))
	for _, inf := range s.informers {
		infs = append(infs, inf)
	}
	s.mu.Unlock()
	var out []*NodeMaintenance
	for _, inf := range infs {
		for _, obj := range inf.GetStore().List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			nm, err := NodeMaintenanceFromUnstructured(u)
			if err != nil {
				s.Logger.Warn("Ignoring a NodeMaintenance object that does not decode", "err", err)
				continue
			}
			if nm.Spec.NodeName == s.NodeName {
				out = append(out, nm)
			}
		}
	}
	sortObjects(out)
	return out
}

// setFinalizer adds or removes NodeMaintenanceFinalizer with a merge patch
// conditional on the resourceVersion read, so another writer's finalizer is
// never lost.
func (s *NodeMaintenanceSource) setFinalizer(ctx context.Context, nm *NodeMaintenance, present bool) error {
	var list []string
	for _, f := range nm.Finalizers {
		if f != NodeMaintenanceFinalizer {
			list = append(list, f)
		}
	}
	if present {
		list = append(list, NodeMaintenanceFinalizer)
	}
	if list == nil {
		list = []string{}
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": nm.ResourceVersion, "finalizers": list}})
	if err != nil {
		return err
	}
	_, err = s.Client.Resource(NodeMaintenanceGVR(nm.Group())).Patch(ctx, nm.Name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: selfdrain.FieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("updating the finalizers of %s: %w", nm.ID(), err)
	}
	return nil
}

// writeStatus replaces the object's status.
func (s *NodeMaintenanceSource) writeStatus(ctx context.Context, nm *NodeMaintenance, st NodeMaintenanceStatus) error {
	b, err := json.Marshal(statusPatch(st))
	if err != nil {
		return err
	}
	_, err = s.Client.Resource(NodeMaintenanceGVR(nm.Group())).Patch(ctx, nm.Name, types.MergePatchType, b, metav1.PatchOptions{FieldManager: selfdrain.FieldManager}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the status of %s: %w", nm.ID(), err)
	}
	return nil
}

// apply carries out the actions planObjects chose.
func (s *NodeMaintenanceSource) apply(ctx context.Context, actions []objectAction) {
	for _, a := range actions {
		log := s.Logger.With("nodeMaintenance", a.obj.ID())
		if a.addFinalizer {
			if err := s.setFinalizer(ctx, a.obj, true); err != nil {
				log.Warn("Could not add the finalizer", "err", err)
			}
		}
		if a.status != nil {
			if err := s.writeStatus(ctx, a.obj, *a.status); err != nil {
				log.Warn("Could not write the NodeMaintenance status", "err", err)
			}
		}
		if a.removeFinalizer {
			if err := s.setFinalizer(ctx, a.obj, false); err != nil {
				log.Warn("Could not remove the finalizer", "err", err)
			} else {
				log.Info("Released NodeMaintenance object: the node is out of this maintenance")
			}
		}
	}
}
