//go:build !linux

package hostcpu

import (
	"errors"
	"runtime"
)

// SchedRTRuntimePath is the sysctl KubeVirt reads on Linux.
const SchedRTRuntimePath = "/proc/sys/kernel/sched_rt_runtime_us"

// KVMHyperV is unknown off Linux.
func KVMHyperV(string) ([]string, error) {
	return nil, errors.New("KVM exists only on Linux, not " + runtime.GOOS)
}

// ReadRealtime is unknown off Linux.
func ReadRealtime(string) (bool, error) {
	return false, errors.New("kernel.sched_rt_runtime_us exists only on Linux, not " + runtime.GOOS)
}
