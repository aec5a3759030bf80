package hostcpu

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ioctls and capabilities below are from <linux/kvm.h>; the Hyper-V MSR
// numbers are from the Hyper-V TLFS (and arch/x86/include/asm/hyperv-tlfs.h).
const (
	kvmGetMSRIndexList = 0xc004ae02 // _IOWR(KVMIO, 0x02, struct kvm_msr_list)
	kvmCheckExtension  = 0xae03     // _IO(KVMIO, 0x03)

	kvmCapHyperV         = 44
	kvmCapHyperVTime     = 96
	kvmCapHyperVSynIC    = 123
	kvmCapHyperVSynIC2   = 148
	kvmCapHyperVVPIndex  = 149
	kvmCapHyperVTLBFlush = 155
	kvmCapHyperVSendIPI  = 161

	hvMSRVPIndex             = 0x40000002
	hvMSRReset               = 0x40000003
	hvMSRVPRuntime           = 0x40000010
	hvMSRTSCFrequency        = 0x40000022
	hvMSRSControl            = 0x40000080
	hvMSRSTimer0Config       = 0x400000b0
	hvMSRReenlightenmentCtrl = 0x40000106
)

// hyperVProbe is one Hyper-V enlightenment and how KVM advertises it: by a
// capability (KVM_CHECK_EXTENSION) or, for those without one, by the MSR
// being in KVM_GET_MSR_INDEX_LIST. The names and the rule are KubeVirt's
// (pkg/virt-handler/node-labeller/kvm-caps-info-plugin_amd64.go): when an
// entry has a capability, the capability alone decides.
type hyperVProbe struct {
	name string
	cap  uintptr
	msr  uint32
}

var hyperVProbes = []hyperVProbe{
	{name: "base", cap: kvmCapHyperV},
	{name: "time", cap: kvmCapHyperVTime},
	{name: "vpindex", cap: kvmCapHyperVVPIndex, msr: hvMSRVPIndex},
	{name: "tlbflush", cap: kvmCapHyperVTLBFlush},
	{name: "ipi", cap: kvmCapHyperVSendIPI},
	{name: "synic", cap: kvmCapHyperVSynIC, msr: hvMSRSControl},
	{name: "synic2", cap: kvmCapHyperVSynIC2, msr: hvMSRSControl},
	{name: "frequencies", msr: hvMSRTSCFrequency},
	{name: "reset", msr: hvMSRReset},
	{name: "runtime", msr: hvMSRVPRuntime},
	{name: "synictimer", msr: hvMSRSTimer0Config},
	{name: "reenlightenment", msr: hvMSRReenlightenmentCtrl},
}

// KVMHyperV returns the Hyper-V enlightenments the KVM behind path (normally
// /dev/kvm) supports, sorted. An error means the answer is unknown: the
// device cannot be opened or the MSR list cannot be read.
func KVMHyperV(path string) ([]string, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist, so there is no KVM here (no hardware virtualization, or the kvm module is not loaded)", path)
	}
	if err != nil {
		// The *PathError names the path and the operation.
		return nil, err
	}
	defer f.Close()
	// A file that is not a character device is no KVM: the ioctls would
	// only fail with ENOTTY. A container may carry a placeholder file
	// (test/node binds an empty file over /dev/kvm for the agent's pod).
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	} else if fi.Mode()&os.ModeCharDevice == 0 {
		return nil, fmt.Errorf("%s is not a character device, so there is no KVM here", path)
	}
	fd := f.Fd()
	msrs, err := kvmMSRIndexList(fd)
	if err != nil {
		return nil, fmt.Errorf("%s: KVM_GET_MSR_INDEX_LIST: %w", path, err)
	}
	return hyperVFrom(msrs, func(c uintptr) (bool, error) {
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, kvmCheckExtension, c)
		if errno != 0 {
			return false, fmt.Errorf("%s: KVM_CHECK_EXTENSION %d: %w", path, c, errno)
		}
		// 0: unsupported; a positive value: supported
		// (https://docs.kernel.org/virt/kvm/api.html#kvm-check-extension).
		return r > 0, nil
	})
}

// hyperVFrom applies KubeVirt's rule to KVM's answers: an enlightenment with
// a capability is there when KVM has the capability; one without, when its
// MSR is in the MSR index list.
func hyperVFrom(msrs []uint32, hasCap func(uintptr) (bool, error)) ([]string, error) {
	out := []string{}
	for _, p := range hyperVProbes {
		var ok bool
		if p.cap != 0 {
			var err error
			if ok, err = hasCap(p.cap); err != nil {
				return nil, err
			}
		} else {
			ok = slices.Contains(msrs, p.msr)
		}
		if ok {
			out = append(out, p.name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// kvmMSRIndexList reads struct kvm_msr_list { __u32 nmsrs; __u32 indices[]; }:
// a first call with nmsrs = 0 fails with E2BIG and says how many there are.
func kvmMSRIndexList(fd uintptr) ([]uint32, error) {
	var n uint32
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, kvmGetMSRIndexList, uintptr(unsafe.Pointer(&n)))
	if errno != 0 && !errors.Is(errno, unix.E2BIG) {
		return nil, errno
	}
	buf := make([]uint32, 1+n)
	buf[0] = n
	_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, kvmGetMSRIndexList, uintptr(unsafe.Pointer(&buf[0])))
	if errno != 0 {
		return nil, errno
	}
	return buf[1 : 1+min(buf[0], n)], nil
}

// SchedRTRuntimePath is the sysctl KubeVirt reads to decide whether a node
// can run realtime workloads.
const SchedRTRuntimePath = "/proc/sys/kernel/sched_rt_runtime_us"

// ReadRealtime reports whether the sysctl file at path holds -1, that is
// realtime tasks are not throttled. KubeVirt runs `sysctl
// kernel.sched_rt_runtime_us` and compares the value with -1; reading the
// file gives the same value without a sysctl binary in the image.
func ReadRealtime(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not a number", path, strings.TrimSpace(string(b)))
	}
	return v == -1, nil
}
