// Package image runs the CPU discovery node-agent's image ships where the
// image ships it: `node-agent labels` and `virsh domcapabilities` inside the
// image's own root filesystem (the base layer `make image` caches, with the
// image's top layer at /usr/local/bin), in a systemd-nspawn container
// (testenv.Container.Run), with the host's /dev/kvm and without it. So the
// label tests prove the image's libvirt and QEMU, not only the test host's.
//
// Tests skip when root, systemd-nspawn or the image are missing, unless
// NODE_AGENT_INTEGRATION=1 or NODE_AGENT_E2E=1 is set (as `make test`
// does): then they fail and say what to build. A host without /dev/kvm
// skips the KVM case only: machines of this kind differ in having it.
package image
