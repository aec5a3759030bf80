#!/usr/bin/env bash
# without-kvm.sh runs a command as on a host without KVM: in a private mount
# namespace, /dev is replaced by a copy that has every entry of the host's
# /dev except kvm (each entry bound from the original), so the command (and
# libvirt, QEMU and node-agent under it) finds no /dev/kvm at all, exactly as
# on a machine without hardware virtualization. Nothing outside the command
# sees a change.
#
# Why not an empty file bound over /dev/kvm (as test/node does for the agent's
# container): libvirt decides whether KVM is usable from whether it can access
# the path /dev/kvm, not from its type, and it drops its cached QEMU
# capabilities whenever that answer disagrees with what QEMU found. With a
# placeholder file, libvirt thinks KVM is usable, QEMU finds none, and every
# libvirt connection probes QEMU again (10-15 s here, measured) - a state no
# real host without KVM is in.
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
if [[ $# -eq 0 ]]; then
	echo "usage: $0 COMMAND [ARG ...]" >&2
	exit 2
fi

echo "without-kvm: hiding ${dev} (a /dev without it, in a private mount namespace)" >&2
# The inner script runs in the new namespace. --make-rprivate first: without
# it the mounts could propagate to the host's namespace through a shared /dev.
# shellcheck disable=SC2016
exec unshare --mount -- bash -euo pipefail -c '
mount --make-rprivate /
new=$(mktemp -d /tmp/without-kvm.XXXXXX)
mount -t tmpfs -o mode=0755,nosuid tmpfs "${new}"
shopt -s dotglob nullglob
for src in /dev/*; do
	name=${src#/dev/}
	[[ "${name}" == kvm ]] && continue
	if [[ -L "${src}" ]]; then
		cp -P "${src}" "${new}/${name}"
	elif [[ -d "${src}" ]]; then
		mkdir "${new}/${name}"
		mount --rbind "${src}" "${new}/${name}"
	else
		touch "${new}/${name}"
		mount --bind "${src}" "${new}/${name}"
	fi
done
mount --move "${new}" /dev
rmdir "${new}" 2>/dev/null || true
if [[ -e /dev/kvm ]]; then
	echo "without-kvm: /dev/kvm is still there; refusing to run" >&2
	exit 1
fi
exec "$@"
' without-kvm "$@"
