# node-agent Makefile. Every target installs what it needs through hack/
# scripts, so `make demo` and `make test` work on a fresh machine.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO        ?= go
BIN       := $(CURDIR)/bin
# libvirt_dlopen is libvirt.org/go/libvirt's own tag: the binding then loads
# libvirt.so.0 with dlopen at its first call instead of linking it, so the
# discovery helper (bin/node-agent-discover, the only binary that links the
# binding) builds without libvirt's headers and runs, with labels from cpuid
# alone, where libvirt is missing. bin/node-agent links no libvirt either way.
GOTAGS    := libvirt_dlopen
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/node-agent/node-agent/pkg/version.Version=$(VERSION) \
             -X github.com/node-agent/node-agent/pkg/version.Commit=$(COMMIT)
TEST_TIMEOUT ?= 45m
FUZZTIME  ?= 60s
# How long `make test` fuzzes each target.
TEST_FUZZTIME ?= 8s

# The Kubernetes release of the test bed's control plane (kube-apiserver,
# kube-controller-manager, kube-scheduler): empty for the default
# (hack/build-tools.sh k8s_version, 1.36), or the newer release it builds
# beside it: `make test K8S_VERSION=v1.37.2` runs every test against that.
# The tests of 1.37's own APIs use it either way.
K8S_VERSION ?=
export NODE_AGENT_K8S_VERSION := $(K8S_VERSION)

export CGO_ENABLED := 1
# Tests find the control-plane binaries here.
export NODE_AGENT_BIN_DIR := $(BIN)

# Only the discovery helper links libvirt (cgo). The agent and the
# coordinator are static: no libc mapped into a daemon that runs on every
# node (1.5 MiB less idle RSS, issue 43).
.PHONY: build
build: ## Build bin/node-agent, its discovery helper bin/node-agent-discover and bin/node-agent-coordinator, stripped as in the image
	$(GO) build -trimpath -tags $(GOTAGS) -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/ ./cmd/node-agent-discover
	CGO_ENABLED=0 $(GO) build -trimpath -tags $(GOTAGS) -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/ ./cmd/node-agent ./cmd/node-agent-coordinator

.PHONY: deps
deps: ## Install the Debian packages tests need (only the missing ones)
	hack/install-deps.sh

.PHONY: tools
tools: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler (1.36, and 1.37 into bin/k8s-v1.37.2/), kubectl, kubelet, kwok, prometheus, promtool, alertmanager and helm into bin/ (cached), with the Prometheus Operator CRDs
	hack/build-tools.sh

.PHONY: image
image: deps ## Build node-agent's container image without a container engine into bin/node-agent-image.tar (reproducible)
	hack/image.sh

.PHONY: rootfs
rootfs: deps ## Build the cached systemd rootfs for the end-to-end tests
	hack/rootfs.sh

# The packages and tests that discover the host CPU: `make test` runs them a
# second time with /dev/kvm hidden (hack/without-kvm.sh), because machines of
# this kind differ in having it.
DISCOVERY_PKGS  := ./cmd/... ./pkg/hostcpu/... ./pkg/labeller/...
DISCOVERY_TESTS := ^(TestLabelsCommandModelFamilies|TestLabelsWithoutLibvirt|TestLabellerSurvivesBrokenDiscovery)$$

# The property test's seed (test/property). `make test` replays seed
# 8598199887424005749, with which the drain's hand-over between a reboot and
# a maintenance failed (a drain that had just succeeded resumed from a stale
# cache; another request's drain waiting for ever behind the reboot's slot).
# Both are fixed and it passes now, as does 4486096272781511898, pinned
# before. PROPERTY_SEED= (empty) draws a new seed each run.
PROPERTY_SEED ?= 8598199887424005749
export PROPERTY_SEED

.PHONY: test
test: deps tools build image rootfs ## Run every test: unit, integration (real control plane, real libvirt), the image's discovery in its own root filesystem, real node (kubelet, containerd) and end-to-end (real systemd); discovery again with /dev/kvm hidden
	NODE_AGENT_INTEGRATION=1 NODE_AGENT_E2E=1 $(GO) test -tags $(GOTAGS) -count=1 -timeout $(TEST_TIMEOUT) ./cmd/... ./pkg/... ./internal/... ./hack/...
	@echo "== every fuzz target (annotation, config, XML and answer parsers) for $(TEST_FUZZTIME); make fuzz runs them for $(FUZZTIME)"
	GO=$(GO) GOTAGS=$(GOTAGS) FUZZTIME=$(TEST_FUZZTIME) hack/fuzz.sh
	@echo "== discovery again, as on a host without /dev/kvm"
	hack/without-kvm.sh env NODE_AGENT_INTEGRATION=1 $(GO) test -tags $(GOTAGS) -count=1 -timeout $(TEST_TIMEOUT) $(DISCOVERY_PKGS)
	hack/without-kvm.sh env NODE_AGENT_INTEGRATION=1 NODE_AGENT_BINARY=$(BIN)/node-agent $(GO) test -tags $(GOTAGS) -count=1 -timeout $(TEST_TIMEOUT) -v -run '$(DISCOVERY_TESTS)' ./test/integration/
	@# The packages under test/ each start real control planes and containers;
	@# one at a time keeps a 2-core machine from timing them out.
	@# They all run bin/node-agent, built once above.
	NODE_AGENT_INTEGRATION=1 NODE_AGENT_E2E=1 NODE_AGENT_BINARY=$(BIN)/node-agent $(GO) test -tags $(GOTAGS) -count=1 -timeout $(TEST_TIMEOUT) -p 1 -v ./test/...

.PHONY: unit
unit: ## Run only the unit tests (-short: no libvirt, virsh, QEMU or dbus-daemon, no host devices, no root)
	$(GO) test -tags $(GOTAGS) -count=1 -short ./pkg/... ./cmd/... ./internal/...

# test/image runs `node-agent labels` and `virsh domcapabilities` in the
# image's root filesystem (the base `make image` caches), with and without
# /dev/kvm; `make test` runs it among test/... too.
.PHONY: image-test
image-test: deps image ## Run the image's CPU discovery in its own root filesystem (systemd-nspawn) and compare it with the image's virsh
	NODE_AGENT_INTEGRATION=1 $(GO) test -tags $(GOTAGS) -count=1 -timeout $(TEST_TIMEOUT) -v ./test/image/...

.PHONY: node-e2e
node-e2e: deps tools build image ## Run the shipped DaemonSet on a real kubelet with containerd and runc
	NODE_AGENT_INTEGRATION=1 $(GO) test -tags $(GOTAGS) -count=1 -timeout $(TEST_TIMEOUT) -v ./test/node/...

.PHONY: e2e
e2e: deps tools build rootfs ## Run the end-to-end tests in a systemd-nspawn container
	NODE_AGENT_E2E=1 NODE_AGENT_BINARY=$(BIN)/node-agent $(GO) test -tags $(GOTAGS) -count=1 -timeout $(TEST_TIMEOUT) -v ./test/e2e/...

# Drains per tool in `make bench`; issue 5 asks for at least 3. BENCH_FLAGS go
# to the benchmark, e.g. BENCH_FLAGS=-timeline prints each drain's requests.
BENCH_ROUNDS ?= 3
BENCH_FLAGS ?=

.PHONY: bench
bench: deps tools build rootfs ## Drain 110 pods with node-agent and with kubectl drain, alternating BENCH_ROUNDS times each; print times, ratio and API requests; then the footprint table
	NODE_AGENT_BINARY=$(BIN)/node-agent $(GO) test -tags $(GOTAGS) -count=1 -run '^$$' -bench '^BenchmarkDrain$$' \
	  -benchtime $(BENCH_ROUNDS)x -timeout $(TEST_TIMEOUT) -v ./test/bench/ $(BENCH_FLAGS)
	@# The footprint table: sizes, idle and peak memory, time to labels.
	NODE_AGENT_BINARY=$(BIN)/node-agent $(GO) test -tags $(GOTAGS) -count=1 -run '^$$' -bench '^BenchmarkFootprint$$' \
	  -benchtime 1x -timeout $(TEST_TIMEOUT) -v ./test/bench/

# The fleet benchmark's size and phases (see test/scale); SCALE_OUT is where
# its table (results.md) and pictures go.
SCALE_NODES  ?= 1000
SCALE_POOL   ?= 100
SCALE_LIMITS ?= 1,5,20
# The rolling maintenance of realistic drains, whose pods take 20 to 60 s to
# terminate: about ⌈SCALE_SLOW_POOL ÷ limit⌉ minutes per limit (16 minutes
# for both by default). SCALE_SLOW_LIMITS=0 leaves it out.
SCALE_SLOW_POOL   ?= 60
SCALE_SLOW_LIMITS ?= 5,20
SCALE_IDLE   ?= 10m
SCALE_OUT    ?= $(CURDIR)/docs/scale

.PHONY: scale
scale: deps tools build ## Run SCALE_NODES agents against as many kwok nodes on one control plane: joint start, idle, kured's lock pattern, rolling maintenances at SCALE_LIMITS (fast drains) and SCALE_SLOW_LIMITS (pods taking 20 to 60 s to terminate), kube-apiserver restart; writes SCALE_OUT/results.md and three PNGs
	NODE_AGENT_INTEGRATION=1 NODE_AGENT_BINARY=$(BIN)/node-agent SCALE_NODES=$(SCALE_NODES) SCALE_POOL=$(SCALE_POOL) \
	  SCALE_LIMITS=$(SCALE_LIMITS) SCALE_SLOW_POOL=$(SCALE_SLOW_POOL) SCALE_SLOW_LIMITS=$(SCALE_SLOW_LIMITS) SCALE_IDLE=$(SCALE_IDLE) SCALE_OUT=$(SCALE_OUT) \
	  $(GO) test -tags $(GOTAGS) -count=1 -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 150m -v ./test/scale/

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (hack/fuzz.sh)
	GO=$(GO) GOTAGS=$(GOTAGS) FUZZTIME=$(FUZZTIME) hack/fuzz.sh

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags $(GOTAGS) ./...
	hack/build-tools.sh staticcheck
	$(BIN)/staticcheck -tags $(GOTAGS) ./...

.PHONY: docs
docs: ## Regenerate docs/configuration.md, docs/metrics.md and docs/inputs.md from the code
	UPDATE_DOCS=1 $(GO) test -tags $(GOTAGS) -count=1 -run TestDocsUpToDate ./cmd/node-agent/ ./pkg/inputs/

# What `make demo` runs, and so all it builds: the control plane of the
# test bed (no kubectl, kubelet, 1.37 control plane, Prometheus,
# Alertmanager or Helm; `make test` builds those when it needs them) and
# libvirt for the host's CPU discovery.
DEMO_TOOLS := etcd kube-apiserver kube-controller-manager kube-scheduler kwok

.PHONY: demo
demo: build ## Start a local control plane with three kwok nodes and run node-agent for node-1 (builds only what it runs)
	hack/install-deps.sh libvirt
	hack/build-tools.sh $(DEMO_TOOLS)
	$(GO) run -tags $(GOTAGS) ./hack/demo

# Where `make install` puts the CLI: $(DESTDIR)$(PREFIX)/bin.
PREFIX  ?= /usr/local
DESTDIR ?=

.PHONY: install
install: build ## Install node-agent into $(PREFIX)/bin, and kubectl-node_agent beside it so that `kubectl node-agent ...` runs it as a kubectl plugin
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/node-agent $(DESTDIR)$(PREFIX)/bin/node-agent
	ln -sf node-agent $(DESTDIR)$(PREFIX)/bin/kubectl-node_agent
	@echo "installed $(DESTDIR)$(PREFIX)/bin/node-agent and the kubectl plugin $(DESTDIR)$(PREFIX)/bin/kubectl-node_agent (kubectl node-agent --help)"

.PHONY: clean
clean: ## Remove bin/ (the tool cache in ~/.cache/node-agent stays)
	rm -rf $(BIN)

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'
