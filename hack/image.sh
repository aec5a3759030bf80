#!/usr/bin/env bash
# image.sh builds node-agent's container image without a container engine,
# from the Debian mirror and the Go module proxy only, into an archive:
#
#   bin/node-agent-image.tar   OCI image layout + docker save manifest.json;
#                              loads with `ctr images import`, `podman load`,
#                              `docker load` and `kind load image-archive`
#   bin/node-agent-image.txt   name, digest, sizes, the SBOM's digests, and
#                              where the base and the top layer are as
#                              directories (KEY=VALUE)
#   bin/node-agent-image.spdx.json
#                              the SBOM: every Debian package (from the
#                              image's dpkg status), Go module and Go release
#                              (from the binaries' build info), SPDX 2.3
#                              JSON (docs/sbom.md); also in
#                              the archive, as an OCI artifact whose subject
#                              is the image manifest (index.json lists it,
#                              unnamed, with artifactType application/spdx+json)
#
# Two layers:
#   1. the base: Debian trixie (debootstrap minbase, then apt inside it)
#      with the packages of hack/image/packages.txt (libvirt 11.3, QEMU
#      10.0), the libvirt-qemu user and the kvm group,
#      pruned of docs, logs and apt lists. It is built once per recipe (this
#      script and the package list) and cached in
#      ~/.cache/node-agent/image-base-<hash> (NODE_AGENT_IMAGE_BASE
#      overrides), since debootstrap takes minutes;
#   2. /usr/local/bin/node-agent, its discovery helper
#      /usr/local/bin/node-agent-discover and the drain slot coordinator
#      /usr/local/bin/node-agent-coordinator (deploy/coordinator.yaml),
#      stripped.
# The archive is reproducible: hack/ociimage clamps every mtime to the commit
# time of HEAD and sorts entries, so the same commit gives the same digest.
#
# usage: hack/image.sh        env: IMAGE (default localhost/node-agent:$VERSION),
#                                  VERSION (default: git describe --dirty),
#                                  OUT_DIR (default bin/)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=hack/lib.sh
source "${root}/hack/lib.sh"
bin="${OUT_DIR:-${root}/bin}"
suite=trixie
packages_file="${root}/hack/image/packages.txt"

version=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo devel)}
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
image=${IMAGE:-localhost/node-agent:${version}}
# The commit's time, so that one commit always gives one digest.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}

start=$SECONDS
# The base is rebuilt when the package list or base_recipe changes; bump
# base_recipe with any change to build_base below.
base_recipe=2
recipe=$( (echo "$base_recipe"; cat "$packages_file") | sha256sum | cut -c1-12)
base=${NODE_AGENT_IMAGE_BASE:-${HOME}/.cache/node-agent/image-base-${recipe}}

build_base() {
	[[ $(id -u) -eq 0 ]] || { echo "image: debootstrap needs root" >&2; return 1; }
	command -v debootstrap >/dev/null || { echo "image: debootstrap missing; run hack/install-deps.sh nspawn" >&2; return 1; }
	[[ -e /usr/share/debootstrap/scripts/$suite ]] || { echo "image: this debootstrap does not know $suite; install Debian 12's (or newer)" >&2; return 1; }
	local mirror pkgs tmp
	mirror=$(debian_mirror "$suite")
	pkgs=$(grep -v '^[[:space:]]*\(#\|$\)' "$packages_file" | paste -sd' ' -)
	mkdir -p "$(dirname "$base")"
	tmp=$(mktemp -d "${base}.tmp.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp' '$tmp.log'" RETURN
	echo "image: debootstrap $suite, then $pkgs (cold: a few minutes)" >&2
	# Two steps, not debootstrap --include: a bookworm host's debootstrap
	# (1.0.128) cannot install trixie's systemd, which
	# libvirt-daemon-driver-qemu pulls in through systemd-container, in one
	# go: systemd 257 pre-depends on libsystemd-shared, which debootstrap has
	# unpacked but not configured yet at that point. apt inside the finished
	# minimal root orders that itself.
	debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 || {
		echo "image: debootstrap failed; its last lines:" >&2
		tail -n 20 "$tmp.log" >&2
		return 1
	}
	# In a mount namespace of its own, so that /proc in the root goes away
	# with the command, whatever way it ends. policy-rc.d keeps maintainer
	# scripts from starting a service (there is no init to ask anyway).
	printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
	chmod 0755 "$tmp/usr/sbin/policy-rc.d"
	# shellcheck disable=SC2016
	unshare --mount -- sh -ec '
		mount --make-rprivate /
		mount -t proc proc "$1/proc"
		chroot "$1" apt-get update -qq
		DEBIAN_FRONTEND=noninteractive chroot "$1" apt-get install -y -qq --no-install-recommends $2
		chroot "$1" apt-get clean' image "$tmp" "$pkgs" >>"$tmp.log" 2>&1 || {
		echo "image: installing $pkgs in the $suite root failed; its last lines:" >&2
		tail -n 20 "$tmp.log" >&2
		return 1
	}
	rm -f "$tmp/usr/sbin/policy-rc.d"
	chmod 0755 "$tmp"
	# The QEMU driver will not start without them. trixie's
	# libvirt-daemon-driver-qemu creates both when it is configured (uid and
	# gid 64055); bookworm's, installed by debootstrap --include, left them
	# out, so this stays as a check (hack/install-deps.sh does the same on
	# the test host).
	chroot "$tmp" sh -ec '
		getent group kvm >/dev/null || groupadd -r kvm
		getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
		getent passwd libvirt-qemu >/dev/null || useradd -r -g libvirt-qemu -G kvm -d /nonexistent -s /usr/sbin/nologin libvirt-qemu'
	# Prune what a container never reads and what differs between two
	# debootstrap runs (logs, caches, the machine id, password ages), keeping
	# every package's copyright file.
	find "$tmp/usr/share/doc" -mindepth 2 ! -name copyright -type f -delete 2>/dev/null || true
	find "$tmp/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
	rm -rf "$tmp"/usr/share/{man,info,lintian,locale} \
		"$tmp"/var/cache/apt/* "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/debconf/*-old \
		"$tmp"/var/cache/ldconfig/aux-cache "$tmp"/var/lib/dpkg/*-old "$tmp"/etc/*- \
		"$tmp"/var/lib/dbus/machine-id "$tmp"/debootstrap
	find "$tmp/var/log" -type f -delete
	: >"$tmp/etc/machine-id"
	: >"$tmp/etc/resolv.conf"
	echo node-agent >"$tmp/etc/hostname"
	# Field 3 of shadow is the day of the last password change: the build
	# day, unless emptied (no password ageing; the accounts have no
	# password anyway).
	sed -i -E 's/^([^:]*:[^:]*:)[0-9]*:/\1:/' "$tmp/etc/shadow"
	mv -T "$tmp" "$base"
}

if [[ ! -d $base ]]; then
	build_base
	echo "image: base built in $((SECONDS - start))s: $base" >&2
else
	echo "image: base $base (cached)" >&2
fi
excludes=(--exclude-contents dev --exclude-contents proc --exclude-contents sys
	--exclude-contents run --exclude-contents tmp --exclude-contents var/tmp)
# The base layer, compressed once per base: compressing 240 MB is most of a
# warm build. Its mtimes are the time of the commit that last changed the
# package list, so a cold rebuild of the same recipe gets the same ones.
# Beside it, $base.layer.tar.gz.diffid.json keeps its digests, so a warm
# build does not decompress it for its diff ID either (hack/ociimage writes
# that file again if it is missing or names another layer).
if [[ ! -f $base.layer.tar.gz ]]; then
	base_epoch=$(git -C "$root" log -1 --format=%ct -- "$packages_file" 2>/dev/null)
	(cd "$root" && go run ./hack/ociimage --layer-only --out "$base.layer.tar.gz" --layer "$base" \
		--epoch "${base_epoch:-$SOURCE_DATE_EPOCH}" "${excludes[@]}")
fi

layer="${bin}/image-layer"
rm -rf "$layer"
mkdir -p "$layer/usr/local/bin"
# Stripped, without paths of this machine: the same commit builds the same
# binaries, as `make build`: the discovery helper node-agent-discover with
# cgo and -tags libvirt_dlopen, beside node-agent where it looks for it;
# node-agent and node-agent-coordinator (the coordinator's Deployment) static,
# without cgo, so that no libc is mapped into the daemons.
ldflags="-s -w -X github.com/node-agent/node-agent/pkg/version.Version=${version} -X github.com/node-agent/node-agent/pkg/version.Commit=${commit}"
(cd "$root" && CGO_ENABLED=1 go build -trimpath -tags libvirt_dlopen -ldflags "$ldflags" \
	-o "$layer/usr/local/bin/" ./cmd/node-agent-discover)
(cd "$root" && CGO_ENABLED=0 go build -trimpath -tags libvirt_dlopen -ldflags "$ldflags" \
	-o "$layer/usr/local/bin/" ./cmd/node-agent ./cmd/node-agent-coordinator)

(cd "$root" && go run ./hack/ociimage \
	--name "$image" --out "${bin}/node-agent-image.tar" --summary "${bin}/node-agent-image.txt" \
	--layer "$base.layer.tar.gz" --layer "$layer" "${excludes[@]}" \
	--entrypoint /usr/local/bin/node-agent --cmd run --user 0:0 \
	--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--label "org.opencontainers.image.title=node-agent" \
	--label "org.opencontainers.image.version=${version}" \
	--label "org.opencontainers.image.revision=${commit}" \
	--sbom-dpkg-status "$base/var/lib/dpkg/status" --sbom-distro "$suite" \
	--sbom-go-binary /usr/local/bin/node-agent="$layer/usr/local/bin/node-agent" \
	--sbom-go-binary /usr/local/bin/node-agent-discover="$layer/usr/local/bin/node-agent-discover" \
	--sbom-go-binary /usr/local/bin/node-agent-coordinator="$layer/usr/local/bin/node-agent-coordinator" \
	--sbom-out "${bin}/node-agent-image.spdx.json") >/dev/null

# The image's two layers as directories, for tests that run what the image
# ships in its root filesystem without a container engine (test/image).
printf 'base_dir=%s\nlayer_dir=%s\n' "$base" "$layer" >>"${bin}/node-agent-image.txt"
# shellcheck disable=SC1091
source "${bin}/node-agent-image.txt"
echo "image: ${name} ${digest}" >&2
echo "image: archive $((archive_bytes / 1024 / 1024)) MiB compressed, $((unpacked_bytes / 1024 / 1024)) MiB unpacked, binary $(($(stat -c %s "$layer/usr/local/bin/node-agent") / 1024 / 1024)) MiB, discovery helper $(($(stat -c %s "$layer/usr/local/bin/node-agent-discover") / 1024 / 1024)) MiB, coordinator $(($(stat -c %s "$layer/usr/local/bin/node-agent-coordinator") / 1024 / 1024)) MiB; built in $((SECONDS - start))s" >&2
echo "image: SBOM (SPDX 2.3) ${sbom_path} ${sbom_digest}, attached to the image as artifact ${sbom_manifest}" >&2
echo "image: ${bin}/node-agent-image.tar; load it with: ctr -n k8s.io images import FILE | podman load -i FILE | docker load -i FILE | kind load image-archive FILE" >&2
