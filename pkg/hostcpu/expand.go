package hostcpu

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// expander expands a CPU definition into its complete feature list.
type expander struct {
	kind   string // FeatureSourceLibvirt or FeatureSourceCPUMap
	detail string
	expand func(ctx context.Context, cpu *CPU) (*CPU, error)
}

// supportedFeaturesOf picks the hypervisor-supported features out of a
// hypervisor-cpu-baseline --features output as KubeVirt does: the features
// with policy='require', and on s390x also those without a policy, which
// libvirt prints there without one.
func supportedFeaturesOf(cpu *CPU, arch string) []string {
	var out []string
	for _, f := range cpu.Features {
		if f.Policy == "require" || (f.Policy == "" && arch == "s390x") {
			out = append(out, f.Name)
		}
	}
	return sortedSet(out)
}

// pickExpander chooses how to expand models: an explicit cpu_map directory,
// else the live libvirt, else the fallback cpu_map directory when it exists
// and discovery is not offline.
func (d *Discoverer) pickExpander(cmap *CPUMap, conn Conn, uri string, t Target, offline bool) *expander {
	fromMap := func(m *CPUMap) *expander {
		return &expander{kind: FeatureSourceCPUMap, detail: m.Dir(), expand: func(_ context.Context, cpu *CPU) (*CPU, error) {
			return m.Expand(cpu)
		}}
	}
	if cmap != nil {
		return fromMap(cmap)
	}
	if conn != nil {
		return &expander{kind: FeatureSourceLibvirt, detail: uri, expand: func(ctx context.Context, cpu *CPU) (*CPU, error) {
			in, err := cpu.XML()
			if err != nil {
				return nil, err
			}
			start := time.Now()
			s, err := conn.ExpandCPU(ctx, t, in)
			d.log.Debug("libvirt call", "call", "BaselineHypervisorCPU", "uri", uri, "model", cpu.Model, "arch", t.Arch, "machine", t.Machine, "virtType", t.VirtType, "duration", time.Since(start), "err", err)
			if err != nil {
				return nil, fmt.Errorf("libvirt %s: expanding model %s: %w", uri, cpu.Model, err)
			}
			return ParseCPU([]byte(s))
		}}
	}
	if offline {
		// The fallback is this machine's libvirt's model definitions; the
		// files may come from another host and another libvirt release,
		// whose host model this one may not define or defines otherwise.
		// Only a directory the caller names (CPUMapDir) is used offline.
		return nil
	}
	dir := d.opts.FallbackCPUMapDir
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	m, err := LoadCPUMap(dir)
	if err != nil {
		d.log.Info("fallback cpu_map directory unusable", "dir", dir, "err", err)
		return nil
	}
	return fromMap(m)
}

// supportedFeatures fills SupportedFeatures: the expansion of hm, the
// host-model CPU, when possible, else cpuid's flags.
func (d *Discoverer) supportedFeatures(ctx context.Context, h *HostCPU, hm *HostModel, exp *expander, libvirtReason string) {
	var reason string
	switch {
	case hm == nil:
		reason, _ = h.Missing(FactHostModel)
	case exp == nil:
		// A cpu_map only helps on x86: libvirt defines no s390x models
		// there, so a saved hypervisor-cpu-baseline output is named first.
		reason = d.noLibvirtReason(libvirtReason, "supported-features file or cpu_map directory")
	default:
		cpu, err := exp.expand(ctx, hostModelCPU(hm))
		if err == nil {
			h.SupportedFeatures = cpu.FeaturesWithPolicy("require")
			h.FeatureSource = exp.kind
			h.addSource(exp.kind, exp.detail, "hypervisor-supported features")
			return
		}
		reason = fmt.Sprintf("expanding the host-model CPU %s: %v", hm.Name, err)
	}
	h.addGap(FactSupportedFeatures, reason)
	if h.Offline {
		return
	}
	h.SupportedFeatures = slices.Clone(h.CPUID.Features)
	h.FeatureSource = FeatureSourceCPUID
	h.addSource("cpuid", h.CPUID.String(), "features")
}

// expandModels fills ModelFeatures for ExpandModels, with every feature the
// model defines, whatever the hypervisor's policy for it: subtracting the
// minimum model means removing what that model has, not what this host can
// give it.
func (d *Discoverer) expandModels(ctx context.Context, h *HostCPU, exp *expander, libvirtReason string) {
	var problems []string
	for _, model := range sortedSet(d.opts.ExpandModels) {
		var why string
		if exp != nil {
			cpu, err := exp.expand(ctx, namedModelCPU(model))
			if err == nil {
				h.ModelFeatures[model] = cpu.FeatureNames()
				h.addSource(exp.kind, exp.detail, model+" features")
				continue
			}
			if ctx.Err() != nil {
				return
			}
			why = err.Error()
		} else {
			why = d.noLibvirtReason(libvirtReason, "cpu_map directory")
		}
		if f, ok := builtinModelFeatures(model); ok {
			h.ModelFeatures[model] = f
			h.addSource("builtin", "libvirt 9.0 model definitions", model+" features")
			d.log.Info("using the built-in feature list of a model", "model", model, "reason", why)
			continue
		}
		problems = append(problems, fmt.Sprintf("model %s: %s", model, why))
	}
	if len(problems) > 0 {
		h.addGap(FactModelFeatures, strings.Join(problems, "; "))
	}
}
