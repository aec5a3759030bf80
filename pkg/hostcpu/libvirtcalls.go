package hostcpu

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// libvirtFlags reads the live libvirt's version and returns the domain
// capabilities flags it offers (FlagsFor). A libvirt that cannot tell gets
// none, as an older virsh without the options.
func (d *Discoverer) libvirtFlags(ctx context.Context, conn Conn, uri string, h *HostCPU) (labels, supported DomCapsFlags) {
	v, err := conn.LibVersion(ctx)
	d.log.Debug("libvirt call", "call", "GetLibVersion", "uri", uri, "version", v, "err", err)
	if err != nil {
		d.log.Info("cannot read libvirt's version; asking for domain capabilities without --expand-cpu-features", "uri", uri, "err", err)
		return DomCapsFlags{}, DomCapsFlags{}
	}
	h.LibvirtVersion = fmt.Sprintf("%d.%d.%d", v/1_000_000, v/1_000%1_000, v%1_000)
	return FlagsFor(v)
}

// liveDomainCapabilities asks libvirt for the domain capabilities of t with
// flags, and returns the virttype and flags it got them for. When auto chose
// kvm and libvirt refuses it (for example /dev/kvm exists but the QEMU binary
// lacks KVM support), it asks again for qemu. When libvirt refuses the flags
// (a daemon older than its version said), it asks again without them, as
// KubeVirt does with a virsh that lacks the options.
func (d *Discoverer) liveDomainCapabilities(ctx context.Context, conn Conn, uri string, t Target, flags DomCapsFlags) (*DomainCapabilities, string, DomCapsFlags, error) {
	get := func(t Target, f DomCapsFlags) (*DomainCapabilities, error) {
		start := time.Now()
		s, err := conn.DomainCapabilities(ctx, t, f)
		d.log.Debug("libvirt call", "call", "GetDomainCapabilities", "uri", uri, "arch", t.Arch, "machine", t.Machine, "virtType", t.VirtType, "flags", f.Options(), "duration", time.Since(start), "err", err)
		if err != nil {
			return nil, err
		}
		return ParseDomainCapabilities([]byte(s))
	}
	dc, err := get(t, flags)
	if err != nil && flags != (DomCapsFlags{}) && ctx.Err() == nil {
		d.log.Info("libvirt refused the domain capabilities flags; asking without them", "uri", uri, "flags", flags.Options(), "err", err)
		flags = DomCapsFlags{}
		dc, err = get(t, flags)
	}
	if err != nil && d.opts.VirtType == VirtTypeAuto && t.VirtType == VirtTypeKVM && ctx.Err() == nil {
		d.log.Info("libvirt refused domain capabilities for kvm; trying qemu", "uri", uri, "err", err)
		q := t
		q.VirtType = VirtTypeQEMU
		if dc2, err2 := get(q, flags); err2 == nil {
			return dc2, VirtTypeQEMU, flags, nil
		}
	}
	return dc, t.VirtType, flags, err
}

// supportedHostModel returns the host-model CPU of the domain capabilities
// with flags, the input KubeVirt expands into cpu-feature since ffa4593
// (`virsh domcapabilities --expand-cpu-features --supported-cpu-features |
// virsh hypervisor-cpu-baseline --features`). When libvirt cannot give it,
// the host model of the labelled document stands in, and the log says so.
func (d *Discoverer) supportedHostModel(ctx context.Context, h *HostCPU, conn Conn, uri string, t Target, flags DomCapsFlags) *HostModel {
	start := time.Now()
	s, err := conn.DomainCapabilities(ctx, t, flags)
	d.log.Debug("libvirt call", "call", "GetDomainCapabilities", "uri", uri, "arch", t.Arch, "machine", t.Machine, "virtType", t.VirtType, "flags", flags.Options(), "duration", time.Since(start), "err", err)
	var dc *DomainCapabilities
	if err == nil {
		dc, err = ParseDomainCapabilities([]byte(s))
	}
	if err == nil && dc.HostModel == nil {
		err = errors.New("no host-model CPU in them")
	}
	if err != nil {
		d.log.Info("domain capabilities with the supported CPU features unavailable; expanding the host model without them", "uri", uri, "flags", flags.Options(), "err", err)
		return h.HostModel
	}
	h.addSource("libvirt", uri, strings.Join(append([]string{"domain capabilities"}, flags.Options()...), " ")+" for the supported features")
	return dc.HostModel
}

// crossArchTargets are the guests KubeVirt's node-labeller.sh probes for
// cross-architecture emulation (kubevirt/kubevirt d923fdb): aarch64 with
// machine virt on an x86_64 host, x86_64 with q35 on an aarch64 host, both
// for virttype qemu; none on other hosts.
func crossArchTargets(hostArch string) []Target {
	switch hostArch {
	case "x86_64":
		return []Target{{Arch: "aarch64", Machine: "virt", VirtType: VirtTypeQEMU}}
	case "aarch64":
		return []Target{{Arch: "x86_64", Machine: "q35", VirtType: VirtTypeQEMU}}
	}
	return nil
}

// emulatedArches fills EmulatedArches: each cross-architecture target whose
// domain capabilities libvirt gives and that parse, as KubeVirt counts an
// architecture emulated (loadCrossArchCapabilities). An error means the
// emulator is not installed: the arch is not emulated, which is an answer.
func (d *Discoverer) emulatedArches(ctx context.Context, h *HostCPU, conn Conn, uri, libvirtReason string) {
	if conn == nil {
		// Offline files include no other architecture's domain
		// capabilities.
		h.addGap(FactEmulatedArches, d.noLibvirtReason(libvirtReason, "cross-architecture domain capabilities file"))
		return
	}
	out := []string{}
	for _, t := range crossArchTargets(h.Arch) {
		start := time.Now()
		s, err := conn.DomainCapabilities(ctx, t, DomCapsFlags{})
		if err == nil {
			_, err = ParseDomainCapabilities([]byte(s))
		}
		d.log.Debug("libvirt call", "call", "GetDomainCapabilities", "uri", uri, "arch", t.Arch, "machine", t.Machine, "virtType", t.VirtType, "duration", time.Since(start), "err", err)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			out = append(out, t.Arch)
		}
	}
	h.EmulatedArches = sortedSet(out)
	h.addSource("libvirt", uri, "emulated architectures")
}
