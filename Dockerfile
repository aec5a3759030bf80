# node-agent's container image, for deploy/daemonset.yaml and
# deploy/coordinator.yaml (the drain slot coordinator runs from it too).
#
# For users with Docker. `make image` (hack/image.sh) builds the same image
# without a container engine, and that is the one the tests run on a real
# kubelet (test/node). Both install the packages listed in
# hack/image/packages.txt and create the same user and groups.
#
#   docker build -t registry.example.com/node-agent:v0.1.0 \
#     --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse --short HEAD) .

# Build: cgo with -tags libvirt_dlopen, as `make build`: node-agent links no
# libvirt, and its discovery helper node-agent-discover (libvirt.org/go/libvirt)
# loads libvirt.so.0 at run time, so it needs no libvirt headers here and runs
# (with labels from cpuid alone) where libvirt is missing.
# node-agent-coordinator, the Deployment's binary, links neither libvirt nor
# anything of the host. Built on bookworm's glibc (2.36), as `make image`
# builds on a bookworm host: the binaries run on the runtime's newer glibc.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG COMMIT=unknown
RUN CGO_ENABLED=1 go build -trimpath -tags libvirt_dlopen \
      -ldflags "-s -w -X github.com/node-agent/node-agent/pkg/version.Version=${VERSION} -X github.com/node-agent/node-agent/pkg/version.Commit=${COMMIT}" \
      -o /out/ ./cmd/node-agent ./cmd/node-agent-discover ./cmd/node-agent-coordinator

# Runtime: Debian trixie (libvirt 11.3, QEMU 10.0), with the packages of
# hack/image/packages.txt (libvirt0, the embedded QEMU driver and virsh; the
# file says why each is there). The QEMU driver will not start without the
# libvirt-qemu user and the kvm group: trixie's libvirt-daemon-driver-qemu
# creates both, and the RUN below makes sure of them, as hack/image.sh does.
FROM debian:trixie-slim
COPY hack/image/packages.txt /tmp/packages.txt
RUN apt-get update \
 && grep -v '^[[:space:]]*\(#\|$\)' /tmp/packages.txt | xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/packages.txt \
 && (getent group kvm >/dev/null || groupadd -r kvm) \
 && (getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu) \
 && (getent passwd libvirt-qemu >/dev/null || useradd -r -g libvirt-qemu -G kvm -d /nonexistent -s /usr/sbin/nologin libvirt-qemu)
# node-agent looks for its discovery helper beside itself;
# deploy/coordinator.yaml runs /usr/local/bin/node-agent-coordinator.
COPY --from=build /out/node-agent /out/node-agent-discover /out/node-agent-coordinator /usr/local/bin/

# root, on purpose. The shutdown guard takes a systemd-logind delay lock
# over the host's system bus (and, with
# shutdown.manageLogindConfig, asks systemd to make logind reload); logind and
# systemd allow both to uid 0 without a polkit rule. The embedded QEMU driver
# also runs as root and starts its QEMU probes as libvirt-qemu. The DaemonSet
# takes away what root does not need: it drops every capability but the seven
# the embedded driver uses, forbids privilege escalation and mounts the root
# filesystem read-only. The coordinator's Deployment runs the same image as
# uid 65532, with no capability: it only talks to the API server.
USER 0:0
ENTRYPOINT ["/usr/local/bin/node-agent"]
CMD ["run"]
