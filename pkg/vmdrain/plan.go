package vmdrain

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/placement"
	"github.com/node-agent/node-agent/pkg/targetpod"
)

// View is the cluster as a plan sees it.
type View struct {
	// Nodes are all the cluster's Nodes, the source among them.
	Nodes []corev1.Node
	// Pods are the pods bound to nodes: every node's, or those of the
	// nodes PodsKnown names.
	Pods []corev1.Pod
	// Namespaces, for pod affinity terms that select namespaces by label;
	// nil when not readable.
	Namespaces []corev1.Namespace
	// PodsKnown says whether all of a node's pods are in Pods; nil: every
	// node's are. Where they are not, free capacity, pod affinity and
	// topology spread are not checked on that node.
	PodsKnown func(node string) bool
	// Cluster are the KubeVirt CR's settings the target pod depends on.
	Cluster targetpod.Cluster
}

// planner places the VMs of one plan, one after another.
type planner struct {
	source *corev1.Node
	view   View
	// snap counts the pods of the view and the target pods planned so far.
	snap *placement.Snapshot
}

func newPlanner(source *corev1.Node, view View) *planner {
	return &planner{source: source, view: view,
		snap: placement.NewSnapshot(view.Nodes, view.Pods, view.Namespaces, view.PodsKnown)}
}

// place renders v's target pod, asks the scheduler's filters where it can
// go, and counts it on the node it is planned to.
func (pl *planner) place(p *VMPlan) {
	v := p.VM
	if v.Object == nil {
		p.Way, p.Why = NoTarget, "its VirtualMachineInstance was not read whole, so its migration target pod cannot be rendered"
		return
	}
	pod, notes, err := targetpod.Render(withModel(v.Object, p.CPUModel), targetpod.Source{Node: pl.source, Pod: v.Launcher}, pl.view.Cluster)
	p.Notes = notes
	if err != nil {
		p.Way, p.Why = NoTarget, "KubeVirt would not create its migration target pod: "+err.Error()
		return
	}
	p.Pod = pod
	if s := pod.Spec.SchedulerName; s != "" && s != corev1.DefaultSchedulerName {
		p.Way = Migrate
		p.Why = fmt.Sprintf("its target pod is scheduled by %q, whose rules the plan does not know: no target is named", s)
		return
	}
	res := pl.snap.Evaluate(pod)
	if i := slices.Index(res.Fits, pl.source.Name); i >= 0 {
		// Only without its launcher pod in view: KubeVirt's anti-affinity
		// on that pod keeps the target off the source (docs row 28).
		res.Fits = slices.Delete(slices.Clone(res.Fits), i, i+1)
		p.Notes = append(p.Notes, "its launcher pod was not found, so its own node is left out as KubeVirt's anti-affinity on that pod would")
	}
	p.Placement, p.Targets = res, res.Fits
	if len(res.Fits) == 0 {
		p.Way, p.Why = NoTarget, rejectedWhy(res, pl.source.Name)
		return
	}
	p.Way = Migrate
	p.PlannedTo = pl.choose(res.Fits)
	pl.snap.Assume(pod, p.PlannedTo)
	p.Why = fitsWhy(res, p.PlannedTo)
}

// choose is the fitting node with the most free memory, ties by name: a
// stand-in for the scheduler's scoring, which prefers the least allocated.
func (pl *planner) choose(fits []string) string {
	best, most := fits[0], int64(0)
	for i, n := range fits {
		if free, _ := pl.snap.FreeMemory(n); i == 0 || free > most {
			best, most = n, free
		}
	}
	return best
}

// withModel is the VMI with its CPU model in force written in, as
// KubeVirt's mutating webhook writes it when the VMI is created: a VMI read
// without one (not through KubeVirt's webhook) is rendered as KubeVirt
// would have stored it.
func withModel(u *unstructured.Unstructured, model string) *unstructured.Unstructured {
	if m, _, _ := unstructured.NestedString(u.Object, "spec", "domain", "cpu", "model"); m != "" || model == "" {
		return u
	}
	c := u.DeepCopy()
	spec, ok := c.Object["spec"].(map[string]any)
	if !ok || spec == nil {
		return u
	}
	domain, ok := spec["domain"].(map[string]any)
	if !ok || domain == nil {
		domain = map[string]any{}
		spec["domain"] = domain
	}
	cpu, ok := domain["cpu"].(map[string]any)
	if !ok || cpu == nil {
		cpu = map[string]any{}
		domain["cpu"] = cpu
	}
	cpu["model"] = model
	return c
}

// maxNamed is how many rejected nodes a sentence names one by one.
const maxNamed = 6

// rejectedWhy says why no node takes the pod: each rejected node and the
// filter that rejected it, the source last and briefly.
func rejectedWhy(res placement.Result, source string) string {
	var parts []string
	more := map[placement.Plugin]int{}
	for _, r := range res.Rejected {
		if r.Node == source {
			continue
		}
		if len(parts) == maxNamed {
			more[r.Plugin]++
			continue
		}
		parts = append(parts, rejectionText(r))
	}
	if len(parts) == 0 {
		return "no other node is in the cluster"
	}
	s := "no other node passes kube-scheduler's filters for its migration target pod: " + strings.Join(parts, "; ")
	if len(more) > 0 {
		var ms []string
		for pl, n := range more {
			ms = append(ms, fmt.Sprintf("%s %d", pl, n))
		}
		sort.Strings(ms)
		s += "; and more nodes: " + strings.Join(ms, ", ")
	}
	return s
}

func rejectionText(r placement.Rejection) string {
	what := r.Detail
	if what == "" {
		what = strings.Join(r.Reasons, ", ")
	}
	return fmt.Sprintf("%s: %s (%s)", r.Node, r.Plugin, what)
}

// fitsWhy says which nodes take the pod and where the plan counts it.
func fitsWhy(res placement.Result, to string) string {
	s := fmt.Sprintf("kube-scheduler's filters admit its migration target pod on %d node(s); planned to %s, which has the most free memory", len(res.Fits), to)
	var unverified []string
	for _, n := range res.Fits {
		if pls := res.Unverified[n]; len(pls) > 0 {
			unverified = append(unverified, n)
		}
	}
	if len(unverified) > 0 {
		s += fmt.Sprintf("; on %s, capacity, pod affinity and topology spread are not checked (their pods are not readable)", strings.Join(unverified, ", "))
	}
	return s
}

// AttachLaunchers sets each VM's Launcher: the pod among pods labelled with
// its UID, bound to its node and not finished, a Running one first.
func AttachLaunchers(vms []VM, pods []corev1.Pod) {
	for i := range vms {
		v := &vms[i]
		v.Launcher = nil
		for j := range pods {
			pod := &pods[j]
			if v.UID == "" || pod.Labels[kubevirtlabels.CreatedByLabel] != v.UID || pod.Namespace != v.Namespace || pod.Spec.NodeName != v.Node ||
				pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			if v.Launcher == nil || (v.Launcher.Status.Phase != corev1.PodRunning && pod.Status.Phase == corev1.PodRunning) {
				v.Launcher = pod
			}
		}
	}
}
