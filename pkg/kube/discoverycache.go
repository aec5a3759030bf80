package kube

import (
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// DiscoveryTTL is how long WithCachedDiscovery keeps an answer: a resource
// installed later (KubeVirt's, for example) is seen within it.
const DiscoveryTTL = 10 * time.Minute

// WithCachedDiscovery is c whose Discovery keeps each group version's
// answer (the resources it serves, or that it serves none) for ttl, so that
// what a maintenance asks of discovery again and again (is KubeVirt
// there?) costs one request per ttl per agent. Errors other than "not
// found" are not kept. now is the clock; nil is time.Now.
func WithCachedDiscovery(c Interface, ttl time.Duration, now func() time.Time) Interface {
	if now == nil {
		now = time.Now
	}
	return &cachedDiscoveryClient{Interface: c, d: &cachedDiscovery{d: c.Discovery(), ttl: ttl, now: now, answers: map[string]answer{}}}
}

type cachedDiscoveryClient struct {
	Interface
	d *cachedDiscovery
}

func (c *cachedDiscoveryClient) Discovery() DiscoveryInterface { return c.d }

type answer struct {
	list *metav1.APIResourceList
	err  error
	at   time.Time
}

type cachedDiscovery struct {
	d   DiscoveryInterface
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	answers map[string]answer
}

func (c *cachedDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	c.mu.Lock()
	a, ok := c.answers[gv]
	c.mu.Unlock()
	if ok && c.now().Sub(a.at) < c.ttl {
		return a.list, a.err
	}
	list, err := c.d.ServerResourcesForGroupVersion(gv)
	if err == nil || apierrors.IsNotFound(err) {
		c.mu.Lock()
		c.answers[gv] = answer{list: list, err: err, at: c.now()}
		c.mu.Unlock()
	}
	return list, err
}

func (c *cachedDiscovery) ServerVersion() (*version.Info, error) { return c.d.ServerVersion() }
