// Package targetpod owns the migration target pod KubeVirt would create for
// a VMI, rendered from the VMI as it stands, its source pod and node, and
// the KubeVirt CR's settings; rule numbers refer to
// docs/kubevirt-target-pod.md.
//
// The pod holds what scheduling reads (node selector, affinity,
// tolerations, the containers' resources, scheduler, priority and runtime
// class, topology spread) and the labels KubeVirt puts on a launch pod. It
// leaves out what does not bear on where the pod goes (command lines,
// volumes' mounts, security contexts, environment). Rendering never reads
// the cluster: everything comes in through Render's arguments, and what it
// cannot know is said in its notes.
//
// The pod is the one KubeVirt sends, before the apiserver's admission: in
// particular the device-plugin resources of row 39 are in limits only, and
// a reader summing requests must first copy such limits into requests as
// the apiserver's defaulting does. Not rendered, because Render's inputs do
// not hold them: the migration's addedNodeSelector (row 19, empty for a
// drain's migrations), decentralized migrations (rows 22, 29), automatic
// CPU and memory limits (the CR's namespace label selectors; row 35),
// the CR's supportContainerResources (section 4b, defaults used), network
// resource names, DRA claims and persistent reservations (rows 26, 40, 41,
// 46), and the migration's own label (row 47).
package targetpod

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/node-agent/node-agent/pkg/kubevirtcr"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// Cluster: the KubeVirt CR's settings the pod depends on.
type Cluster struct {
	Version                            string                       // KubeVirt release, e.g. "v1.8.4" (the CR's status.observedKubeVirtVersion); "" = the v1.9 rules
	FeatureGates                       []string                     // developerConfiguration.featureGates
	NodeSelectors                      map[string]string            // developerConfiguration.nodeSelectors (row 3)
	MemoryOvercommit                   int                          // developerConfiguration.memoryOvercommit percent; 0 = 100
	CPUAllocationRatio                 int                          // developerConfiguration.cpuAllocationRatio; 0 = 10
	AdditionalGuestMemoryOverheadRatio string                       // spec.configuration.additionalGuestMemoryOverheadRatio; "" = none
	UseEmulation                       bool                         // developerConfiguration.useEmulation
	DefaultRuntimeClass                string                       // spec.configuration.defaultRuntimeClass
	SerialConsoleLogDisabled           bool                         // spec.configuration.virtualMachineOptions.disableSerialConsoleLog present
	NetworkBindings                    map[string]resource.Quantity // network.binding[name].computeResourceOverhead.requests.memory
	DefaultArchitecture                string                       // "" = amd64
}

// Source: where the VMI runs now.
type Source struct {
	Node *corev1.Node // the Node of vmi.status.nodeName (required)
	Pod  *corev1.Pod  // the VMI's running virt-launcher pod on that node; nil when not known
}

const (
	// ComputeContainer is the name of the container that runs the guest.
	ComputeContainer = "compute"
)

// ErrNoHostModel is wrapped by Render's error when the VMI's CPU is
// host-model and neither the source pod's selector nor the source node
// says which host model to ask for (row 20): KubeVirt then creates no pod.
var ErrNoHostModel = errors.New("no host-model CPU label")

// Render returns the target pod and notes on what it assumed or left out.
// See the package doc; rule numbers are the doc's.
func Render(u *unstructured.Unstructured, src Source, c Cluster) (*corev1.Pod, []string, error) {
	if u == nil {
		return nil, nil, errors.New("no VirtualMachineInstance")
	}
	var v vmi
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		return nil, nil, fmt.Errorf("VirtualMachineInstance %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	if src.Node == nil {
		return nil, nil, fmt.Errorf("VirtualMachineInstance %s/%s: the source node is required", v.Metadata.Namespace, v.Metadata.Name)
	}
	r := &renderer{v: &v, src: src, c: c}
	r.rel = r.release()
	pod := r.skeleton()
	sel, err := r.nodeSelector()
	if err != nil {
		return nil, r.notes, fmt.Errorf("VirtualMachineInstance %s/%s: KubeVirt would not create its target pod: %w", v.Metadata.Namespace, v.Metadata.Name, err)
	}
	pod.Spec.NodeSelector = sel
	pod.Spec.Affinity = r.affinity(pod)
	pod.Spec.Containers = append([]corev1.Container{{Name: ComputeContainer, Resources: r.computeResources()}}, r.containerDiskContainers()...)
	pod.Spec.InitContainers = r.initContainers()
	r.unrendered()
	return pod, r.notes, nil
}

// renderer carries one rendering's inputs and collects its notes.
type renderer struct {
	v     *vmi
	src   Source
	c     Cluster
	rel   release
	notes []string
}

func (r *renderer) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *renderer) gate(name string) bool { return slices.Contains(r.c.FeatureGates, name) }

// skeleton is the pod's metadata and the scheduling fields KubeVirt copies
// from the VMI unchanged.
func (r *renderer) skeleton() *corev1.Pod {
	v := r.v
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    v.Metadata.Namespace,
			GenerateName: "virt-launcher-" + v.Metadata.Name + "-",
			Labels:       r.labels(),
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// Row 42: the VMI's scheduler; empty is the default one.
			SchedulerName: v.Spec.SchedulerName,
			// Row 44.
			PriorityClassName: v.Spec.PriorityClassName,
			// Row 30: exactly the VMI's tolerations; KubeVirt adds none.
			Tolerations: slices.Clone(v.Spec.Tolerations),
			// Row 45: unchanged.
			TopologySpreadConstraints: slices.Clone(v.Spec.TopologySpreadConstraints),
		},
	}
	// Row 43: the CR's default RuntimeClass. The apiserver's RuntimeClass
	// admission adds the class's node selector, tolerations and pod
	// overhead, which this package cannot see.
	if rc := r.c.DefaultRuntimeClass; rc != "" {
		pod.Spec.RuntimeClassName = &rc
		r.note("RuntimeClass %s: its node selector, tolerations and overhead are added by the apiserver, not here", rc)
	}
	if v.Spec.SchedulerName != "" && v.Spec.SchedulerName != corev1.DefaultSchedulerName {
		r.note("scheduler %s places the pod, not kube-scheduler (row 42)", v.Spec.SchedulerName)
	}
	return pod
}

// labels are podLabels' (template.go): the VMI's own labels, then
// KubeVirt's, which win on the same key. The migration UID label (row 47)
// is left out: there is no migration object here, and it does not bear on
// scheduling.
func (r *renderer) labels() map[string]string {
	v := r.v
	l := maps.Clone(v.Metadata.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[kubevirtlabels.AppLabel] = kubevirtlabels.AppLabelValue
	l[kubevirtlabels.CreatedByLabel] = v.Metadata.UID
	l[kubevirtlabels.VMNameLabel] = hostname(v)
	// KubeVirt shortens names over 63 characters with a hash; only the
	// short form is written here.
	if len(v.Metadata.Name) <= 63 {
		l[kubevirtlabels.VMIIDLabel] = v.Metadata.Name
	} else {
		r.note("label %s left out: the VMI's name is over 63 characters and KubeVirt hashes it", kubevirtlabels.VMIIDLabel)
	}
	if val, ok := v.Metadata.Annotations["sidecar.istio.io/inject"]; ok {
		l["sidecar.istio.io/inject"] = val
	}
	return l
}

// hostname is dns.SanitizeHostname: spec.hostname, else the name up to its
// first dot, at most 63 characters.
func hostname(v *vmi) string {
	if v.Spec.Hostname != "" {
		return v.Spec.Hostname
	}
	h := v.Metadata.Name
	for i := range len(h) {
		if h[i] == '.' {
			h = h[:i]
			break
		}
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

// ClusterOf reads Cluster from the KubeVirt CR settings (nil = KubeVirt's defaults).
// DefaultArchitecture stays empty: it is virt-controller's own
// architecture, not a CR field.
func ClusterOf(s *kubevirtcr.Settings) Cluster {
	if s == nil {
		return Cluster{}
	}
	return Cluster{
		Version:                            s.ObservedVersion,
		FeatureGates:                       slices.Clone(s.FeatureGates),
		NodeSelectors:                      maps.Clone(s.NodeSelectors),
		MemoryOvercommit:                   s.MemoryOvercommit,
		CPUAllocationRatio:                 s.CPUAllocationRatio,
		AdditionalGuestMemoryOverheadRatio: s.AdditionalGuestMemoryOverheadRatio,
		UseEmulation:                       s.UseEmulation,
		DefaultRuntimeClass:                s.DefaultRuntimeClass,
		SerialConsoleLogDisabled:           s.SerialConsoleLogDisabled,
		NetworkBindings:                    maps.Clone(s.NetworkBindings),
	}
}
