package kube

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// resource is one resource's typed client, making the requests client-go's
// generic client (k8s.io/client-go/gentype) makes. gentype also carries the
// fake clients' object tracker (k8s.io/client-go/testing), and with it
// server-side apply's structured-merge-diff and the OpenAPI schema
// conversion, which node-agent never runs: ten packages, and their
// initialisation, in every binary.
type resource[T, L runtime.Object] struct {
	rc        *rest.RESTClient
	name      string // the resource, "nodes"
	namespace string // "" for a cluster-scoped resource or all namespaces
	newObject func() T
	newList   func() L
}

func (r resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObject()
	err := r.rc.Get().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name).Name(name).
		VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

func (r resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.rc.Get().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name).
		VersionedParams(&opts, parameterCodec).Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	return out, err
}

func (r resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.rc.Get().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name).
		VersionedParams(&opts, parameterCodec).Timeout(timeoutOf(opts)).Watch(ctx)
}

func (r resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObject()
	err := r.rc.Post().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name).
		VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (r resource[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := r.newObject()
	err := r.rc.Patch(pt).NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name).Name(name).
		SubResource(subresources...).VersionedParams(&opts, parameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}

func (r resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.rc.Delete().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.name).Name(name).
		Body(&opts).Do(ctx).Error()
}

// timeoutOf is the request timeout a list or watch asks for; 0 for none.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
