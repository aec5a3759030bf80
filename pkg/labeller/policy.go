package labeller

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/node-agent/node-agent/pkg/hostcpu"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// CrossArchitectureGate is KubeVirt's feature gate for cross-architecture VMs
// (pkg/virt-config/featuregate, Alpha since v1.9.0: on only when listed in
// spec.configuration.developerConfiguration.featureGates).
const CrossArchitectureGate = "CrossArchitectureVirtualization"

// DefaultMinCPUModel is the default of labeller.minCPUModel, as the OpenShift
// documentation this project follows sets it. KubeVirt itself stopped
// subtracting a minimum model in 2022 (kubevirt/kubevirt#7765); an empty
// Policy.MinCPUModel does the same.
const DefaultMinCPUModel = "Penryn"

// OwnedPrefixes returns the key prefixes this agent owns: every key under
// them is its to add, change and remove.
func OwnedPrefixes() []string {
	return []string{
		kubevirtlabels.CPUModelLabelPrefix,
		kubevirtlabels.CPUModelMigrationLabelPrefix,
		kubevirtlabels.CPUFeatureLabelPrefix,
		kubevirtlabels.HostModelCPULabelPrefix,
		kubevirtlabels.HostModelRequiredFeaturesLabelPrefix,
		kubevirtlabels.CPUVendorLabelPrefix,
		kubevirtlabels.CPUTimerLabelPrefix,
		kubevirtlabels.MachineTypeLabelPrefix,
		kubevirtlabels.HyperVLabelPrefix,
		kubevirtlabels.VMArchLabelPrefix,
	}
}

// OwnedKeys returns the single keys this agent owns outside its prefixes.
func OwnedKeys() []string {
	return []string{kubevirtlabels.ObsoleteHostModelLabel, kubevirtlabels.SEVLabel, kubevirtlabels.SEVESLabel, kubevirtlabels.SEVSNPLabel, kubevirtlabels.TDXLabel, kubevirtlabels.S390PVLabel, kubevirtlabels.RealtimeLabel}
}

// IsOwnedKey reports whether key is one this agent owns: under an owned prefix,
// or one of OwnedKeys. Any other key, however similar, is not.
func IsOwnedKey(key string) bool {
	if slices.Contains(OwnedKeys(), key) {
		return true
	}
	for _, p := range OwnedPrefixes() {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// DefaultObsoleteCPUModels returns KubeVirt's default obsolete models
// (pkg/virt-handler/node-labeller/util, DefaultObsoleteCPUModels, at
// kubevirt/kubevirt d923fdb), with their -v1 aliases written out as KubeVirt
// lists them. A list of the KubeVirt CR's or of the configuration replaces
// them, as in KubeVirt.
func DefaultObsoleteCPUModels() []string {
	var out []string
	for _, m := range []string{
		"486", "Conroe", "Opteron_G1", "Opteron_G2", "athlon", "core2duo", "coreduo",
		"kvm32", "kvm64", "n270", "pentium", "pentium2", "pentium3", "pentiumpro",
		"phenom", "qemu32", "qemu64",
	} {
		out = append(out, m, m+"-v1")
	}
	return out
}

// versionedAlias matches QEMU's versioned model names, such as Penryn-v1 or
// Cascadelake-Server-v4: the base name, then -v and a number.
var versionedAlias = regexp.MustCompile(`^(.+)-v[0-9]+$`)

// KubeVirtSettings are the fields of a KubeVirt CR (kubevirts.kubevirt.io,
// spec.configuration) the labeller follows; pkg/kubevirtcr reads them.
type KubeVirtSettings struct {
	// CR names the KubeVirt CR, namespace/name.
	CR string
	// ObsoleteCPUModels are the keys of obsoleteCPUModels, whatever their
	// values: KubeVirt tests a model's presence in the map, not its value
	// (node_labeller.go prepareLabels, cpu_plugin.go filterCpuModels).
	// Empty when the CR lists none.
	ObsoleteCPUModels []string
	// MinCPUModel is minCPUModel, which KubeVirt has ignored since
	// kubevirt/kubevirt#7765 (2022) and marked deprecated (54cb962): it is
	// reported, never applied.
	MinCPUModel string
	// CrossArchitectureVirtualization is true when
	// developerConfiguration.featureGates lists CrossArchitectureGate.
	CrossArchitectureVirtualization bool
}

// Policy decides the labels of a host CPU. Its settings come from the
// KubeVirt CR when KubeVirt is set, and from node-agent's configuration
// otherwise.
type Policy struct {
	// MinCPUModel is the model every node is assumed to have; its features
	// get no cpu-feature or host-model-required-features label. Empty turns
	// the subtraction off, as KubeVirt has it since kubevirt/kubevirt#7765:
	// every supported feature gets its label. Unused while KubeVirt is set.
	MinCPUModel string
	// ObsoleteCPUModels are added to DefaultObsoleteCPUModels (as the
	// HyperConverged CR's obsoleteCPUs are), and the host model being on
	// them writes kubevirtlabels.ObsoleteHostModelLabel, as the KubeVirt CR's
	// obsoleteCPUModels do in KubeVirt. A listed model also covers its -vN
	// aliases. Unused while KubeVirt is set.
	ObsoleteCPUModels []string
	// KubeVirt are the settings of the KubeVirt CR in force, applied as
	// KubeVirt's own labeller applies them; nil where there is none.
	KubeVirt *KubeVirtSettings
	// KubeVirtNote says why no KubeVirt CR's settings apply, or remarks on
	// the one chosen, for reports.
	KubeVirtNote string
}

// Source names where the settings come from, for logs and reports.
func (p Policy) Source() string {
	if p.KubeVirt != nil {
		return "KubeVirt CR " + p.KubeVirt.CR
	}
	return "node-agent's configuration"
}

// Summary says the settings in force in one line, for the log and reports.
func (p Policy) Summary() string {
	var parts []string
	switch r := p.obsoleteRule(); {
	case r.replaced:
		parts = append(parts, "obsolete CPU models "+strings.Join(r.marks, ", ")+" (replacing KubeVirt's defaults)")
	case len(r.marks) > 0:
		parts = append(parts, "KubeVirt's default obsolete CPU models and "+strings.Join(r.marks, ", "))
	default:
		parts = append(parts, "KubeVirt's default obsolete CPU models")
	}
	if m := p.MinModel(); m != "" {
		parts = append(parts, "minimum CPU model "+m)
	} else {
		parts = append(parts, "no minimum CPU model")
	}
	if kv := p.KubeVirt; kv != nil {
		if kv.MinCPUModel != "" {
			parts = append(parts, fmt.Sprintf("minCPUModel %s unused, as KubeVirt leaves it", kv.MinCPUModel))
		}
		gate := "off"
		if kv.CrossArchitectureVirtualization {
			gate = "on"
		}
		parts = append(parts, CrossArchitectureGate+" "+gate)
	}
	return p.Source() + ": " + strings.Join(parts, "; ")
}

// MinModel returns the minimum CPU model in force; empty when none, as
// always under a KubeVirt CR.
func (p Policy) MinModel() string {
	if p.KubeVirt != nil {
		return ""
	}
	return strings.TrimSpace(p.MinCPUModel)
}

// ExpandModels returns the models whose features discovery must expand for
// this policy: the minimum CPU model, if any.
func (p Policy) ExpandModels() []string {
	if m := p.MinModel(); m != "" {
		return []string{m}
	}
	return nil
}

// obsoleteRule is the obsolete list in force and how it is read.
type obsoleteRule struct {
	// models are sorted and distinct: no model or model-migration label
	// for them.
	models []string
	// marks are the models someone listed (sorted, distinct): the host
	// model on them writes kubevirtlabels.ObsoleteHostModelLabel. KubeVirt's defaults
	// only keep models out of the model families (KubeVirt d923fdb: a CR
	// without obsoleteCPUModels never writes the label).
	marks []string
	// aliases: a listed model also covers its -vN aliases (node-agent's
	// configuration); under a KubeVirt CR only exact names count.
	aliases bool
	// replaced: the list someone set replaces the defaults (the KubeVirt
	// CR's, as in KubeVirt) rather than adding to them (node-agent's own
	// key, as the HyperConverged CR's obsoleteCPUs adds to its defaults).
	replaced bool
}

func (p Policy) obsoleteRule() obsoleteRule {
	defaults := sortedNames(DefaultObsoleteCPUModels())
	if kv := p.KubeVirt; kv != nil {
		listed := sortedNames(kv.ObsoleteCPUModels)
		if len(listed) == 0 {
			return obsoleteRule{models: defaults}
		}
		return obsoleteRule{models: listed, marks: listed, replaced: true}
	}
	own := sortedNames(p.ObsoleteCPUModels)
	return obsoleteRule{models: sortedNames(append(defaults, own...)), marks: own, aliases: true}
}

func (r obsoleteRule) has(model string) bool { return r.in(r.models, model) }

// marksHost reports whether the host model model writes
// kubevirtlabels.ObsoleteHostModelLabel.
func (r obsoleteRule) marksHost(model string) bool { return r.in(r.marks, model) }

func (r obsoleteRule) in(list []string, model string) bool {
	if _, ok := slices.BinarySearch(list, model); ok {
		return true
	}
	if m := versionedAlias.FindStringSubmatch(model); r.aliases && m != nil {
		_, ok := slices.BinarySearch(list, m[1])
		return ok
	}
	return false
}

func sortedNames(in []string) []string {
	var out []string
	for _, m := range in {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// archRules says which label families KubeVirt computes on an architecture
// (pkg/virt-handler/node-labeller/{amd64,s390x,arm64,arch_labeller}.go):
// x86 and s390x have hypervisor-supported features, named models and a host
// model; arm64 and the rest have none of the three.
type archRules struct {
	features, namedModels, hostModel bool
}

func rulesFor(arch string) archRules {
	switch arch {
	case "x86_64", "i686", "s390x", "":
		// An unknown arch (an offline supported-features file alone) is
		// read as x86, KubeVirt's main case.
		return archRules{features: true, namedModels: true, hostModel: true}
	}
	return archRules{}
}

// ObsoleteModels returns the obsolete list in force, sorted: the KubeVirt
// CR's or the configuration's list, else the defaults.
func (p Policy) ObsoleteModels() []string {
	return p.obsoleteRule().models
}

// IsObsolete reports whether model is obsolete: listed, or, with node-agent's
// configuration in force, a versioned alias (-vN) of a listed model. Names
// are case-sensitive, as in libvirt.
func (p Policy) IsObsolete(model string) bool {
	return p.obsoleteRule().has(model)
}

// Result is the outcome of Policy.Labels.
type Result struct {
	// Labels are the desired owned labels, all valid.
	Labels map[string]string
	// HostModelObsolete is true when the host-model CPU's model is obsolete.
	HostModelObsolete bool
	// Omitted lists the label families that could not be computed, and why.
	// A controller should leave existing labels of these families alone
	// rather than treat them as stale.
	Omitted []Omission
	// Notes say where labels came from when it is not the usual source,
	// such as cpu-feature labels from cpuid.
	Notes []string
	// Warnings are names skipped because they cannot be label keys.
	Warnings []string
}

// Omission is a set of labels left out for one reason.
type Omission struct {
	// Keys are label keys, or prefixes followed by "*".
	Keys   []string
	Reason string
}

func (o Omission) String() string {
	return strings.Join(o.Keys, ", ") + ": " + o.Reason
}

// OmittedPrefixes returns the owned prefixes (and keys) of every omitted
// family, without the "*".
func (r *Result) OmittedPrefixes() []string {
	var out []string
	for _, o := range r.Omitted {
		for _, k := range o.Keys {
			out = append(out, strings.TrimSuffix(k, "*"))
		}
	}
	return out
}

// Labels computes the labels of h under p.
func (p Policy) Labels(h *hostcpu.HostCPU) (*Result, error) {
	if h == nil {
		return nil, errors.New("computing labels: no host CPU snapshot; run discovery first")
	}
	b := &builder{res: &Result{Labels: map[string]string{}}}
	obsolete := p.obsoleteRule()
	rules := rulesFor(h.Arch)
	minModel := p.MinModel()
	minFeatures, minKnown := h.FeaturesOf(minModel)
	if minModel == "" {
		minFeatures, minKnown = nil, true
	}
	minReason := fmt.Sprintf("the features of the minimum CPU model %s are unknown", minModel)
	if r, missing := h.Missing(hostcpu.FactModelFeatures); missing {
		minReason += " (" + r + ")"
	}
	without := func(features []string) []string {
		var out []string
		for _, f := range features {
			if !slices.Contains(minFeatures, f) {
				out = append(out, f)
			}
		}
		return out
	}

	b.models(h, rules, obsolete)
	b.hostModel(h, rules, obsolete, minKnown, minReason, without)

	cpuidFeatures := false
	switch {
	case !rules.features:
	case !minKnown:
		b.omit(minReason, kubevirtlabels.CPUFeatureLabelPrefix+"*")
	case h.SupportedFeatures == nil:
		reason, _ := h.Missing(hostcpu.FactSupportedFeatures)
		b.omit(reason, kubevirtlabels.CPUFeatureLabelPrefix+"*")
	default:
		for _, f := range without(h.SupportedFeatures) {
			b.add("cpu feature", f, kubevirtlabels.CPUFeatureLabelPrefix, "true")
		}
		cpuidFeatures = h.FeatureSource == hostcpu.FeatureSourceCPUID
	}

	if h.TSC != nil {
		// KubeVirt writes tsc-frequency=0 when libvirt reports no
		// frequency; node-agent leaves the key out (docs/labels.md).
		if h.TSC.Frequency > 0 {
			b.add("tsc frequency", "tsc-frequency", kubevirtlabels.CPUTimerLabelPrefix, fmt.Sprint(h.TSC.Frequency))
		}
		b.add("tsc scaling", "tsc-scalable", kubevirtlabels.CPUTimerLabelPrefix, fmt.Sprint(h.TSC.Scalable))
	} else {
		reason, _ := h.Missing(hostcpu.FactTSC)
		b.omit(reason, kubevirtlabels.CPUTimerLabelPrefix+"*")
	}

	if reason, missing := h.Missing(hostcpu.FactMachineTypes); missing {
		b.omit(reason, kubevirtlabels.MachineTypeLabelPrefix+"*")
	} else {
		for _, m := range h.MachineTypes {
			b.add("machine type", m, kubevirtlabels.MachineTypeLabelPrefix, "true")
		}
	}

	if h.HyperV == nil {
		reason, _ := h.Missing(hostcpu.FactHyperV)
		b.omit(reason, kubevirtlabels.HyperVLabelPrefix+"*")
	} else {
		for _, e := range h.HyperV {
			b.add("hyper-v enlightenment", e, kubevirtlabels.HyperVLabelPrefix, "true")
		}
	}

	if sec := h.Security; sec == nil {
		reason, _ := h.Missing(hostcpu.FactLaunchSecurity)
		b.omit(reason, kubevirtlabels.SEVLabel, kubevirtlabels.SEVESLabel, kubevirtlabels.SEVSNPLabel, kubevirtlabels.TDXLabel, kubevirtlabels.S390PVLabel)
	} else {
		for key, on := range map[string]bool{kubevirtlabels.SEVLabel: sec.SEV, kubevirtlabels.SEVESLabel: sec.SEVES, kubevirtlabels.SEVSNPLabel: sec.SEVSNP, kubevirtlabels.TDXLabel: sec.TDX, kubevirtlabels.S390PVLabel: sec.S390PV} {
			if on {
				b.res.Labels[key] = "true"
			}
		}
	}

	if h.Realtime == nil {
		reason, _ := h.Missing(hostcpu.FactRealtime)
		b.omit(reason, kubevirtlabels.RealtimeLabel)
	} else if *h.Realtime {
		b.res.Labels[kubevirtlabels.RealtimeLabel] = "true"
	}

	if p.KubeVirt != nil && p.KubeVirt.CrossArchitectureVirtualization {
		b.vmArch(h)
	}

	if cpuidFeatures {
		b.noteCPUIDFeatures(h)
	}
	return b.res, nil
}

// models adds cpu-model and cpu-model-migration labels as KubeVirt v1.7.0 and
// later do (cpu_plugin.go loadDomCapabilities, node_labeller.go
// prepareLabels; kubevirt/kubevirt 37a75f3, "relax host-model check to allow
// known models"). The two families differ:
//   - cpu-model: the models libvirt can run here, any usable attribute but
//     'no' (in practice 'yes' and 'unknown');
//   - cpu-model-migration: every model libvirt knows, that is any non-empty
//     usable attribute, 'no' included. KubeVirt matches a host-model guest's
//     CPU against this family when it picks a migration target, and libvirt
//     checks the guest's real CPU definition at migration time, so a model
//     this host cannot start from scratch may still take a running guest.
//
// Models without a usable attribute, and obsolete ones, get neither label.
func (b *builder) models(h *hostcpu.HostCPU, rules archRules, obsolete obsoleteRule) {
	if !rules.namedModels {
		return
	}
	if reason, missing := h.Missing(hostcpu.FactModels); missing {
		b.omit(reason, kubevirtlabels.CPUModelLabelPrefix+"*", kubevirtlabels.CPUModelMigrationLabelPrefix+"*")
		return
	}
	for _, m := range h.Models {
		if !modelKnown(m) || obsolete.has(m.Name) {
			continue
		}
		if modelUsable(m) {
			b.add("cpu model", m.Name, kubevirtlabels.CPUModelLabelPrefix, "true")
		}
		b.add("cpu model", m.Name, kubevirtlabels.CPUModelMigrationLabelPrefix, "true")
	}
}

// modelKnown is KubeVirt's "known model": libvirt gave it a usable attribute.
func modelKnown(m hostcpu.Model) bool {
	return m.Usability != "" && strings.TrimSpace(m.Name) != ""
}

// modelUsable is KubeVirt's "usable model": known, and not usable='no'.
func modelUsable(m hostcpu.Model) bool {
	return modelKnown(m) && m.Usability != "no"
}

// hostModel adds the host-model, its required features, the vendor and the
// obsolete-host-model labels, on the architectures where KubeVirt has a host
// model. The host model is not added to cpu-model-migration on its own: it
// is there when it is a known custom model, as KubeVirt at d923fdb has it.
func (b *builder) hostModel(h *hostcpu.HostCPU, rules archRules, obsolete obsoleteRule, minKnown bool, minReason string, without func([]string) []string) {
	if !rules.hostModel {
		return
	}
	hm := h.HostModel
	if hm != nil {
		b.add("host model", hm.Name, kubevirtlabels.HostModelCPULabelPrefix, "true")
		if obsolete.marksHost(hm.Name) {
			b.res.HostModelObsolete = true
			b.res.Labels[kubevirtlabels.ObsoleteHostModelLabel] = "true"
		}
		if minKnown {
			for _, f := range without(hm.Required) {
				b.add("host-model required feature", f, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix, "true")
			}
		} else {
			b.omit(minReason, kubevirtlabels.HostModelRequiredFeaturesLabelPrefix+"*")
		}
	} else {
		reason, _ := h.Missing(hostcpu.FactHostModel)
		b.omit(reason, kubevirtlabels.HostModelCPULabelPrefix+"*", kubevirtlabels.HostModelRequiredFeaturesLabelPrefix+"*", kubevirtlabels.ObsoleteHostModelLabel)
	}
	switch {
	case h.Vendor != "":
		b.add("vendor", h.Vendor, kubevirtlabels.CPUVendorLabelPrefix, "true")
	case h.Offline:
		reason, _ := h.Missing(hostcpu.FactHostModel)
		b.omit(reason, kubevirtlabels.CPUVendorLabelPrefix+"*")
	default:
		b.omit(fmt.Sprintf("neither a host-model CPU nor cpuid (vendor %q) names a vendor libvirt knows", h.CPUID.VendorString), kubevirtlabels.CPUVendorLabelPrefix+"*")
	}
}

// vmArch adds KubeVirt's vm-arch labels (node_labeller.go prepareLabels,
// kubevirt d923fdb): the node's own architecture and each one libvirt
// emulates here, by their Go names, as virt-handler's runtime.GOARCH names
// its own.
func (b *builder) vmArch(h *hostcpu.HostCPU) {
	native := goArch(h.Arch)
	if native == "" {
		b.omit("the host's architecture is unknown", kubevirtlabels.VMArchLabelPrefix+"*")
		return
	}
	if h.EmulatedArches == nil {
		reason, _ := h.Missing(hostcpu.FactEmulatedArches)
		b.omit(reason, kubevirtlabels.VMArchLabelPrefix+"*")
		return
	}
	b.add("vm architecture", native, kubevirtlabels.VMArchLabelPrefix, "true")
	for _, a := range h.EmulatedArches {
		if g := goArch(a); g != "" {
			b.add("vm architecture", g, kubevirtlabels.VMArchLabelPrefix, "true")
		}
	}
}

// goArch maps libvirt's architecture names to Go's, which KubeVirt's vm-arch
// labels use.
func goArch(libvirtArch string) string {
	switch libvirtArch {
	case "x86_64":
		return "amd64"
	case "aarch64":
		return "arm64"
	case "i686":
		return "386"
	}
	return libvirtArch
}

type builder struct {
	res *Result
}

// noteCPUIDFeatures says that cpu-feature labels come from cpuid, with the
// reason unless an omission already gave it.
func (b *builder) noteCPUIDFeatures(h *hostcpu.HostCPU) {
	const note = "cpu-feature labels come from the CPU's cpuid flags, not from what the hypervisor supports"
	reason, _ := h.Missing(hostcpu.FactSupportedFeatures)
	if reason == "" || slices.ContainsFunc(b.res.Omitted, func(o Omission) bool { return o.Reason == reason }) {
		b.res.Notes = append(b.res.Notes, note+", for the reason above")
		return
	}
	b.res.Notes = append(b.res.Notes, note+": "+reason)
}

// add sets prefix+name=value when both are valid, and warns otherwise.
func (b *builder) add(what, name, prefix, value string) {
	key := prefix + name
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		b.res.Warnings = append(b.res.Warnings, fmt.Sprintf("skipped %s %q: %q is not a valid label key: %s", what, name, key, strings.Join(msgs, "; ")))
		return
	}
	if msgs := validation.IsValidLabelValue(value); len(msgs) > 0 {
		b.res.Warnings = append(b.res.Warnings, fmt.Sprintf("skipped %s %q: %q is not a valid label value: %s", what, name, value, strings.Join(msgs, "; ")))
		return
	}
	b.res.Labels[key] = value
}

// omit records keys left out for reason, merging with an earlier omission of
// the same reason so the report says each cause once.
func (b *builder) omit(reason string, keys ...string) {
	if reason == "" {
		reason = "unknown"
	}
	for i := range b.res.Omitted {
		if b.res.Omitted[i].Reason == reason {
			b.res.Omitted[i].Keys = append(b.res.Omitted[i].Keys, keys...)
			return
		}
	}
	b.res.Omitted = append(b.res.Omitted, Omission{Keys: keys, Reason: reason})
}
