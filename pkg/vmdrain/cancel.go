package vmdrain

import (
	"context"
	"errors"
	"fmt"

	"github.com/node-agent/node-agent/pkg/kube"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// MigrationGVR is KubeVirt's VirtualMachineInstanceMigration resource.
var MigrationGVR = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstancemigrations"}

// EvacuationAnnotation marks the migrations KubeVirt starts to evacuate a
// node; its value is the node.
const EvacuationAnnotation = "kubevirt.io/evacuationMigration"

// Cancelled is one VM whose evacuation CancelEvacuations called off.
type Cancelled struct {
	VM string
	// Migrating: a migration was running (to Target), and was deleted.
	Migrating bool
	Target    string
}

// CancelEvacuations calls off the evacuation of every VM still on node
// that KubeVirt marked for evacuation from it (status.evacuationNodeName):
// it deletes their evacuation migrations of this node (which aborts a
// migration that runs) and clears the mark, so that KubeVirt starts no new
// migration once the node is given back (kubevirt/kubevirt#9585). It
// returns the VMs it called off; a cluster that serves no VMIs has none.
func CancelEvacuations(ctx context.Context, d kube.DiscoveryInterface, dyn dynamic.Interface, node string) ([]Cancelled, error) {
	// Asked first: the apiserver answers a list of a resource it does not
	// serve with 403 before 404 when the agent was granted nothing on it.
	if served, err := kube.Serves(d, GVR); err != nil || !served {
		return nil, err
	}
	vms, err := ListOnNode(ctx, dyn, node)
	if err != nil {
		return nil, err
	}
	var out []Cancelled
	var errs []error
	for _, v := range vms {
		if v.EvacuationNode != node {
			continue
		}
		c := Cancelled{VM: v.Key()}
		if m := v.Migration; m != nil && !m.Completed && !m.Failed && m.TargetNode != "" {
			c.Migrating, c.Target = true, m.TargetNode
		}
		if err := deleteEvacuations(ctx, dyn, v, node); err != nil {
			errs = append(errs, err)
		}
		patch := []byte(`{"status":{"evacuationNodeName":null}}`)
		if _, err := dyn.Resource(GVR).Namespace(v.Namespace).Patch(ctx, v.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("clearing the evacuation mark of %s: %w", v.Key(), err))
			continue
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

// deleteEvacuations deletes the migrations that evacuate v from node.
func deleteEvacuations(ctx context.Context, dyn dynamic.Interface, v VM, node string) error {
	list, err := dyn.Resource(MigrationGVR).Namespace(v.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the migrations of %s: %w", v.Key(), err)
	}
	var errs []error
	for _, m := range list.Items {
		vmi, _, _ := unstructured.NestedString(m.Object, "spec", "vmiName")
		if vmi != v.Name || m.GetAnnotations()[EvacuationAnnotation] != node {
			continue
		}
		if phase, _, _ := unstructured.NestedString(m.Object, "status", "phase"); phase == "Succeeded" || phase == "Failed" {
			continue
		}
		if err := dyn.Resource(MigrationGVR).Namespace(v.Namespace).Delete(ctx, m.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting migration %s/%s of %s: %w", v.Namespace, m.GetName(), v.Key(), err))
		}
	}
	return errors.Join(errs...)
}
