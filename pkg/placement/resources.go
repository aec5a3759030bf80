package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-helpers/resource"
)

// resources holds amounts as the scheduler's framework.Resource does: cpu in millicores, every other
// resource in units (bytes, devices). The "pods" resource is not a request and never appears here.
type resources map[corev1.ResourceName]int64

func (r resources) add(o resources) {
	for k, v := range o {
		r[k] += v
	}
}

// isScalar says whether the scheduler tracks name beside cpu, memory and ephemeral-storage: extended
// resources, hugepages, other kubernetes.io/-prefixed native resources and attachable volumes.
func isScalar(name corev1.ResourceName) bool {
	n := string(name)
	if strings.HasPrefix(n, corev1.ResourceHugePagesPrefix) || strings.HasPrefix(n, corev1.ResourceAttachableVolumesPrefix) {
		return true
	}
	if !strings.Contains(n, "/") {
		return false
	}
	// Names with a slash are extended resources unless they use the "requests." quota prefix; names in
	// the kubernetes.io/ namespace are prefixed native resources. Both are scalars.
	return strings.Contains(n, corev1.ResourceDefaultNamespacePrefix) || !strings.HasPrefix(n, corev1.DefaultResourceRequestsPrefix)
}

// toResources converts a ResourceList the way the scheduler's Resource.Add does.
func toResources(rl corev1.ResourceList) resources {
	out := resources{}
	for name, q := range rl {
		switch {
		case name == corev1.ResourceCPU:
			out[name] += q.MilliValue()
		case name == corev1.ResourceMemory, name == corev1.ResourceEphemeralStorage, isScalar(name):
			out[name] += q.Value()
		}
	}
	return out
}

// defaultedPod copies pod and applies what the apiserver does at creation and the scheduler relies on:
// a container's (and init container's) limits fill its unset requests (SetDefaults_Pod), and pod
// affinity matchLabelKeys/mismatchLabelKeys are merged into the label selectors (mergeLabelKeys). A pod
// rendered for planning never went through the apiserver; for one that did, this changes no outcome.
func defaultedPod(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	fill := func(cs []corev1.Container) {
		for i := range cs {
			res := &cs[i].Resources
			if res.Limits == nil {
				continue
			}
			if res.Requests == nil {
				res.Requests = corev1.ResourceList{}
			}
			for k, v := range res.Limits {
				if _, ok := res.Requests[k]; !ok {
					res.Requests[k] = v.DeepCopy()
				}
			}
		}
	}
	fill(p.Spec.Containers)
	fill(p.Spec.InitContainers)
	mergeLabelKeys(p)
	return p
}

// incomingRequests is what NodeResourcesFit's PreFilter computes for the pod being scheduled
// (PodLevelResources is on by default at v1.37, so pod-level requests are honoured).
func incomingRequests(pod *corev1.Pod) resources {
	return toResources(resource.PodRequests(pod, resource.PodResourcesOptions{}))
}

// boundPodRequests is what the scheduler's cache counts for a bound pod: with in-place resize (GA) it
// takes the larger of the spec and the status's allocated resources.
func boundPodRequests(pod *corev1.Pod) resources {
	return toResources(resource.PodRequests(pod, resource.PodResourcesOptions{
		UseStatusResources: true,
		InPlacePodLevelResourcesVerticalScalingEnabled: true,
	}))
}

// filterResources: NodeResourcesFit. Its reasons come in the plugin's order: "Too many pods", cpu,
// memory, ephemeral-storage, then the scalar resources (sorted here; the plugin walks a map).
func filterResources(req resources, ns *nodeState) *Rejection {
	alloc := ns.node.Status.Allocatable
	allocated := toResources(alloc)
	var reasons, details []string
	allowedPods := alloc.Pods().Value()
	if int64(len(ns.pods))+1 > allowedPods {
		reasons = append(reasons, "Too many pods")
		details = append(details, fmt.Sprintf("%d pods of %d allowed", len(ns.pods), allowedPods))
	}
	names := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}
	var scalars []corev1.ResourceName
	for name := range req {
		if isScalar(name) {
			scalars = append(scalars, name)
		}
	}
	sort.Slice(scalars, func(i, j int) bool { return scalars[i] < scalars[j] })
	for _, name := range append(names, scalars...) {
		want := req[name]
		if want <= 0 {
			continue
		}
		free := allocated[name] - ns.requested[name]
		if want > free {
			reasons = append(reasons, "Insufficient "+string(name))
			details = append(details, fmt.Sprintf("needs %s %s, %s free of %s allocatable",
				quantity(name, want), name, quantity(name, free), quantity(name, allocated[name])))
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	return &Rejection{Reasons: reasons, Detail: strings.Join(details, "; ")}
}

// quantity renders an amount for people: cpu in cores or millicores, memory-like resources in
// binary units, devices as plain numbers.
func quantity(name corev1.ResourceName, v int64) string {
	switch {
	case name == corev1.ResourceCPU:
		return apiresource.NewMilliQuantity(v, apiresource.DecimalSI).String()
	case name == corev1.ResourceMemory, name == corev1.ResourceEphemeralStorage,
		strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
		if v%(1<<20) != 0 {
			// Not a whole number of MiB (a VM's overhead seldom is): MiB
			// with one decimal reads better than bytes.
			return fmt.Sprintf("%.1fMi", float64(v)/(1<<20))
		}
		return apiresource.NewQuantity(v, apiresource.BinarySI).String()
	}
	return apiresource.NewQuantity(v, apiresource.DecimalSI).String()
}

// FreeMemory is node's allocatable memory less the requests of the pods the snapshot counts on it,
// Assume's included, in bytes; false when the node is not in the snapshot. A node whose pods are
// unknown counts only the pods given for it.
func (s *Snapshot) FreeMemory(node string) (int64, bool) {
	ns, ok := s.byName[node]
	if !ok {
		return 0, false
	}
	return ns.node.Status.Allocatable.Memory().Value() - ns.requested[corev1.ResourceMemory], true
}
