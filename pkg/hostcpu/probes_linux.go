package hostcpu

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// KillProbes kills the QEMU capability probes that libvirt's embedded driver
// started under root and that outlive the process: libvirt starts them
// daemonized, so when the agent stops in the middle of a discovery nobody
// else would. It reports how many it killed.
func KillProbes(root string) int {
	if root == "" {
		return 0
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0
	}
	marker := []byte(filepath.Clean(root) + "/")
	killed := 0
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || len(cmdline) == 0 {
			continue
		}
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		if !strings.HasPrefix(filepath.Base(string(argv0)), "qemu-system-") {
			continue
		}
		if !bytes.Contains(cmdline, marker) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}
