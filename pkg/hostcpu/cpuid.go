package hostcpu

import (
	"fmt"
	"strings"

	"github.com/klauspost/cpuid/v2"
)

// CPUID is what the host CPU reports about itself through the cpuid
// instruction, with feature flags renamed to libvirt's names.
type CPUID struct {
	// VendorString is the raw vendor string, such as GenuineIntel.
	VendorString string
	// Vendor is libvirt's vendor name (Intel, AMD, Hygon), empty when
	// libvirt has no name for this vendor.
	Vendor   string
	Brand    string
	Family   int
	Model    int
	Stepping int
	// Hypervisor is the cpuid hypervisor bit: this host is itself a VM.
	Hypervisor bool
	// Features are the flags with a libvirt name, sorted.
	Features []string
}

// String describes the CPU in one line for logs and reports.
func (c CPUID) String() string {
	s := fmt.Sprintf("%s %q family %d model %d stepping %d", c.VendorString, c.Brand, c.Family, c.Model, c.Stepping)
	if c.Hypervisor {
		s += " (virtual machine)"
	}
	return s
}

// libvirt's vendor names for the cpuid vendor strings (cpu_map/x86_vendors.xml).
var libvirtVendorNames = map[string]string{
	"GenuineIntel": "Intel",
	"AuthenticAMD": "AMD",
	"HygonGenuine": "Hygon",
}

// libvirtVendor returns libvirt's name for a cpuid vendor string.
func libvirtVendor(vendorString string) string {
	return libvirtVendorNames[strings.TrimSpace(vendorString)]
}

// cpuidFeatureNames maps klauspost/cpuid feature IDs to the feature names of
// libvirt's cpu_map/x86_features.xml, which are also QEMU's. Only flags whose
// meaning is the same cpuid bit are mapped. Left out on purpose:
//   - FXSROPT: the library also sets it from leaf 1 EDX bit 25, which is SSE;
//   - HTT: the library sets it only when a core runs two threads, while
//     libvirt's "ht" is the raw leaf 1 EDX bit 28;
//   - flags that describe the CPU's behaviour rather than an instruction or
//     MSR a guest can see (AVXSLOW, FP128, CPBOOST, ...).
//
// A few names are newer than libvirt 9.0; they are QEMU's names, which later
// libvirt releases adopt unchanged.
var cpuidFeatureNames = map[cpuid.FeatureID]string{
	cpuid.ADX:                 "adx",
	cpuid.AESNI:               "aes",
	cpuid.AMD3DNOW:            "3dnow",
	cpuid.AMD3DNOWEXT:         "3dnowext",
	cpuid.AMXBF16:             "amx-bf16",
	cpuid.AMXCOMPLEX:          "amx-complex",
	cpuid.AMXFP16:             "amx-fp16",
	cpuid.AMXINT8:             "amx-int8",
	cpuid.AMXTILE:             "amx-tile",
	cpuid.AVX:                 "avx",
	cpuid.AVX2:                "avx2",
	cpuid.AVX512BF16:          "avx512-bf16",
	cpuid.AVX512BITALG:        "avx512bitalg",
	cpuid.AVX512BW:            "avx512bw",
	cpuid.AVX512CD:            "avx512cd",
	cpuid.AVX512DQ:            "avx512dq",
	cpuid.AVX512ER:            "avx512er",
	cpuid.AVX512F:             "avx512f",
	cpuid.AVX512FP16:          "avx512-fp16",
	cpuid.AVX512IFMA:          "avx512ifma",
	cpuid.AVX512PF:            "avx512pf",
	cpuid.AVX512VBMI:          "avx512vbmi",
	cpuid.AVX512VBMI2:         "avx512vbmi2",
	cpuid.AVX512VL:            "avx512vl",
	cpuid.AVX512VNNI:          "avx512vnni",
	cpuid.AVX512VP2INTERSECT:  "avx512-vp2intersect",
	cpuid.AVX512VPOPCNTDQ:     "avx512-vpopcntdq",
	cpuid.AVXIFMA:             "avx-ifma",
	cpuid.AVXNECONVERT:        "avx-ne-convert",
	cpuid.AVXVNNI:             "avx-vnni",
	cpuid.AVXVNNIINT8:         "avx-vnni-int8",
	cpuid.AVXVNNIINT16:        "avx-vnni-int16",
	cpuid.BHI_CTRL:            "bhi-ctrl",
	cpuid.BMI1:                "bmi1",
	cpuid.BMI2:                "bmi2",
	cpuid.CLDEMOTE:            "cldemote",
	cpuid.CLMUL:               "pclmuldq",
	cpuid.CLZERO:              "clzero",
	cpuid.CMOV:                "cmov",
	cpuid.CMPCCXADD:           "cmpccxadd",
	cpuid.CMPXCHG8:            "cx8",
	cpuid.CX16:                "cx16",
	cpuid.ERMS:                "erms",
	cpuid.F16C:                "f16c",
	cpuid.FMA3:                "fma",
	cpuid.FMA4:                "fma4",
	cpuid.FRED:                "fred",
	cpuid.FSRM:                "fsrm",
	cpuid.FXSR:                "fxsr",
	cpuid.GFNI:                "gfni",
	cpuid.HLE:                 "hle",
	cpuid.HYPERVISOR:          "hypervisor",
	cpuid.IA32_ARCH_CAP:       "arch-capabilities",
	cpuid.IA32_CORE_CAP:       "core-capability",
	cpuid.IBPB_BRTYPE:         "ibpb-brtype",
	cpuid.IBS:                 "ibs",
	cpuid.IDPRED_CTRL:         "ipred-ctrl",
	cpuid.LAHF:                "lahf_lm",
	cpuid.LAM:                 "lam",
	cpuid.LBRVIRT:             "lbrv",
	cpuid.LZCNT:               "abm",
	cpuid.MCDT_NO:             "mcdt-no",
	cpuid.MD_CLEAR:            "md-clear",
	cpuid.MMX:                 "mmx",
	cpuid.MMXEXT:              "mmxext",
	cpuid.MOVBE:               "movbe",
	cpuid.MOVDIR64B:           "movdir64b",
	cpuid.MOVDIRI:             "movdiri",
	cpuid.MPX:                 "mpx",
	cpuid.NRIPS:               "nrip-save",
	cpuid.NX:                  "nx",
	cpuid.OSXSAVE:             "osxsave",
	cpuid.PCONFIG:             "pconfig",
	cpuid.POPCNT:              "popcnt",
	cpuid.PREFETCHI:           "prefetchiti",
	cpuid.RDRAND:              "rdrand",
	cpuid.RDSEED:              "rdseed",
	cpuid.RDTSCP:              "rdtscp",
	cpuid.RRSBA_CTRL:          "rrsba-ctrl",
	cpuid.RTM:                 "rtm",
	cpuid.SBPB:                "sbpb",
	cpuid.SERIALIZE:           "serialize",
	cpuid.SGX:                 "sgx",
	cpuid.SGXLC:               "sgxlc",
	cpuid.SHA:                 "sha-ni",
	cpuid.SM3_X86:             "sm3",
	cpuid.SM4_X86:             "sm4",
	cpuid.SRSO_NO:             "srso-no",
	cpuid.SRSO_USER_KERNEL_NO: "srso-user-kernel-no",
	cpuid.SSE:                 "sse",
	cpuid.SSE2:                "sse2",
	cpuid.SSE3:                "pni",
	cpuid.SSE4:                "sse4.1",
	cpuid.SSE42:               "sse4.2",
	cpuid.SSE4A:               "sse4a",
	cpuid.SSSE3:               "ssse3",
	cpuid.SVM:                 "svm",
	cpuid.SVMDA:               "decodeassists",
	cpuid.SVMFBASID:           "flushbyasid",
	cpuid.SVML:                "svm-lock",
	cpuid.SVMNP:               "npt",
	cpuid.SVMPF:               "pause-filter",
	cpuid.SVMPFT:              "pfthreshold",
	cpuid.SYSCALL:             "syscall",
	cpuid.SYSEE:               "sep",
	cpuid.TBM:                 "tbm",
	cpuid.TOPEXT:              "topoext",
	cpuid.TSCRATEMSR:          "tsc-scale",
	cpuid.TSXLDTRK:            "tsx-ldtrk",
	cpuid.VAES:                "vaes",
	cpuid.VMCBCLEAN:           "vmcb-clean",
	cpuid.VMX:                 "vmx",
	cpuid.VPCLMULQDQ:          "vpclmulqdq",
	cpuid.WAITPKG:             "waitpkg",
	cpuid.WBNOINVD:            "wbnoinvd",
	cpuid.WRMSRNS:             "wrmsrns",
	cpuid.X87:                 "fpu",
	cpuid.XGETBV1:             "xgetbv1",
	cpuid.XOP:                 "xop",
	cpuid.XSAVE:               "xsave",
	cpuid.XSAVEC:              "xsavec",
	cpuid.XSAVEOPT:            "xsaveopt",
	cpuid.XSAVES:              "xsaves",
}

// The speculation-control flags share one ID in klauspost/cpuid for Intel's
// leaf 7 bits and AMD's leaf 0x80000008 bits, while libvirt names them apart
// (x86_features.xml): the vendor decides the name.
var (
	intelSpecCtrlNames = map[cpuid.FeatureID]string{
		cpuid.IBPB:           "spec-ctrl",
		cpuid.STIBP:          "stibp",
		cpuid.SPEC_CTRL_SSBD: "ssbd",
	}
	amdSpecCtrlNames = map[cpuid.FeatureID]string{
		cpuid.IBPB:           "ibpb",
		cpuid.IBRS:           "ibrs",
		cpuid.STIBP:          "amd-stibp",
		cpuid.SPEC_CTRL_SSBD: "amd-ssbd",
	}
)

// libvirtFeatureNames returns the libvirt names of the flags has reports, for
// a CPU of the given libvirt vendor.
func libvirtFeatureNames(vendor string, has func(cpuid.FeatureID) bool) []string {
	var out []string
	for id, name := range cpuidFeatureNames {
		if has(id) {
			out = append(out, name)
		}
	}
	var spec map[cpuid.FeatureID]string
	switch vendor {
	case "Intel":
		spec = intelSpecCtrlNames
	case "AMD", "Hygon":
		spec = amdSpecCtrlNames
	}
	for id, name := range spec {
		if has(id) {
			out = append(out, name)
		}
	}
	return sortedSet(out)
}

// ReadCPUID reads the host CPU with klauspost/cpuid. The library detects the
// CPU once, when the program starts; a microcode update that changes the flags
// shows only after a restart.
func ReadCPUID() CPUID {
	c := &cpuid.CPU
	vendor := libvirtVendor(c.VendorString)
	return CPUID{
		VendorString: c.VendorString,
		Vendor:       vendor,
		Brand:        strings.TrimSpace(c.BrandName),
		Family:       c.Family,
		Model:        c.Model,
		Stepping:     c.Stepping,
		Hypervisor:   c.Has(cpuid.HYPERVISOR),
		Features:     libvirtFeatureNames(vendor, c.Has),
	}
}
