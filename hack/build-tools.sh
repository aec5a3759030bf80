#!/usr/bin/env bash
# build-tools.sh builds the upstream binaries the tests run against (the
# control plane, kwok, kubectl, the kubelet of the real-node tests, and
# Prometheus with promtool for the monitoring component, Alertmanager for the
# silences, and Helm for the chart in deploy/helm), from the Go module proxy,
# into bin/; and the control plane of the next Kubernetes release
# (next-control-plane: kube-apiserver, kube-controller-manager and
# kube-scheduler v1.37) into bin/k8s-<version>/, for the tests of its
# maintenance APIs and `make test K8S_VERSION=...`. Each binary is built once
# per pinned version and kept in a cache outside the work tree
# (NODE_AGENT_TOOLS_CACHE, default ~/.cache/node-agent/tools), so a fresh
# clone on a machine that built it before only copies it. A binary already in
# bin/ is left alone.
#
# usage: hack/build-tools.sh [tool ...]   (default: all)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${root}/bin"
cache="${NODE_AGENT_TOOLS_CACHE:-${HOME}/.cache/node-agent/tools}"
mkdir -p "${bin}" "${cache}"

k8s_version=v1.36.3
# The newer release the tests of its maintenance APIs run against (its
# control plane only), into bin/k8s-${k8s_next_version}/.
k8s_next_version=v1.37.2
etcd_version=v3.6.8
kwok_version=v0.8.0
staticcheck_version=v0.8.2
prometheus_version=v0.316.0 # Prometheus 3.16.0: the module is tagged v0.3MM.P for 3.MM.P
prometheus_operator_version=v0.85.0
alertmanager_version=v0.35.0
helm_version=v4.3.1

# Unstamped builds report v0.0.0-master+$Format:%H$, which kubectl cannot parse.
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"
k8s_next_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_next_version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

# Unstamped builds report an empty version; promu stamps these same variables.
prometheus_ldflags="-s -w -X github.com/prometheus/common/version.Version=3.16.0 -X github.com/prometheus/common/version.Revision=${prometheus_version} -X github.com/prometheus/common/version.Branch=${prometheus_version}"

alertmanager_ldflags="-s -w -X github.com/prometheus/common/version.Version=0.35.0 -X github.com/prometheus/common/version.Revision=${alertmanager_version} -X github.com/prometheus/common/version.Branch=${alertmanager_version}"

# Unstamped builds report "v4.3" with no patch level; Helm's own Makefile
# stamps this variable.
helm_ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${helm_version}"

# build NAME VERSION MODULE_DIR PACKAGE [LDFLAGS [DEST_DIR]]
build() {
	local name=$1 version=$2 moddir=$3 pkg=$4 ldflags=${5:-"-s -w"} dest=${6:-${bin}}
	local cached="${cache}/${name}-${version}"
	if [[ -x "${dest}/${name}" ]]; then
		return 0
	fi
	if [[ ! -x "${cached}" ]]; then
		echo "build-tools: building ${name} ${version} (cold builds take minutes)" >&2
		local start=$SECONDS
		(cd "${root}/${moddir}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${cached}.tmp" "${pkg}")
		mv "${cached}.tmp" "${cached}"
		echo "build-tools: built ${name} in $((SECONDS - start))s" >&2
	fi
	mkdir -p "${dest}"
	cp "${cached}" "${dest}/${name}"
}

# alertmanager builds Alertmanager from its module, without its web UI: the
# module embeds ui/app/dist, which its release process generates (npm, elm)
# and the module zip does not hold. The build runs in a copy of the module
# with empty placeholders there; the API the tests use is all Go.
alertmanager() {
	local cached="${cache}/alertmanager-${alertmanager_version}"
	if [[ -x "${bin}/alertmanager" ]]; then
		return 0
	fi
	if [[ ! -x "${cached}" ]]; then
		echo "build-tools: building alertmanager ${alertmanager_version} (cold builds take minutes)" >&2
		local start=$SECONDS dir src
		dir=$(cd "${root}/hack/tools/alertmanager" &&
			go mod download -json "github.com/prometheus/alertmanager@${alertmanager_version}" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		if [[ -z "${dir}" ]]; then
			echo "build-tools: go mod download printed no Dir for alertmanager ${alertmanager_version}" >&2
			return 1
		fi
		src="${cache}/alertmanager-src-${alertmanager_version}"
		rm -rf "${src}"
		cp -r "${dir}" "${src}"
		chmod -R u+w "${src}"
		for ui in elm mantine; do
			mkdir -p "${src}/ui/app/dist/${ui}"
			echo "<!doctype html><title>Alertmanager</title><p>built without its web UI (hack/build-tools.sh)" > "${src}/ui/app/dist/${ui}/index.html"
		done
		(cd "${src}" && CGO_ENABLED=0 go build -trimpath -ldflags "${alertmanager_ldflags}" -o "${cached}.tmp" ./cmd/alertmanager)
		mv "${cached}.tmp" "${cached}"
		rm -rf "${src}"
		echo "build-tools: built alertmanager in $((SECONDS - start))s" >&2
	fi
	cp "${cached}" "${bin}/alertmanager"
}

# operator_crds copies the Prometheus Operator's CRDs (example/prometheus-operator-crd
# in its module) into bin/prometheus-operator-crd, for the dry run of
# deploy/components/monitoring. The module cache keeps them; no build is needed.
operator_crds() {
	local dest="${bin}/prometheus-operator-crd"
	if [[ -d "${dest}" ]]; then
		return 0
	fi
	local dir
	dir=$(cd "${root}/hack/tools/prometheus" &&
		go mod download -json "github.com/prometheus-operator/prometheus-operator@${prometheus_operator_version}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [[ -z "${dir}" ]]; then
		echo "build-tools: go mod download printed no Dir for prometheus-operator ${prometheus_operator_version}" >&2
		return 1
	fi
	mkdir -p "${dest}.tmp"
	cp "${dir}"/example/prometheus-operator-crd/*.yaml "${dest}.tmp/"
	chmod u+w "${dest}.tmp"/*.yaml
	mv "${dest}.tmp" "${dest}"
}

tool() {
	case $1 in
	kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet)
		build "$1" "${k8s_version}" hack/tools/k8s "k8s.io/kubernetes/cmd/$1" "${k8s_ldflags}" ;;
	next-control-plane)
		for c in kube-apiserver kube-controller-manager kube-scheduler; do
			build "${c}" "${k8s_next_version}" hack/tools/k8s-1.37 "k8s.io/kubernetes/cmd/${c}" "${k8s_next_ldflags}" "${bin}/k8s-${k8s_next_version}"
		done ;;
	etcd) build etcd "${etcd_version}" hack/tools/k8s go.etcd.io/etcd/server/v3 ;;
	kwok) build kwok "${kwok_version}" hack/tools/kwok sigs.k8s.io/kwok/cmd/kwok ;;
	staticcheck) build staticcheck "${staticcheck_version}" hack/tools/lint honnef.co/go/tools/cmd/staticcheck ;;
	prometheus | promtool)
		build "$1" "${prometheus_version}" hack/tools/prometheus "github.com/prometheus/prometheus/cmd/$1" "${prometheus_ldflags}" ;;
	prometheus-operator-crd) operator_crds ;;
	alertmanager) alertmanager ;;
	helm) build helm "${helm_version}" hack/tools/helm helm.sh/helm/v4/cmd/helm "${helm_ldflags}" ;;
	*) echo "build-tools: unknown tool $1" >&2; return 2 ;;
	esac
}

# cached TOOL: whether TOOL is in bin/ or in the cache already, so that it
# is only copied.
cached() {
	local name=$1 version dest=${bin}
	case $1 in
	kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet) version=${k8s_version} ;;
	next-control-plane)
		name=kube-apiserver version=${k8s_next_version} dest="${bin}/k8s-${k8s_next_version}" ;;
	etcd) version=${etcd_version} ;;
	kwok) version=${kwok_version} ;;
	staticcheck) version=${staticcheck_version} ;;
	prometheus | promtool) version=${prometheus_version} ;;
	alertmanager) version=${alertmanager_version} ;;
	helm) version=${helm_version} ;;
	prometheus-operator-crd) [[ -d "${bin}/prometheus-operator-crd" || -d "${cache}/prometheus-operator-crd-${prometheus_operator_version}" ]]; return ;;
	*) return 1 ;;
	esac
	[[ -x "${dest}/${name}" || -x "${cache}/${name}-${version}" ]]
}

# cold_seconds TOOL: how long TOOL took to build from cold on a 2-core
# machine (empty Go build, module and tool caches; module downloads
# included), measured on 2026-11-29 with this script's own "built ... in"
# lines: `make demo`'s five first, then the rest in the default order. What a
# tool shares with one built before it is counted once (kubectl and the
# kubelet after kube-apiserver), so this is an estimate, not a bound.
cold_seconds() {
	case $1 in
	etcd) echo 29 ;;
	kube-apiserver) echo 155 ;;
	kube-controller-manager) echo 46 ;;
	kube-scheduler) echo 4 ;;
	kwok) echo 59 ;;
	next-control-plane) echo 311 ;;
	kubectl) echo 20 ;;
	kubelet) echo 18 ;;
	prometheus) echo 259 ;;
	promtool) echo 5 ;;
	alertmanager) echo 21 ;;
	helm) echo 71 ;;
	*) echo 5 ;;
	esac
}

if [[ $# -eq 0 ]]; then
	set -- etcd kube-apiserver kube-controller-manager kube-scheduler next-control-plane kwok kubectl kubelet prometheus promtool prometheus-operator-crd alertmanager helm
fi
todo=() estimate=0
for t in "$@"; do
	if ! cached "$t"; then
		todo+=("$t")
		estimate=$((estimate + $(cold_seconds "$t")))
	fi
done
if [[ ${#todo[@]} -gt 0 ]]; then
	echo "build-tools: ${#todo[@]} of $# to build (${todo[*]}): about $(((estimate + 59) / 60)) minutes on 2 cores from cold, less where Go's build cache holds their packages; then cached in ${cache}" >&2
fi
for t in "$@"; do tool "$t"; done
