package hostcpu

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestKVMHyperVOnThisHost probes the host's real /dev/kvm, so it is not a
// unit test: -short skips it. It asserts what this host offers: with a KVM
// device the probe answers, with KubeVirt's names only; without one (no file,
// as in `make test`'s second run, or a placeholder that is no character
// device) it fails and names the device.
func TestKVMHyperVOnThisHost(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the host's /dev/kvm; skipped with -short")
	}
	if !KVMDevice(KVMDevicePath) {
		_, err := KVMHyperV(KVMDevicePath)
		if err == nil || !strings.Contains(err.Error(), KVMDevicePath) {
			t.Fatalf("no KVM device at %s, yet the probe said %v", KVMDevicePath, err)
		}
		t.Logf("this host has no KVM device: %v", err)
		return
	}
	hv, err := KVMHyperV(KVMDevicePath)
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
}

// TestKVMDevice checks the device test on files the test makes: nothing and a
// regular file (what hides /dev/kvm in `make test`) are no KVM, and the probe
// says so with the path.
func TestKVMDevice(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "kvm-empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "absent"), empty} {
		if KVMDevice(p) {
			t.Errorf("KVMDevice(%s) = true", p)
		}
		if _, err := KVMHyperV(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("KVMHyperV(%s) = %v; want an error naming it", p, err)
		}
	}
	// /dev/null is a character device on every Linux host.
	if !KVMDevice("/dev/null") {
		t.Error("KVMDevice(/dev/null) = false; a character device must count")
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
