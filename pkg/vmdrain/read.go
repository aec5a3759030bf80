package vmdrain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kubevirtcr"
	"github.com/node-agent/node-agent/pkg/targetpod"
)

// Report is what Read found for one node.
type Report struct {
	// Served says whether the cluster serves VirtualMachineInstances; when
	// it does not, there is nothing else.
	Served bool
	// Plans are the VMs on the node and their ways off it.
	Plans []VMPlan
	// Defaults are the KubeVirt CR's, as applied; Note remarks on the CR
	// (none in force, several) and on what the plan could not read.
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
// checked too) and, when there are any, the KubeVirt CR's settings and, when
// one of them would live-migrate, the cluster's Nodes, pods and Namespaces,
// and plans each VM's way off the node. c reads the cluster; own reads node's own pods (the agent
// reaches them as its node, pkg/podaccess), nil for c. Where c may not list
// every pod (deploy/components/vm-placement not applied), the plan knows
// only node's pods and says what it could not check elsewhere. A VMI that
// does not decode is an error naming it: the drain must not guess about a
// VM.
func Read(ctx context.Context, c kube.Interface, dyn dynamic.Interface, node string, own kube.Interface) (Report, error) {
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
	cr, err := kubevirtcr.Read(ctx, c.Discovery(), dyn)
	if err != nil {
		return r, err
	}
	if cr.Settings != nil {
		r.Defaults = Defaults{Strategy: cr.Settings.EvictionStrategy, CPUModel: cr.Settings.CPUModel}
	}
	var notes []string
	if cr.Note != "" {
		notes = append(notes, "KubeVirt CR: "+cr.Note)
	}
	if !slices.ContainsFunc(vms, func(v VM) bool { way, _ := r.Defaults.wayWithoutTarget(v); return way == "" }) {
		// No VM would live-migrate: their strategies and migratability
		// decide every way, and no target is looked for, so neither the
		// Nodes nor the pods are read. A maintenance such a VM holds is
		// checked again every 30 s (the gate's interval); each check then
		// costs the list of VMIs and the CR's.
		r.Note = strings.Join(notes, "; ")
		r.Plans = Plan(vms, nil, View{}, r.Defaults)
		return r, nil
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, fmt.Errorf("listing the Nodes VMs could move to: %w", err)
	}
	i := slices.IndexFunc(nodes.Items, func(n corev1.Node) bool { return n.Name == node })
	if i < 0 {
		return r, fmt.Errorf("node %s is not among the cluster's Nodes", node)
	}
	if own == nil {
		own = c
	}
	view, podNotes, err := readPods(ctx, c, own, node)
	if err != nil {
		return r, err
	}
	view.Nodes = nodes.Items
	view.Cluster = targetpod.ClusterOf(cr.Settings)
	r.Note = strings.Join(append(notes, podNotes...), "; ")
	AttachLaunchers(vms, view.Pods)
	r.Plans = Plan(vms, &nodes.Items[i], view, r.Defaults)
	return r, nil
}

// unfinished leaves out the pods the scheduler no longer counts.
const unfinished = "status.phase!=Succeeded,status.phase!=Failed"

// readPods reads the pods and Namespaces a plan weighs: every pod, or only
// node's when c may not list them all; the Namespaces when c may.
func readPods(ctx context.Context, c, own kube.Interface, node string) (View, []string, error) {
	var view View
	var notes []string
	pods, err := listAllPods(ctx, c)
	if tooMany := errors.Is(err, errTooManyPods); tooMany || apierrors.IsForbidden(err) {
		mine, err := own.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + "," + unfinished})
		if err != nil {
			return view, nil, fmt.Errorf("listing the pods of node %s, whose VMs are planned: %w", node, err)
		}
		pods = mine.Items
		view.PodsKnown = func(n string) bool { return n == node }
		why := "are not readable (deploy/components/vm-placement)"
		if tooMany {
			why = fmt.Sprintf("are more than %d, beyond what a plan reads", MaxPlanPods)
		}
		notes = append(notes, "the pods of other nodes "+why+", so free capacity, pod affinity and topology spread are not checked there")
	} else if err != nil {
		return view, nil, fmt.Errorf("listing the pods VMs could move beside: %w", err)
	}
	view.Pods = pods
	ns, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		view.Namespaces = ns.Items
	case apierrors.IsForbidden(err):
		notes = append(notes, "Namespaces are not readable, so pod affinity terms that select namespaces by label match none")
	default:
		return view, nil, fmt.Errorf("listing the Namespaces: %w", err)
	}
	return view, notes, nil
}

// MaxPlanPods bounds the pods a plan reads: tenants create pods, and a
// plan must not hold an unbounded list in memory. Beyond it the plan weighs
// its own node's pods only, and says so.
const MaxPlanPods = 50000

var errTooManyPods = errors.New("too many pods")

// listAllPods lists every unfinished pod in pages, up to MaxPlanPods.
func listAllPods(ctx context.Context, c kube.Interface) ([]corev1.Pod, error) {
	var out []corev1.Pod
	opts := metav1.ListOptions{FieldSelector: unfinished, Limit: 1000}
	for {
		page, err := c.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if len(out) > MaxPlanPods {
			return nil, errTooManyPods
		}
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}
