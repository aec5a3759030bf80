# node-agent's container image, for deploy/daemonset.yaml.
#
# Honest status: this image has never been built. The project's build
# machines have no container engine. The build stage runs the same `go build`
# as `make build`; the runtime stage installs a subset of what
# hack/install-deps.sh installs for the integration tests' embedded QEMU
# driver, and creates the same user and groups.
#
#   docker build -t registry.example.com/node-agent:v0.1.0 \
#     --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse --short HEAD) .

# Build: cgo with -tags libvirt_dlopen. The binary links only libc and loads
# libvirt.so.0 at run time, so it needs no libvirt headers here and runs (with
# labels from cpuid alone) where libvirt is missing.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG COMMIT=unknown
RUN CGO_ENABLED=1 go build -trimpath -tags libvirt_dlopen \
      -ldflags "-X github.com/node-agent/node-agent/pkg/version.Version=${VERSION} -X github.com/node-agent/node-agent/pkg/version.Commit=${COMMIT}" \
      -o /out/node-agent ./cmd/node-agent

# Runtime: Debian bookworm, the same glibc as the build stage.
# - libvirt0: the libvirt client library node-agent loads; it also ships
#   libvirt's cpu_map, the fallback for expanding CPU models.
# - libvirt-daemon-driver-qemu and qemu-system-x86: the embedded QEMU driver
#   (qemu:///embed), which asks QEMU itself what it and KVM offer when the
#   host runs no libvirt of its own.
# Those packages create neither the libvirt-qemu user nor the kvm group, and
# the QEMU driver will not start without them.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libvirt0 libvirt-daemon-driver-qemu qemu-system-x86 \
 && rm -rf /var/lib/apt/lists/* \
 && (getent group kvm >/dev/null || groupadd -r kvm) \
 && (getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu) \
 && (getent passwd libvirt-qemu >/dev/null || useradd -r -g libvirt-qemu -G kvm -d /nonexistent -s /usr/sbin/nologin libvirt-qemu)
COPY --from=build /out/node-agent /usr/local/bin/node-agent

# root, on purpose. The shutdown guard takes a systemd-logind "delay"
# inhibitor lock over the host's system bus (and, with
# shutdown.manageLogindConfig, asks systemd to make logind reload); logind and
# systemd allow both to uid 0 without a polkit rule. The embedded QEMU driver
# also runs as root and starts its QEMU probes as libvirt-qemu. The DaemonSet
# takes away what root does not need: it drops every capability but the seven
# the embedded driver uses, forbids privilege escalation and mounts the root
# filesystem read-only.
USER 0:0
ENTRYPOINT ["/usr/local/bin/node-agent"]
CMD ["run"]
