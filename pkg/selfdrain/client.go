package selfdrain

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolswatch "k8s.io/client-go/tools/watch"
)

// RequestMaintenance sets the maintenance annotation on node. It is what
// `node-agent maintenance start` does; the agent on that node does the rest.
func RequestMaintenance(ctx context.Context, client kubernetes.Interface, node, reason string) (*corev1.Node, error) {
	if reason == "" {
		return nil, fmt.Errorf("maintenance of %s: the reason must not be empty (it is the annotation's value)", node)
	}
	return patchAnnotation(ctx, client, node, &reason)
}

// EndMaintenance removes the maintenance annotation from node.
func EndMaintenance(ctx context.Context, client kubernetes.Interface, node string) (*corev1.Node, error) {
	return patchAnnotation(ctx, client, node, nil)
}

func patchAnnotation(ctx context.Context, client kubernetes.Interface, node string, value *string) (*corev1.Node, error) {
	// A null value in a merge patch removes the key.
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{MaintenanceAnnotation: value}}})
	if err != nil {
		return nil, err
	}
	n, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("annotating Node %s: %w", node, err)
	}
	return n, nil
}

// WatchNode calls fn with node each time it changes, starting with its current
// state, until fn returns true, ctx ends, or an error occurs. The watch is
// restarted when the apiserver closes it.
func WatchNode(ctx context.Context, client kubernetes.Interface, node string, fn func(*corev1.Node) (bool, error)) error {
	sel := fields.OneTermEqualSelector("metadata.name", node).String()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", node, err)
	}
	if done, err := fn(n); done || err != nil {
		return err
	}
	rw, err := toolswatch.NewRetryWatcherWithContext(ctx, n.ResourceVersion, &watchFuncs{client: client, sel: sel})
	if err != nil {
		return err
	}
	defer rw.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return fmt.Errorf("watch on Node %s closed", node)
			}
			switch ev.Type {
			case watch.Deleted:
				return fmt.Errorf("node %s was deleted", node)
			case watch.Error:
				continue
			}
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			if done, err := fn(n); done || err != nil {
				return err
			}
		}
	}
}

type watchFuncs struct {
	client kubernetes.Interface
	sel    string
}

func (w *watchFuncs) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.FieldSelector = w.sel
	return w.client.CoreV1().Nodes().Watch(ctx, opts)
}
