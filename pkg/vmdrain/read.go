package vmdrain

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kubevirtcr"
)

// Report is what Read found for one node.
type Report struct {
	// Served says whether the cluster serves VirtualMachineInstances; when
	// it does not, there is nothing else.
	Served bool
	// Plans are the VMs on the node and their ways off it.
	Plans []VMPlan
	// Defaults are the KubeVirt CR's, as applied; Note remarks on the CR
	// (none in force, several).
	Defaults Defaults
	Note     string
}

// Held are the plans whose VM cannot leave the node by live migration
// (Way.Held).
func (r Report) Held() []VMPlan {
	return slices.DeleteFunc(slices.Clone(r.Plans), func(p VMPlan) bool { return !p.Way.Held() })
}

// ListOnNode lists the VMs on node: the VMIs labelled with it, whose
// status.nodeName is node. A refusal to list them is a *NotGrantedError.
func ListOnNode(ctx context.Context, dyn dynamic.Interface, node string) ([]VM, error) {
	list, err := dyn.Resource(GVR).List(ctx, metav1.ListOptions{LabelSelector: NodeNameLabel + "=" + node})
	if apierrors.IsForbidden(err) {
		return nil, &NotGrantedError{Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("listing the VirtualMachineInstances on %s: %w", node, err)
	}
	var vms []VM
	var errs []error
	for i := range list.Items {
		v, err := FromUnstructured(&list.Items[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v.Node == node {
			vms = append(vms, v)
		}
	}
	return vms, errors.Join(errs...)
}

// GetVM reads one VM wherever it runs, with the list the agent is granted
// (by name: a field selector on metadata.name); found is false when it no
// longer exists.
func GetVM(ctx context.Context, dyn dynamic.Interface, namespace, name string) (VM, bool, error) {
	list, err := dyn.Resource(GVR).Namespace(namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return VM{}, false, fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", namespace, name, err)
	}
	if len(list.Items) == 0 {
		return VM{}, false, nil
	}
	v, err := FromUnstructured(&list.Items[0])
	return v, err == nil, err
}

// NotGrantedError is Read's error when the apiserver refuses to list the
// VMIs: the agent was not granted it (deploy/components/kubevirt-vms).
type NotGrantedError struct{ Err error }

func (e *NotGrantedError) Error() string {
	return "listing the VirtualMachineInstances is not granted (deploy/components/kubevirt-vms): " + e.Err.Error()
}

func (e *NotGrantedError) Unwrap() error { return e.Err }

// Read lists the VMs on node (the VMIs labelled with it, status.nodeName
// checked too) and, when there are any, the cluster's Nodes and the KubeVirt
// CR's defaults, and plans each VM's way off the node. A VMI that does not decode is an error
// naming it: the drain must not guess about a VM.
func Read(ctx context.Context, c kube.Interface, dyn dynamic.Interface, node string) (Report, error) {
	served, err := kube.Serves(c.Discovery(), GVR)
	if err != nil || !served {
		return Report{}, err
	}
	r := Report{Served: true}
	vms, err := ListOnNode(ctx, dyn, node)
	if err != nil || len(vms) == 0 {
		// No VM, nothing to plan: neither the Nodes nor the KubeVirt CR
		// are read, which keeps a reboot blocker's check of a node
		// without VMs to one list.
		return r, err
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, fmt.Errorf("listing the Nodes VMs could move to: %w", err)
	}
	i := slices.IndexFunc(nodes.Items, func(n corev1.Node) bool { return n.Name == node })
	if i < 0 {
		return r, fmt.Errorf("node %s is not among the cluster's Nodes", node)
	}
	cr, err := kubevirtcr.Read(ctx, c.Discovery(), dyn)
	if err != nil {
		return r, err
	}
	if cr.Settings != nil {
		r.Defaults = Defaults{Strategy: cr.Settings.EvictionStrategy, CPUModel: cr.Settings.CPUModel}
	}
	r.Note = cr.Note
	r.Plans = Plan(vms, &nodes.Items[i], nodes.Items, r.Defaults)
	return r, nil
}
