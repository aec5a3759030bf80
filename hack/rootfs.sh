#!/usr/bin/env bash
# rootfs.sh builds the Debian bookworm root file system that the end-to-end
# tests boot with systemd-nspawn: a real systemd as PID 1, dbus and logind.
#
# The result is cached outside the work tree and reused: when the output
# directory exists the script does nothing. It is built into a temporary
# directory next to it and renamed into place only when debootstrap succeeded,
# so an interrupted build never leaves a half-made rootfs behind that the next
# run would take for a finished one. A cold build takes about 3 minutes.
#
# The Debian mirror is the one this machine's apt already uses (the URIs of the
# bookworm stanza in /etc/apt/sources.list.d/debian.sources), so no mirror is
# named here. MIRROR overrides it.
#
# usage: hack/rootfs.sh            output: $NODE_AGENT_ROOTFS
#                                  (default ~/.cache/node-agent/rootfs-bookworm)
set -euo pipefail

out=${NODE_AGENT_ROOTFS:-${HOME}/.cache/node-agent/rootfs-bookworm}
suite=bookworm

if [[ -d $out ]]; then
	echo "rootfs: $out exists; remove it to build it again" >&2
	exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
	echo "rootfs: debootstrap needs root; run as root" >&2
	exit 1
fi
command -v debootstrap >/dev/null || {
	echo "rootfs: debootstrap not installed; run hack/install-deps.sh nspawn" >&2
	exit 1
}

# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
mirror=$(debian_mirror "$suite") || { echo "rootfs: no Debian mirror" >&2; exit 1; }

mkdir -p "$(dirname "$out")"
# Leftovers of runs killed outright are never trusted; a build takes minutes,
# so one untouched for an hour is not a concurrent run's.
find "$(dirname "$out")" -maxdepth 1 -name "$(basename "$out").tmp.*" -mmin +60 -exec rm -rf {} + 2>/dev/null || true
# A private temporary directory, so that two concurrent runs do not clobber
# each other; the first to finish wins the rename.
tmp=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$tmp" "$tmp.log"' EXIT

echo "rootfs: building $suite into $out from $mirror" >&2
start=$SECONDS
debootstrap --variant=minbase \
	--include=systemd,systemd-sysv,dbus,libpam-systemd \
	"$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 || {
	echo "rootfs: debootstrap failed; its last lines:" >&2
	tail -n 20 "$tmp.log" >&2
	exit 1
}
# mktemp made it 0700; the container's / must be world-readable.
chmod 0755 "$tmp"

# Boot-time settings for a test container, not for a real host:
#  - a machine-id, so that a boot is not a "first boot" that generates one
#    and runs the first-boot units every time;
#  - no getty on the pipe console (there is no terminal) and no waiting for a
#    network that the container shares with the host anyway.
systemd-machine-id-setup --root="$tmp" >/dev/null
for unit in console-getty.service getty@.service systemd-networkd-wait-online.service \
	apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
	ln -sf /dev/null "$tmp/etc/systemd/system/$unit"
done
echo "node-agent-e2e" >"$tmp/etc/hostname"

# -T: never move the tree into an $out that a concurrent run created meanwhile.
if ! mv -T "$tmp" "$out" 2>/dev/null; then
	if [[ -d $out ]]; then
		echo "rootfs: $out was built concurrently by another run; keeping that one" >&2
		exit 0
	fi
	echo "rootfs: cannot rename $tmp to $out" >&2
	exit 1
fi
echo "rootfs: built $out in $((SECONDS - start))s" >&2
