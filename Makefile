# tripswitch — see README.md. Every target installs what it needs itself.

# Every pinned version (Kubernetes, etcd, containerd, CoreDNS, pause, Helm,
# controller-tools, staticcheck): one file, which the scripts source too.
include hack/versions/versions.env
ASSETS               := $(CURDIR)/bin/k8s/$(KUBE_VERSION)
GO_TEST_FLAGS        ?=
# The end-to-end package runs the controller through outages, kills and
# half-open trials one after another (about 15 minutes on 2 busy cores):
# more than go test's default 10 minutes per package.
DEV_TEST_TIMEOUT     ?= 45m
# internal/controller's tests on the real API server took 485 s alone and
# 777 s beside nine other packages with -race on 2 busy cores (load 12):
# past go test's default 10 minutes per package.
ROOT_TEST_TIMEOUT    ?= 30m
# Library modules: each its own go.mod, so a user of one pulls in only what
# it needs (see docs/library.md, "Modules").
LIB_MODULES          := breaker limit breakerhttp breakergrpc breakerprom accessgate accessgateprom examples
# The modules that keep Helm, kustomize, the Prometheus server, gonum/plot
# and go-containerregistry out of the controller's module graph: the
# end-to-end and release tests, the release tool, the cluster and the demo
# command.
DEV_MODULES          := test hack/release hack/cluster cmd/tripswitch-demo

CONTROLLER_GEN := go run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

# How `make test` gets the cluster test/cluster runs in: auto brings one up
# if none runs and takes it down after (one it found running stays), use
# requires a running one, skip leaves test/cluster out and says so.
CLUSTER              ?= auto

.PHONY: all help tools helm test test-short test-e2e test-versions adversary test-cluster cluster-tools cluster cluster-down cluster-images cluster-sample cluster-sample-down demo-cluster lint generate verify build release demo run bench harness

# The end-to-end packages of the test module: the controller as a process,
# Helm and kustomize installs, failover. They take most of `make test`'s time.
E2E_PACKAGES := ./e2e/... ./deploy/...

all: lint test

## help: list the targets, one line each
help:
	@grep -hE '^## [a-z0-9-]+:' $(MAKEFILE_LIST) | sed -e 's/^## //' -e 's/: /\t/' | awk -F'\t' '{printf "  %-14s %s\n", $$1, $$2}'

## tools: build kube-apiserver and etcd from Go modules into bin/k8s (cached by version; KUBE_VERSION=vX.Y.Z for another release)
tools:
	@hack/tools/build.sh $(KUBE_VERSION)

## helm: build the Helm CLI (HELM_VERSION of hack/versions/versions.env) from its Go module into bin/helm (cached by version)
helm:
	@hack/tools/build-helm.sh

## test: build the control plane if needed, then run every test of every module with the race detector, the compatibility suite on the oldest supported Kubernetes, test/cluster on `make cluster` (CLUSTER=skip: without it)
test: tools
	KUBEBUILDER_ASSETS=$(ASSETS) go test -race -timeout $(ROOT_TEST_TIMEOUT) $(GO_TEST_FLAGS) ./...
	@set -e; for m in $(DEV_MODULES); do echo "== module $$m"; (cd $$m && KUBEBUILDER_ASSETS=$(ASSETS) go test -race -timeout $(DEV_TEST_TIMEOUT) $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /test/cluster)); done
	@echo "== the compatibility suite on the oldest supported Kubernetes (every test above ran on $(KUBE_VERSION))"
	go run ./hack/compat -releases oldest -check-table docs/install.md
	@$(MAKE) --no-print-directory test-cluster
	@set -e; for m in $(LIB_MODULES); do echo "== module $$m"; (cd $$m && go test -race $(GO_TEST_FLAGS) ./...); done
	@echo "== module breaker, without the race detector (its timings and 10,000-goroutine tests)"; cd breaker && go test $(GO_TEST_FLAGS) ./...
	@echo "== module limit, without the race detector"; cd limit && go test $(GO_TEST_FLAGS) ./...
	@echo "== module bench: the slow-dependency harness's short run"; cd bench && go test -race $(GO_TEST_FLAGS) ./...

## test-short: the inner loop: every module's tests except the end-to-end packages (test/e2e, test/deploy, test/cluster)
test-short: tools
	KUBEBUILDER_ASSETS=$(ASSETS) go test -race -timeout $(ROOT_TEST_TIMEOUT) $(GO_TEST_FLAGS) ./...
	cd test && KUBEBUILDER_ASSETS=$(ASSETS) go test -race $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /test/e2e -e /test/deploy -e /test/cluster)
	@set -e; for m in $(LIB_MODULES); do echo "== module $$m"; (cd $$m && go test -race $(GO_TEST_FLAGS) ./...); done

## test-e2e: only the end-to-end packages, against the real API server
test-e2e: tools
	cd test && KUBEBUILDER_ASSETS=$(ASSETS) go test -race -timeout $(DEV_TEST_TIMEOUT) $(GO_TEST_FLAGS) $(E2E_PACKAGES)

## adversary: search new sequences for a broken safety promise (SEEDS=sequences, STEPS=average steps each, SEED=first seed, 0 random; prints the seed and the shortest failing sequence)
SEEDS ?= 100
STEPS ?= 25
SEED  ?= 0
adversary: tools
	cd test && KUBEBUILDER_ASSETS=$(ASSETS) RAPID_CHECKS=$(SEEDS) RAPID_STEPS=$(STEPS) RAPID_SEED=$(SEED) RAPID_SHRINKTIME=30m \
		go test -count=1 -timeout 12h -run TestAdversary -v ./adversary/

## test-versions: the compatibility suite on every Kubernetes minor from the oldest supported to KUBE_VERSION (builds each control plane not cached, ~3.5 min each; then ~3 min of checks each on 2 cores; writes docs/install.md's table)
test-versions:
	go run ./hack/compat -releases all -table docs/install.md

## test-cluster: test/cluster on the local cluster (CLUSTER=auto brings one up and takes it down after; use: a running one; skip: say so and pass)
test-cluster: cluster-tools helm
	@CLUSTER=$(CLUSTER) GO_TEST_FLAGS="$(GO_TEST_FLAGS)" hack/cluster/test.sh

## cluster-tools: build what `make cluster` runs (controller manager, scheduler, kubelet, kube-proxy, kubectl, containerd, CoreDNS, pause; cached by version)
cluster-tools: tools
	@hack/tools/build-cluster.sh
	@cd hack/cluster && go build -o $(CURDIR)/bin/cluster ./cmd/cluster

## cluster: a single-node Kubernetes (KUBE_VERSION of hack/versions/versions.env) as local processes (root); returns once the node is Ready and DNS answers
cluster: cluster-tools
	bin/cluster up

## cluster-images: build the controller image (make release for linux/amd64) and the sample webhook's, and import both into the running cluster
# The image tag the chart's local values name (hack/cluster/values-local.yaml).
LOCAL_VERSION := $(shell sed -n 's/^  tag: //p' hack/cluster/values-local.yaml)
cluster-images:
	@$(MAKE) --no-print-directory release VERSION=$(LOCAL_VERSION) PLATFORMS=linux/amd64 RELEASE_OUT=out/cluster-release
	bin/cluster import out/cluster-release/tripswitch-$(LOCAL_VERSION).oci.tar $(REPOSITORY):$(LOCAL_VERSION)
	cd test && CGO_ENABLED=0 go build -trimpath -o $(CURDIR)/bin/hookserver ./cluster/hookserver
	bin/cluster image tripswitch.test/hookserver:local bin/hookserver

## demo-cluster: `make demo`'s experiment in `make cluster` (brought up and taken down if none runs): the webhook a Deployment behind a Service, tripswitch installed by Helm
demo-cluster: cluster-tools helm
	@hack/cluster/demo.sh

## cluster-sample: the sample webhook of config/samples/cluster in the running cluster (certificate, Secret, Deployment, Service, PDB, configuration, breaker); cluster-sample-down deletes it
cluster-sample:
	@hack/cluster/sample.sh
cluster-sample-down:
	@DOWN=1 hack/cluster/sample.sh

## cluster-down: stop the cluster, remove everything it made, and check that nothing is left
cluster-down:
	@cd hack/cluster && go build -o $(CURDIR)/bin/cluster ./cmd/cluster
	bin/cluster down

## lint: gofmt, go vet and staticcheck
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@set -e; for m in $(LIB_MODULES) $(DEV_MODULES) bench; do echo "== module $$m"; (cd $$m && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...); done

## bench: tripswitch's breaker and limits and their peers, side by side, at GOMAXPROCS 1, 2, 4 and 8 (on however many cores the machine has)
bench:
	cd bench && go test -run '^$$' -bench . -benchmem -cpu 1,2,4,8 -count 6 -benchtime 500ms
	cd breaker && go test -run '^$$' -bench 'FailureCost|Memory' -benchmem -cpu 1,2 -count 3 -benchtime 500ms

## harness: the slow-dependency scenario (10 ms → 2 s, 500 callers) through no limit, a bulkhead, the adaptive limit and failsafe-go's, with and without a circuit (about 18 minutes)
harness:
	cd bench && go run ./harness -sweep 10,20,40,80

## generate: deepcopy, CRD and RBAC from the API types and markers; the chart's copies of them
generate:
	@mkdir -p charts/tripswitch/crds charts/tripswitch/files
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=tripswitch-manager paths=./internal/controller/... output:rbac:artifacts:config=config/rbac
	cp config/crd/bases/*.yaml charts/tripswitch/crds/
	cp config/rbac/role.yaml charts/tripswitch/files/manager-role.yaml
	cp config/admission-guard/guard.yaml charts/tripswitch/files/admission-guard.yaml
	cp config/prometheus/rules.yaml charts/tripswitch/files/prometheus-rules.yaml
	cp config/prometheus/dashboard.json charts/tripswitch/files/dashboard.json

## verify: fail if `make generate` changes anything (compares the tree before and after)
verify:
	@before=$$(git status --porcelain -- api config charts; git diff -- api config charts); \
	$(MAKE) --no-print-directory generate >/dev/null; \
	after=$$(git status --porcelain -- api config charts; git diff -- api config charts); \
	if [ "$$before" != "$$after" ]; then echo "make generate changed generated files; run it and commit the result:"; git status --short -- api config charts; exit 1; fi; \
	echo "generated files are current"

## build: the static manager binary with the image's flags; checks it is static and runs --version
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
build:
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/tripswitch ./cmd/tripswitch
	go run ./hack/checkstatic bin/tripswitch
	bin/tripswitch --version

## release: image index (amd64+arm64, or PLATFORMS=linux/amd64 for a local cluster), chart, install.yaml and SHA256SUMS in dist/ (VERSION=vX.Y.Z, offline)
REPOSITORY ?= ghcr.io/tripswitch-dev/tripswitch
PLATFORMS  ?= linux/amd64,linux/arm64
RELEASE_OUT ?= dist
release:
	@case "$(VERSION)" in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "make release needs VERSION=vX.Y.Z (got $(VERSION))"; exit 1;; esac
	cd hack/release && go build -o $(CURDIR)/bin/release .
	bin/release -version $(VERSION) -repository $(REPOSITORY) -platforms $(PLATFORMS) -out $(RELEASE_OUT)

## demo: the delayed-webhook experiment on a real API server (Ignore, Bypass, then Ignore with the API server signal)
demo: tools
	cd cmd/tripswitch-demo && go build -o $(CURDIR)/bin/tripswitch-demo .
	KUBEBUILDER_ASSETS=$(ASSETS) bin/tripswitch-demo --out out/demo

## run: run the controller against the current kubeconfig (CRD must be installed)
run:
	go run ./cmd/tripswitch --leader-elect=false --metrics-secure=false --metrics-bind-address=:8080
