package hostcpu

import "slices"

// builtinModelFeatures returns the features of the models discovery knows
// without libvirt or a cpu_map directory: only Penryn, the default minimum CPU
// model, so that a host without libvirt still gets cpu-feature labels from
// cpuid minus Penryn. The list is libvirt 9.0's definition of Penryn
// (cpu_map/x86_Penryn.xml), which hypervisor-cpu-baseline --features
// reproduces exactly; pkg/hostcpu's tests check both.
func builtinModelFeatures(model string) ([]string, bool) {
	switch model {
	case "Penryn":
		return slices.Clone([]string{
			"apic", "clflush", "cmov", "cx16", "cx8", "de", "fpu", "fxsr",
			"lahf_lm", "lm", "mca", "mce", "mmx", "msr", "mtrr", "nx", "pae",
			"pat", "pge", "pni", "pse", "pse36", "sep", "sse", "sse2",
			"sse4.1", "ssse3", "syscall", "tsc",
		}), true
	}
	return nil, false
}
