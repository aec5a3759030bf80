package hostcpu

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestReadRealtime(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		content string
		want    bool
		wantErr bool
	}{
		{"-1\n", true, false},
		{"950000\n", false, false},
		{"", false, true},
		{"x", false, true},
	} {
		p := filepath.Join(dir, "v")
		if err := os.WriteFile(p, []byte(tt.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadRealtime(p)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%q: %v, %v; want %v, error %v", tt.content, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := ReadRealtime(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing sysctl read as known")
	}
}

// On this machine's /dev/kvm, when there is one, the probe answers without
// error, and only with KubeVirt's names.
func TestKVMHyperV(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	hv, err := KVMHyperV("/dev/kvm")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, p := range hyperVProbes {
		known[p.name] = true
	}
	for _, e := range hv {
		if !known[e] {
			t.Errorf("unknown enlightenment %q", e)
		}
	}
	t.Logf("/dev/kvm offers %d Hyper-V enlightenments: %v", len(hv), hv)
	if _, err := KVMHyperV(filepath.Join(t.TempDir(), "kvm")); err == nil {
		t.Error("a missing /dev/kvm read as known")
	}
}

func TestHyperVFrom(t *testing.T) {
	caps := map[uintptr]bool{kvmCapHyperV: true, kvmCapHyperVTime: true, kvmCapHyperVSynIC: false, kvmCapHyperVVPIndex: true}
	has := func(c uintptr) (bool, error) { return caps[c], nil }
	// The SynIC MSR is listed, but synic has a capability, which says no:
	// the capability alone decides, as in KubeVirt.
	msrs := []uint32{hvMSRSControl, hvMSRTSCFrequency, hvMSRReset}
	got, err := hyperVFrom(msrs, has)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"base", "frequencies", "reset", "time", "vpindex"}
	if !slices.Equal(got, want) {
		t.Errorf("hyperVFrom = %v; want %v", got, want)
	}
	if _, err := hyperVFrom(nil, func(uintptr) (bool, error) { return false, errors.New("EBADF") }); err == nil {
		t.Error("a failed KVM_CHECK_EXTENSION read as unsupported")
	}
	if got, _ := hyperVFrom(nil, func(uintptr) (bool, error) { return false, nil }); got == nil || len(got) != 0 {
		t.Errorf("nothing offered = %#v; want an empty, known list", got)
	}
}
