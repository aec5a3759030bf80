package hostcpu

import (
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/cpuid/v2"
)

// Names newer than libvirt 9.0's cpu_map, taken from QEMU's feature words.
var namesNewerThanLibvirt90 = []string{
	"amx-complex", "amx-fp16", "avx-ifma", "avx-ne-convert", "avx-vnni-int16",
	"avx-vnni-int8", "bhi-ctrl", "cmpccxadd", "fred", "ibpb-brtype",
	"ipred-ctrl", "lam", "mcdt-no", "prefetchiti", "rrsba-ctrl", "sbpb", "sm3",
	"sm4", "srso-no", "srso-user-kernel-no", "wrmsrns",
}

func TestCPUIDNamesAreLibvirtNames(t *testing.T) {
	var known []string
	for _, line := range strings.Split(string(readTestdata(t, "libvirt-9.0-x86-features.txt")), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			known = append(known, line)
		}
	}
	seen := map[string]cpuid.FeatureID{}
	check := func(id cpuid.FeatureID, name string) {
		if !slices.Contains(known, name) && !slices.Contains(namesNewerThanLibvirt90, name) {
			t.Errorf("%s maps to %q, which is not a libvirt feature name", id, name)
		}
	}
	for id, name := range cpuidFeatureNames {
		check(id, name)
		if prev, ok := seen[name]; ok {
			t.Errorf("%s and %s both map to %q", prev, id, name)
		}
		seen[name] = id
	}
	for _, m := range []map[cpuid.FeatureID]string{intelSpecCtrlNames, amdSpecCtrlNames} {
		for id, name := range m {
			check(id, name)
			if _, ok := cpuidFeatureNames[id]; ok {
				t.Errorf("%s is mapped both per vendor and for all vendors", id)
			}
		}
	}
	for _, n := range namesNewerThanLibvirt90 {
		if slices.Contains(known, n) {
			t.Errorf("%s is in libvirt 9.0 after all; drop it from the newer list", n)
		}
	}
}

func TestLibvirtFeatureNames(t *testing.T) {
	has := func(ids ...cpuid.FeatureID) func(cpuid.FeatureID) bool {
		return func(id cpuid.FeatureID) bool { return slices.Contains(ids, id) }
	}
	tests := []struct {
		vendor string
		has    func(cpuid.FeatureID) bool
		want   []string
	}{
		{"Intel", has(cpuid.SSE3, cpuid.SSE4, cpuid.CLMUL, cpuid.LAHF, cpuid.CMPXCHG8, cpuid.IBPB, cpuid.STIBP, cpuid.SPEC_CTRL_SSBD), []string{"cx8", "lahf_lm", "pclmuldq", "pni", "spec-ctrl", "ssbd", "sse4.1", "stibp"}},
		{"AMD", has(cpuid.IBPB, cpuid.IBRS, cpuid.STIBP, cpuid.SPEC_CTRL_SSBD, cpuid.LZCNT), []string{"abm", "amd-ssbd", "amd-stibp", "ibpb", "ibrs"}},
		{"Hygon", has(cpuid.IBPB), []string{"ibpb"}},
		// An unknown vendor's speculation flags have no certain name.
		{"", has(cpuid.IBPB, cpuid.SSE2), []string{"sse2"}},
		// Deliberately unmapped flags.
		{"AMD", has(cpuid.FXSROPT, cpuid.HTT, cpuid.AVXSLOW), []string{}},
	}
	for _, tt := range tests {
		if got := libvirtFeatureNames(tt.vendor, tt.has); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %v; want %v", tt.vendor, got, tt.want)
		}
	}
}

func TestReadCPUID(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("cpuid feature names are mapped on x86 only")
	}
	c := ReadCPUID()
	if c.VendorString == "" || c.Family == 0 {
		t.Errorf("cpuid = %+v; want a vendor and a family", c)
	}
	// Every amd64 CPU has SSE2, and the name must be libvirt's.
	if !slices.Contains(c.Features, "sse2") || !slices.IsSorted(c.Features) {
		t.Errorf("features = %v; want sorted, with sse2", c.Features)
	}
	if libvirtVendor(c.VendorString) != c.Vendor {
		t.Errorf("vendor %q for %q", c.Vendor, c.VendorString)
	}
	if !strings.Contains(c.String(), c.VendorString) {
		t.Errorf("String() = %q", c.String())
	}
}
