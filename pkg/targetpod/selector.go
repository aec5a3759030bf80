package targetpod

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

const (
	crossArchGate   = "CrossArchitectureVirtualization"
	hypervGate      = "HypervStrictCheck"
	hostModel       = "host-model"
	hostPassthrough = "host-passthrough"
)

// nodeSelector is section 1: the launch pod's selector (rows 1-18), then
// what the migration controller adds (rows 20, 21). Row 19 (the
// migration's addedNodeSelector) is empty for the migrations a drain
// creates; row 22 (decentralized migration) does not arise in a drain.
func (r *renderer) nodeSelector() (map[string]string, error) {
	v := r.v
	sel := r.baseSelector()
	r.renderSelector(sel)
	// Row 18 (v1.9.0, gate on): asked after the renderer's keys.
	if r.rel.atLeast(9, 0) && r.gate(crossArchGate) && v.Spec.Architecture != "" {
		sel[kubevirtlabels.VMArchLabelPrefix+v.Spec.Architecture] = "true"
	}
	// Row 20: host-model asks the target for the source's host CPU.
	if v.model() == hostModel {
		hm, err := r.hostModelSelector()
		if err != nil {
			return nil, err
		}
		maps.Copy(sel, hm)
	}
	r.vendorSelector(sel)
	return sel, nil
}

// baseSelector is rows 1-4, each overwriting the ones before it on a key.
func (r *renderer) baseSelector() map[string]string {
	v := r.v
	sel := map[string]string{kubevirtlabels.SchedulableLabel: "true"} // row 1
	if v.Spec.Architecture != "" {
		// Row 2, lower-cased as KubeVirt does.
		sel[corev1.LabelArchStable] = strings.ToLower(v.Spec.Architecture)
	} else {
		r.note("the VMI has no spec.architecture (the mutating webhook normally sets it): no %s in the selector, as KubeVirt would do", corev1.LabelArchStable)
	}
	maps.Copy(sel, r.c.NodeSelectors)   // row 3
	maps.Copy(sel, v.Spec.NodeSelector) // row 4
	// v1.9.0 with the cross-architecture gate drops the native arch key,
	// whoever set it (rows 2-4), once the VMI names an architecture.
	if r.rel.atLeast(9, 0) && r.gate(crossArchGate) && v.Spec.Architecture != "" {
		delete(sel, corev1.LabelArchStable)
	}
	return sel
}

// renderSelector is rows 5-17 in KubeVirt's order (NodeSelectorRenderer's
// Render): each sets its key to "true" over anything before.
func (r *renderer) renderSelector(sel map[string]string) {
	v := r.v
	on := func(key string) { sel[key] = "true" }
	if v.dedicatedCPU() { // row 5: the key was renamed in v1.8
		if r.rel.atLeast(8, 0) {
			on(kubevirtlabels.CPUManagerLabel)
		} else {
			on(kubevirtlabels.CPUManagerLabelV17)
		}
	}
	if r.gate(hypervGate) { // rows 6, 7
		maps.Copy(sel, hypervSelector(v.Spec.Domain.Features))
	}
	model := v.model()
	if model != "" && model != hostModel && model != hostPassthrough { // row 8
		on(kubevirtlabels.CPUModelLabelPrefix + model)
	}
	if mt := machineType(v); mt != "" { // row 10
		on(kubevirtlabels.MachineTypeLabelPrefix + mt)
	}
	if model != "" { // row 9: feature labels only with some model set
		for _, f := range v.cpuFeatures() {
			if f.Policy == "" || f.Policy == "require" {
				on(kubevirtlabels.CPUFeatureLabelPrefix + f.Name)
			}
		}
	}
	if hz, ok := tscFrequency(v); ok { // row 11
		on(kubevirtlabels.TSCSchedulingLabelPrefix + strconv.FormatInt(hz, 10))
	}
	if v.Spec.Domain.CPU != nil && v.Spec.Domain.CPU.Realtime != nil { // row 12
		on(kubevirtlabels.RealtimeLabel)
	}
	if v.sev() { // row 13
		on(kubevirtlabels.SEVLabel)
	}
	if v.sevES() { // row 14
		on(kubevirtlabels.SEVESLabel)
	}
	if v.sevSNP() { // row 15
		on(kubevirtlabels.SEVSNPLabel)
	}
	if v.Spec.Domain.LaunchSecurity != nil && v.Spec.Architecture == "s390x" { // row 16
		on(kubevirtlabels.S390PVLabel)
	}
	if v.tdx() { // row 17
		on(kubevirtlabels.TDXLabel)
	}
}

// machineType is row 10's: the type the domain was given (status) first,
// else the one asked for.
func machineType(v *vmi) string {
	if m := v.Status.Machine; m != nil && m.Type != "" {
		return m.Type
	}
	if m := v.Spec.Domain.Machine; m != nil {
		return m.Type
	}
	return ""
}

// tscFrequency is row 11: the VMI's TSC hint when it needs a fixed TSC
// frequency (invtsc required or forced, or Hyper-V reenlightenment on) and
// the hint is above 0.
func tscFrequency(v *vmi) (int64, bool) {
	need := slices.ContainsFunc(v.cpuFeatures(), func(f feature) bool {
		return f.Name == "invtsc" && (f.Policy == "require" || f.Policy == "force")
	})
	if f := v.Spec.Domain.Features; f != nil && f.Hyperv != nil && enabled(f.Hyperv.Reenlightenment) {
		need = true
	}
	h := v.Status.TopologyHints
	if !need || h == nil || h.TSCFrequency == nil || *h.TSCFrequency <= 0 {
		return 0, false
	}
	return *h.TSCFrequency, true
}

// enabled is a feature state whose enabled is set and true.
func enabled(s *featureState) bool { return s != nil && s.Enabled != nil && *s.Enabled }

// hypervSelector is rows 6 and 7 (only under the HypervStrictCheck gate):
// a label per enabled enlightenment that has one, and the Intel vendor for
// eVMCS present and not disabled.
func hypervSelector(f *features) map[string]string {
	sel := map[string]string{}
	if f == nil || f.Hyperv == nil {
		return sel
	}
	h := f.Hyperv
	for _, e := range []struct {
		state *featureState
		label string
	}{
		{h.VPIndex, "vpindex"}, {h.Runtime, "runtime"}, {h.Reset, "reset"}, {h.SyNIC, "synic"},
		{h.SyNICTimer, "synictimer"}, {h.Frequencies, "frequencies"}, {h.Reenlightenment, "reenlightenment"},
		{h.TLBFlush, "tlbflush"}, {h.IPI, "ipi"},
	} {
		if enabled(e.state) {
			sel[kubevirtlabels.HyperVLabelPrefix+e.label] = "true"
		}
	}
	if h.EVMCS != nil && (h.EVMCS.Enabled == nil || *h.EVMCS.Enabled) {
		sel[kubevirtlabels.CPUVendorLabelPrefix+"Intel"] = "true"
	}
	return sel
}

// hostModelSelector is row 20. Step 1: the source pod's selector keys that
// contain the cpu-feature or cpu-model-migration prefix, as they are (a VMI
// that migrated before, or a launch pod with required features). Step 2,
// only when step 1 found none: the source node's host-model-cpu label as a
// cpu-model-migration key and its host-model-required-features as
// cpu-feature keys, with the node's values. No host-model-cpu label is an
// error: KubeVirt does not create the pod.
func (r *renderer) hostModelSelector() (map[string]string, error) {
	out := map[string]string{}
	if r.src.Pod != nil {
		for k, val := range r.src.Pod.Spec.NodeSelector {
			if strings.Contains(k, kubevirtlabels.CPUFeatureLabelPrefix) || strings.Contains(k, kubevirtlabels.CPUModelMigrationLabelPrefix) {
				out[k] = val
			}
		}
		if len(out) > 0 {
			return out, nil
		}
	} else {
		r.note("source pod not known: the host-model CPU is read from node %s's labels; if the VMI migrated before, KubeVirt would copy the earlier host model from the source pod's selector instead (row 20)", r.src.Node.Name)
	}
	var model, value string
	var found bool
	for _, k := range slices.Sorted(maps.Keys(r.src.Node.Labels)) {
		val := r.src.Node.Labels[k]
		if m, ok := strings.CutPrefix(k, kubevirtlabels.HostModelCPULabelPrefix); ok {
			model, value, found = m, val, true
		}
		if f, ok := strings.CutPrefix(k, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix); ok {
			out[kubevirtlabels.CPUFeatureLabelPrefix+f] = val
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: the VMI's CPU is host-model and source node %s has no %s* label", ErrNoHostModel, r.src.Node.Name, kubevirtlabels.HostModelCPULabelPrefix)
	}
	out[kubevirtlabels.CPUModelMigrationLabelPrefix+model] = value
	return out, nil
}

// vendorSelector is row 21 (v1.7.1 and later): unless the selector already
// names a CPU vendor, the source node's vendor label is required, for
// every CPU mode.
func (r *renderer) vendorSelector(sel map[string]string) {
	if !r.rel.atLeast(7, 1) {
		return
	}
	if vendorKey(sel) != "" {
		return
	}
	if k := vendorKey(r.src.Node.Labels); k != "" {
		sel[k] = "true"
	}
}

// vendorKey is the first (by name) key with the CPU vendor prefix. KubeVirt
// takes any one; a node has only one.
func vendorKey(m map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.HasPrefix(k, kubevirtlabels.CPUVendorLabelPrefix) {
			return k
		}
	}
	return ""
}
