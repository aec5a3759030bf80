#!/usr/bin/env bash
# install-deps.sh installs the Debian packages the tests and the demo need, and
# only those that are missing, so it is cheap to run before every test.
#
#   libvirt + QEMU: the embedded QEMU driver (qemu:///embed) used by the libvirt
#                   tests, the demo and `node-agent labels` on this host;
#                   libvirt-dev: the headers libvirt.org/go/libvirt compiles
#                   against when built without -tags libvirt_dlopen (a plain
#                   `go build ./...` or `go vet ./...`);
#   dbus-daemon:    private buses for the logind stand-in tests;
#   debootstrap + systemd-container: the systemd-nspawn rootfs for the
#                   end-to-end shutdown test, and the base of the image
#                   `make image` builds (Debian trixie: Debian 12's
#                   debootstrap knows it, and its debian-archive-keyring
#                   verifies it, since trixie's Release files are signed with
#                   bookworm's archive key too), in which test/image runs
#                   the image's discovery;
#   containerd, runc, CNI plugins: the real node of test/node, where a real
#                   kubelet runs the shipped DaemonSet (iproute2 makes its
#                   network namespace), and skopeo, which reads the image
#                   archive `make image` writes as both formats it claims.
#
# usage: hack/install-deps.sh [group ...]   groups: libvirt dbus nspawn node (default: all)
set -euo pipefail

declare -A groups=(
	[libvirt]="libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 libvirt-clients libvirt-dev"
	[dbus]="dbus-daemon"
	[nspawn]="debootstrap systemd-container"
	[node]="containerd runc containernetworking-plugins iproute2 skopeo"
)

if [[ $# -eq 0 ]]; then
	set -- libvirt dbus nspawn node
fi

missing=()
for g in "$@"; do
	[[ -n "${groups[$g]:-}" ]] || { echo "install-deps: unknown group $g" >&2; exit 2; }
	for p in ${groups[$g]}; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
			missing+=("$p")
		fi
	done
done

if [[ ${#missing[@]} -gt 0 ]]; then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: missing packages ${missing[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	# Without a fresh package list, look-ups can find nothing or an old version.
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for g in "$@"; do
	if [[ $g == libvirt ]]; then
		# The Debian packages do not create these, and the QEMU driver refuses to
		# start without them.
		getent group kvm >/dev/null || groupadd -r kvm
		getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
		getent passwd libvirt-qemu >/dev/null || useradd -r -g libvirt-qemu -G kvm libvirt-qemu
	fi
done
