//go:build !linux

package hostcpu

// KillProbes does nothing outside Linux, where the embedded QEMU driver is
// not used.
func KillProbes(string) int { return 0 }
