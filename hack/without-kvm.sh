#!/usr/bin/env bash
# without-kvm.sh runs a command as on a host without KVM: /dev/kvm is hidden
# by binding an empty file over it in a private mount namespace, so the
# command (and libvirt, QEMU and node-agent under it) sees a regular file, not
# KVM's character device. Nothing outside the command sees a change.
#
# Machines of the kind this project builds on differ: some have /dev/kvm, some
# do not. `make test` runs the packages that discover the host CPU once as the
# host is and once through this script, so both kinds are tested on either.
# On a host without /dev/kvm the second run is the same as the first, and the
# script says so.
#
# usage: hack/without-kvm.sh COMMAND [ARG ...]   (as root: it mounts)
set -euo pipefail

dev=/dev/kvm
if [[ ! -e "${dev}" ]]; then
	echo "without-kvm: this host has no ${dev}; this run is the same as the one before it" >&2
	exec "$@"
fi
if [[ ! -c "${dev}" ]]; then
	echo "without-kvm: ${dev} is not a character device here (hidden already?); this run is the same as the one before it" >&2
	exec "$@"
fi

empty=$(mktemp)
trap 'rm -f "${empty}"' EXIT
echo "without-kvm: hiding ${dev} (an empty file bound over it in a private mount namespace)" >&2
# --make-rprivate first: without it the bind could propagate to the host's
# mount namespace through a shared /dev.
unshare --mount -- sh -c 'mount --make-rprivate / && mount --bind "$0" /dev/kvm && exec "$@"' "${empty}" "$@"
