// Package hostcpu owns host CPU discovery: what this host's CPU can offer to
// virtual machines, as libvirt and the CPU itself report it.
//
// Discovery combines four kinds of source, and records in the snapshot which
// ones it used and what it could not learn:
//
//   - cpuid (github.com/klauspost/cpuid/v2): vendor, brand, family, model,
//     stepping, the hypervisor bit and the feature flags, renamed to libvirt's
//     feature names. Always available on x86.
//   - libvirt (through pkg/hostcpu/libvirt, over libvirt.org/go/libvirt):
//     domain capabilities (CPU models and whether they are usable, the
//     host-model CPU), asked as KubeVirt's node-labeller.sh asks them (its
//     machine type, and the expansion flags where libvirt has them), host
//     capabilities (TSC counter, machine types), hypervisor-cpu-baseline with
//     expanded features (the features of a named model, and the
//     hypervisor-supported features), and the domain capabilities of the
//     architecture KubeVirt would emulate (aarch64 on x86_64).
//   - the kernel: KVM's Hyper-V enlightenments through /dev/kvm ioctls, and
//     the realtime sysctl kernel.sched_rt_runtime_us.
//   - offline files, for debugging, tests and other hosts: a saved domain
//     capabilities XML, a saved host capabilities XML, a saved
//     hypervisor-cpu-baseline --features output, and libvirt's cpu_map
//     directory, whose model definitions are resolved recursively through
//     <model name=.../>. Given any of the first three, discovery is offline:
//     it reads nothing of this machine (no cpuid, libvirt, kernel or
//     installed cpu_map), so that another host's files are never mixed with
//     this one's facts.
//
// libvirt sits behind the small Conn interface; Options.Dial opens one
// (pkg/hostcpu/libvirt.Dial). `node-agent run` discovers in a child process,
// the discovery helper cmd/node-agent-discover (pkg/hostcpu/subprocess), so
// the daemon links and loads no libvirt. When libvirt cannot be reached,
// Discover falls back to cpuid and says which facts are missing. Nothing here knows about Kubernetes labels: pkg/labeller turns
// a HostCPU into labels.
package hostcpu
