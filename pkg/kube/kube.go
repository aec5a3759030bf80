// Package kube is the part of the Kubernetes API node-agent uses, and a
// client for it that links only those API groups.
//
// client-go's generated clientset registers every built-in API group, and
// any of its typed clients pulls in the scheme that does; in node-agent that
// was about 10 MiB of resident binary pages for groups it never calls. The
// interfaces here have the same method shapes as client-go's typed clients,
// so a client-go clientset (the fake one in unit tests, or a test's real one)
// satisfies them through kubetest.Wrap, while the agent itself runs on New,
// which is built from client-go's REST client, with the requests of its
// generic clients (resource.go), and a scheme of four groups.
package kube

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
)

// Interface is the API node-agent calls, grouped as client-go groups it.
type Interface interface {
	CoreV1() CoreV1Interface
	PolicyV1() PolicyV1Interface
	CoordinationV1() CoordinationV1Interface
	AppsV1() AppsV1Interface
	Discovery() DiscoveryInterface
}

// CoreV1Interface is the core group's part of Interface.
type CoreV1Interface interface {
	Nodes() NodeInterface
	Pods(namespace string) PodInterface
	Events(namespace string) EventInterface
	Namespaces() NamespaceInterface
}

// NamespaceInterface lists Namespaces: their labels, which pod affinity
// terms select by (pkg/vmdrain's plan).
type NamespaceInterface interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error)
}

// NodeInterface is what node-agent does with Nodes.
type NodeInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
	// PatchStatus applies a strategic merge patch to the status subresource.
	PatchStatus(ctx context.Context, nodeName string, data []byte) (*corev1.Node, error)
}

// PodInterface is what node-agent does with Pods.
type PodInterface interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// EventInterface writes Events into the namespace of the Event itself, as
// events.Writer needs.
type EventInterface interface {
	CreateWithEventNamespaceWithContext(ctx context.Context, event *corev1.Event) (*corev1.Event, error)
	PatchWithEventNamespaceWithContext(ctx context.Context, event *corev1.Event, data []byte) (*corev1.Event, error)
}

// PolicyV1Interface is the policy group's part of Interface.
type PolicyV1Interface interface {
	Evictions(namespace string) EvictionInterface
	PodDisruptionBudgets(namespace string) PodDisruptionBudgetInterface
}

// EvictionInterface posts Evictions.
type EvictionInterface interface {
	Evict(ctx context.Context, eviction *policyv1.Eviction) error
}

// PodDisruptionBudgetInterface lists PodDisruptionBudgets.
type PodDisruptionBudgetInterface interface {
	List(ctx context.Context, opts metav1.ListOptions) (*policyv1.PodDisruptionBudgetList, error)
}

// CoordinationV1Interface is the coordination group's part of Interface.
type CoordinationV1Interface interface {
	Leases(namespace string) LeaseInterface
}

// LeaseInterface is what the drain slot coordinator (pkg/slots
// Coordinator) does with the slot Leases and its record of the last reboot:
// it lists them by label, and creates and deletes them whole; it patches a
// slot's one annotation that records its holder's recovery
// (slots.pools[].recoveryBound); it never gets, watches or updates one. Its
// leader election does not come through here:
// pkg/slots/election uses client-go's own coordination client. Agents use
// none of it.
type LeaseInterface interface {
	List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// AppsV1Interface is the apps group's part of Interface.
type AppsV1Interface interface {
	DaemonSets(namespace string) DaemonSetInterface
}

// DaemonSetInterface reads DaemonSets (a drain skips their pods).
type DaemonSetInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.DaemonSet, error)
}

// DiscoveryInterface tells which resources a group version serves, and
// the apiserver's version.
type DiscoveryInterface interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
	ServerVersion() (*version.Info, error)
}

// Scheme knows the four groups of Interface, and the option types every
// group version takes.
var Scheme = runtime.NewScheme()

// parameterCodec encodes list, get, patch and delete options into queries.
var parameterCodec = runtime.NewParameterCodec(Scheme)

func init() {
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, policyv1.AddToScheme, coordinationv1.AddToScheme, appsv1.AddToScheme} {
		utilruntime.Must(add(Scheme))
	}
}

// New returns a client for cfg. As client-go's clientset does, its groups
// share one HTTP client and one rate limiter (cfg.QPS, cfg.Burst).
func New(cfg *rest.Config) (Interface, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(Scheme).WithoutConversion()
	restClient := func(gv schema.GroupVersion) (*rest.RESTClient, error) {
		gc := c
		gc.GroupVersion = &gv
		gc.APIPath = "/apis"
		if gv.Group == "" {
			gc.APIPath = "/api"
		}
		gc.NegotiatedSerializer = codecs
		// Protobuf, as the kubelet and the controllers speak: it decodes
		// without reflection or the JSON decoder's per-type field caches
		// (0.4 MiB of an idle agent's heap, issue 43). JSON stays
		// accepted for answers protobuf does not cover (/version).
		gc.ContentType = runtime.ContentTypeProtobuf
		gc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		return rest.RESTClientForConfigAndClient(&gc, httpClient)
	}
	out := &client{}
	for _, g := range []struct {
		gv schema.GroupVersion
		to **rest.RESTClient
	}{
		{corev1.SchemeGroupVersion, &out.core},
		{policyv1.SchemeGroupVersion, &out.policy},
		{coordinationv1.SchemeGroupVersion, &out.coordination},
		{appsv1.SchemeGroupVersion, &out.apps},
	} {
		rc, err := restClient(g.gv)
		if err != nil {
			return nil, fmt.Errorf("client for %s: %w", g.gv, err)
		}
		*g.to = rc
	}
	return out, nil
}

// RawRESTClient returns a REST client for gv on cfg whose answers callers
// read as raw JSON: for API groups this package's scheme does not know
// (pkg/evictionrequest). Error answers still decode into API errors, so
// apierrors.IsNotFound and the like work on them.
func RawRESTClient(cfg *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.ContentType = "application/json"
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	return rest.RESTClientFor(c)
}

// client is every group of Interface at once (no two groups have a method
// of the same name), each on the REST client of its group version.
type client struct {
	core, policy, coordination, apps *rest.RESTClient
}

func (c *client) CoreV1() CoreV1Interface                 { return c }
func (c *client) PolicyV1() PolicyV1Interface             { return c }
func (c *client) CoordinationV1() CoordinationV1Interface { return c }
func (c *client) AppsV1() AppsV1Interface                 { return c }
func (c *client) Discovery() DiscoveryInterface           { return discovery{c.core} }

func (c *client) Nodes() NodeInterface {
	return nodes{&resource[*corev1.Node, *corev1.NodeList]{rc: c.core, name: "nodes",
		newObject: func() *corev1.Node { return &corev1.Node{} }, newList: func() *corev1.NodeList { return &corev1.NodeList{} }}}
}

func (c *client) Namespaces() NamespaceInterface {
	return &resource[*corev1.Namespace, *corev1.NamespaceList]{rc: c.core, name: "namespaces",
		newObject: func() *corev1.Namespace { return &corev1.Namespace{} }, newList: func() *corev1.NamespaceList { return &corev1.NamespaceList{} }}
}

func (c *client) Pods(namespace string) PodInterface {
	return &resource[*corev1.Pod, *corev1.PodList]{rc: c.core, name: "pods", namespace: namespace,
		newObject: func() *corev1.Pod { return &corev1.Pod{} }, newList: func() *corev1.PodList { return &corev1.PodList{} }}
}

func (c *client) Events(string) EventInterface { return events{c.core} }

func (c *client) Evictions(string) EvictionInterface { return evictions{c.policy} }

func (c *client) PodDisruptionBudgets(namespace string) PodDisruptionBudgetInterface {
	return &resource[*policyv1.PodDisruptionBudget, *policyv1.PodDisruptionBudgetList]{rc: c.policy, name: "poddisruptionbudgets", namespace: namespace,
		newObject: func() *policyv1.PodDisruptionBudget { return &policyv1.PodDisruptionBudget{} },
		newList:   func() *policyv1.PodDisruptionBudgetList { return &policyv1.PodDisruptionBudgetList{} }}
}

func (c *client) Leases(namespace string) LeaseInterface {
	return &resource[*coordinationv1.Lease, *coordinationv1.LeaseList]{rc: c.coordination, name: "leases", namespace: namespace,
		newObject: func() *coordinationv1.Lease { return &coordinationv1.Lease{} },
		newList:   func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} }}
}

func (c *client) DaemonSets(namespace string) DaemonSetInterface {
	return &resource[*appsv1.DaemonSet, *appsv1.DaemonSetList]{rc: c.apps, name: "daemonsets", namespace: namespace,
		newObject: func() *appsv1.DaemonSet { return &appsv1.DaemonSet{} }, newList: func() *appsv1.DaemonSetList { return &appsv1.DaemonSetList{} }}
}

// nodes is a pointer, as every client of this package is: pkg/podaccess
// compares the clients it holds, and a struct of functions is not
// comparable.
type nodes struct {
	*resource[*corev1.Node, *corev1.NodeList]
}

func (n nodes) PatchStatus(ctx context.Context, nodeName string, data []byte) (*corev1.Node, error) {
	return n.Patch(ctx, nodeName, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
}

// events writes each Event into its own namespace, whatever namespace the
// caller asked for: the events of a cluster-scoped Node go to "default".
type events struct{ rc *rest.RESTClient }

func (e events) CreateWithEventNamespaceWithContext(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := e.rc.Post().NamespaceIfScoped(ev.Namespace, ev.Namespace != "").Resource("events").Body(ev).Do(ctx).Into(out)
	return out, err
}

func (e events) PatchWithEventNamespaceWithContext(ctx context.Context, ev *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := e.rc.Patch(types.StrategicMergePatchType).NamespaceIfScoped(ev.Namespace, ev.Namespace != "").Resource("events").Name(ev.Name).Body(data).Do(ctx).Into(out)
	return out, err
}

// evictions posts to the pod's eviction subresource, in the pod's namespace.
type evictions struct{ rc *rest.RESTClient }

func (e evictions) Evict(ctx context.Context, ev *policyv1.Eviction) error {
	return e.rc.Post().AbsPath("/api/v1").Namespace(ev.Namespace).Resource("pods").Name(ev.Name).SubResource("eviction").Body(ev).Do(ctx).Error()
}

// discovery reads one group version's resource list, as client-go's
// discovery client does for ServerResourcesForGroupVersion.
type discovery struct{ rc *rest.RESTClient }

func (d discovery) ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error) {
	path := "/apis/" + groupVersion
	if groupVersion == "v1" {
		path = "/api/v1"
	}
	out := &metav1.APIResourceList{}
	if err := d.rc.Get().AbsPath(path).Do(context.TODO()).Into(out); err != nil {
		return nil, err
	}
	out.GroupVersion = groupVersion
	return out, nil
}

// Serves asks discovery whether the apiserver serves gvr: false, with no
// error, when it does not serve the group version at all.
func Serves(d DiscoveryInterface, gvr schema.GroupVersionResource) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking the apiserver whether it serves %s (%s): %w", gvr.GroupResource(), gvr.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// ServerVersion reads /version, as client-go's discovery client does.
func (d discovery) ServerVersion() (*version.Info, error) {
	body, err := d.rc.Get().AbsPath("/version").Do(context.TODO()).Raw()
	if err != nil {
		return nil, err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("the apiserver's version: %w", err)
	}
	return &info, nil
}

// NodeReference is how node-agent's Events refer to a Node: by name, with
// the name as its UID, as the kubelet's do, so that they show in
// kubectl describe node.
func NodeReference(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
}

// ListerWatcher lists and watches one resource: a typed client of this
// package, or a dynamic client's resource.
type ListerWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Informer returns a shared informer, with no resync, on the objects of lw
// that fieldSelector selects ("" for all). c is the client lw came from: the
// informer asks it whether it can serve watch-list requests (the fake
// clientset cannot), as client-go's generated informers do.
func Informer[L runtime.Object](c any, obj runtime.Object, lw ListerWatcher[L], fieldSelector string) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fieldSelector
			return lw.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fieldSelector
			return lw.Watch(ctx, o)
		},
	}, c), obj, cache.SharedIndexInformerOptions{})
}

// NodeInformer watches the Nodes that fieldSelector selects.
func NodeInformer(c Interface, fieldSelector string) cache.SharedIndexInformer {
	return Informer(c, &corev1.Node{}, c.CoreV1().Nodes(), fieldSelector)
}

// PodInformer watches the pods of every namespace that fieldSelector
// selects.
func PodInformer(c Interface, fieldSelector string) cache.SharedIndexInformer {
	return Informer(c, &corev1.Pod{}, c.CoreV1().Pods(metav1.NamespaceAll), fieldSelector)
}
