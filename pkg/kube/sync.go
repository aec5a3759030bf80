package kube

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// CacheSyncPoll is how often WaitForSync asks whether an informer has
// synced. client-go's cache.WaitForCacheSync asks every 100 ms; the list of
// one Node, or of one node's pods, returns in a few milliseconds, and the
// first labels and the first eviction wait on it.
const CacheSyncPoll = 5 * time.Millisecond

// WaitForSync asks synced every CacheSyncPoll until it reports true or an
// error, or ctx ends; it returns that error, or ctx's.
func WaitForSync(ctx context.Context, synced func() (bool, error)) error {
	return wait.PollUntilContextCancel(ctx, CacheSyncPoll, true, func(context.Context) (bool, error) { return synced() })
}
