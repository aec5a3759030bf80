package maintenance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/node-agent/node-agent/pkg/selfdrain"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	toolswatch "k8s.io/client-go/tools/watch"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/reasontext"
)

// RequestMaintenance sets the maintenance annotation on node. It is what
// `node-agent maintenance start` does; the agent on that node does the rest.
// A reason the agent would refuse (ParseMaintenanceRequest) is refused here,
// before the Node changes.
func RequestMaintenance(ctx context.Context, client kube.Interface, node, reason string) (*corev1.Node, error) {
	return requestWith(ctx, client, node, selfdrain.MaintenanceAnnotation, reason)
}

// RequestOwnerMaintenance sets owner's request annotation on node
// (OwnerKey): `node-agent maintenance start --owner`. The node stays in
// maintenance until every requester, this owner among them, has ended its
// request.
func RequestOwnerMaintenance(ctx context.Context, client kube.Interface, node, owner, reason string) (*corev1.Node, error) {
	key, err := OwnerKey(owner)
	if err != nil {
		return nil, fmt.Errorf("maintenance of %s: %w; nothing was changed", node, err)
	}
	return requestWith(ctx, client, node, key, reason)
}

func requestWith(ctx context.Context, client kube.Interface, node, key, reason string) (*corev1.Node, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, fmt.Errorf("maintenance of %s: the reason must not be empty (it is the annotation's value)", node)
	}
	if _, err := reasontext.ParseRequest(key, reason); err != nil {
		return nil, fmt.Errorf("maintenance of %s: %w; nothing was changed", node, err)
	}
	return patchAnnotation(ctx, client, node, key, &reason)
}

// EndMaintenance removes the maintenance annotation from node.
func EndMaintenance(ctx context.Context, client kube.Interface, node string) (*corev1.Node, error) {
	return patchAnnotation(ctx, client, node, selfdrain.MaintenanceAnnotation, nil)
}

// EndOwnerMaintenance removes owner's request annotation from node; the
// maintenance ends when no other requester holds it.
func EndOwnerMaintenance(ctx context.Context, client kube.Interface, node, owner string) (*corev1.Node, error) {
	key, err := OwnerKey(owner)
	if err != nil {
		return nil, fmt.Errorf("maintenance of %s: %w; nothing was changed", node, err)
	}
	return patchAnnotation(ctx, client, node, key, nil)
}

func patchAnnotation(ctx context.Context, client kube.Interface, node, key string, value *string) (*corev1.Node, error) {
	// A null value in a merge patch removes the key.
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{key: value}}})
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
func WatchNode(ctx context.Context, client kube.Interface, node string, fn func(*corev1.Node) (bool, error)) error {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", node, err)
	}
	return WatchNodeFrom(ctx, client, n, fn)
}

// WatchNodeFrom is WatchNode from n, a state of the Node the caller already
// has (the answer to its own write, say): it saves reading the Node again.
func WatchNodeFrom(ctx context.Context, client kube.Interface, n *corev1.Node, fn func(*corev1.Node) (bool, error)) error {
	node := n.Name
	sel := fields.OneTermEqualSelector("metadata.name", node).String()
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
				// The retry watcher closes its channel when ctx ends
				// too; the select may pick either.
				if err := ctx.Err(); err != nil {
					return err
				}
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
	client kube.Interface
	sel    string
}

func (w *watchFuncs) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.FieldSelector = w.sel
	return w.client.CoreV1().Nodes().Watch(ctx, opts)
}

// ServedNodeMaintenanceGroups returns the groups of NodeMaintenanceGroups the
// cluster serves, in that order.
func ServedNodeMaintenanceGroups(disc kube.DiscoveryInterface) ([]string, error) {
	var out []string
	for _, g := range NodeMaintenanceGroups {
		ok, err := (&NodeMaintenanceSource{Discovery: disc}).served(g)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, g)
		}
	}
	return out, nil
}

// ListNodeMaintenances returns the NodeMaintenance objects of groups that
// name node, or all of them when node is empty, oldest first.
func ListNodeMaintenances(ctx context.Context, dyn dynamic.Interface, groups []string, node string) ([]*NodeMaintenance, error) {
	var out []*NodeMaintenance
	for _, g := range groups {
		list, err := dyn.Resource(NodeMaintenanceGVR(g)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", NodeMaintenanceGVR(g).GroupResource(), err)
		}
		for i := range list.Items {
			nm, err := NodeMaintenanceFromUnstructured(&list.Items[i])
			if err != nil {
				return nil, err
			}
			if node == "" || nm.Spec.NodeName == node {
				out = append(out, nm)
			}
		}
	}
	sortObjects(out)
	return out, nil
}

// RequestNodeMaintenance creates a NodeMaintenance object named name for node
// in group: what `node-agent maintenance start --api nodemaintenance` does.
func RequestNodeMaintenance(ctx context.Context, dyn dynamic.Interface, group, name, node, reason string) (*NodeMaintenance, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/" + NodeMaintenanceVersion,
		"kind":       NodeMaintenanceKind,
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"nodeName": node, "reason": reason},
	}}
	created, err := dyn.Resource(NodeMaintenanceGVR(group)).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating NodeMaintenance %s for node %s: %w", name, node, err)
	}
	return NodeMaintenanceFromUnstructured(created)
}

// EndNodeMaintenance deletes every NodeMaintenance object of groups that
// names node, and returns their IDs. The agent removes its finalizer once it
// has undone the maintenance; only then are they gone.
func EndNodeMaintenance(ctx context.Context, dyn dynamic.Interface, groups []string, node string) ([]string, error) {
	objs, err := ListNodeMaintenances(ctx, dyn, groups, node)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, nm := range objs {
		err := dyn.Resource(NodeMaintenanceGVR(nm.Group())).Delete(ctx, nm.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return ids, fmt.Errorf("deleting %s: %w", nm.ID(), err)
		}
		ids = append(ids, nm.ID())
	}
	return ids, nil
}
