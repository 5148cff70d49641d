# caddy-dicer developer tasks. `make help` lists them.
SHELL := /bin/bash
CADDY_VERSION ?= v2.11.9
XCADDY_VERSION ?= v0.4.5
GOLANGCI_VERSION ?= v2.15.0
MODULE := github.com/caddy-dicer/caddy-dicer
# make fuzz runs each fuzz target for FUZZTIME; FUZZFLAGS adds go test flags
# (e.g. -parallel=1).
FUZZTIME ?= 30s
FUZZFLAGS ?=
FUZZ_TARGETS := \
	FuzzParse:./selector \
	FuzzHost:./internal/catalog \
	FuzzWildcardMatch:./internal/catalog \
	FuzzParseToken:./internal/dicer \
	FuzzTranslate:./internal/docker \
	FuzzUpstreamsCaddyfile:. \
	FuzzPermissionCaddyfile:. \
	FuzzHostMatchesCaddy:. \
	FuzzPathMatch:.
# xcaddy resolves an unpublished module only at the zero pseudo-version.
LOCAL_MODULE := $(MODULE)@v0.0.0-00010101000000-000000000000=$(CURDIR)

.PHONY: engine29-bin test-engine29 help test test-short lint fmt build bench load load-base example test-e2e test-e2e-noswarm test-e2e-swarm test-bins test-cluster generate fuzz image test-compose test-podman test-engine29 test-acme test-dns soak soak-short

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: ## vet and run every test with the race detector
	go vet ./...
	go test -race -count=1 -timeout 30m ./...

test-short: ## the hermetic unit tests only (go test -short): no Docker Engine, no root, no fixed port
	go vet ./...
	go test -short -count=1 ./...

# The e2e packages' environment: which Caddy builds they run.
E2E_ENV = CADDY_DICER_E2E_PLAIN_CADDY=$(CURDIR)/bin/caddy CADDY_DICER_E2E_CADDY=$(CURDIR)/bin/image/caddy/caddy \
	CADDY_DICER_E2E_L4_CADDY=$(CURDIR)/bin/image/caddy/caddy CADDY_DICER_E2E_STATIC_CADDY=$(CURDIR)/bin/image/caddy/caddy CADDY_VERSION=$(CADDY_VERSION) XCADDY_VERSION=$(XCADDY_VERSION)

test-e2e: test-e2e-noswarm test-e2e-swarm ## end-to-end: build Caddy with xcaddy, run it against a simulated Dicer host in a network namespace (root), and in a container on a single-node Docker swarm the test makes and leaves; several Caddys as one fleet (e2e/fleet, on bin/caddy)

test-e2e-noswarm: bin/caddy bin/image/caddy/caddy ## the e2e packages that need no swarm (all but e2e/swarm and e2e/engine): beside test-e2e-swarm and make test (the Caddys of both follow only their own test process's containers: CADDY_DICER_FOLLOW, R2g), not beside a target whose Caddys follow every container (test-compose, test-acme, soak)
	go vet -tags e2e ./e2e/...
	$(E2E_ENV) go test -tags e2e -count=1 -v -p 1 -timeout 20m $$(go list -tags e2e ./e2e/... | grep -v -e '/e2e/engine$$' -e '/e2e/swarm$$')

test-e2e-swarm: bin/caddy bin/image/caddy/caddy ## e2e/swarm: Caddy in a container on a single-node swarm of this Engine, made and left by the test (not beside test-cluster, which makes its own)
	go vet -tags e2e ./e2e/swarm/
	$(E2E_ENV) go test -tags e2e -count=1 -v -timeout 20m ./e2e/swarm/

test-cluster: ## a real three-node swarm on this machine (root): this Engine as manager, two dockerd's in network namespaces as workers; crash, cut, drain, rolling update under load through Caddy; leaves nothing behind (docs/cluster.md)
	./e2e/cluster/run.sh

lint: ## golangci-lint with the committed .golangci.yml
	go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION) run ./...

fmt: ## format the code (gofmt -s)
	gofmt -s -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

test-bins: bin/caddy bin/image/caddy/caddy bin/dicer-testd ## every binary the e2e targets run, built once (what .ci/run builds before its lanes start)

build: bin/caddy bin/dicer-testd ## build bin/caddy (Caddy with the plugin) with xcaddy, as users do; only when something changed

# What the binaries are built from: a change to any of these (or to the
# versions in bin/.versions) rebuilds them, nothing else does.
GO_SOURCES := $(shell find . -name '*.go' -not -name '*_test.go' -not -path './bin/*' -not -path './.git/*' -not -path './example/*')
VERSIONS_STAMP := bin/.versions

# The stamp is rewritten only when the versions differ from those it holds,
# so that its date says when they last changed.
$(VERSIONS_STAMP): FORCE
	@mkdir -p bin
	@echo 'CADDY_VERSION=$(CADDY_VERSION) XCADDY_VERSION=$(XCADDY_VERSION)' | cmp -s - $@ || \
		echo 'CADDY_VERSION=$(CADDY_VERSION) XCADDY_VERSION=$(XCADDY_VERSION)' >$@

bin/caddy: $(GO_SOURCES) go.mod go.sum $(VERSIONS_STAMP)
	go run github.com/caddyserver/xcaddy/cmd/xcaddy@$(XCADDY_VERSION) build $(CADDY_VERSION) \
		--with $(LOCAL_MODULE) --output bin/caddy

bin/dicer-testd: $(GO_SOURCES) go.mod go.sum
	go build -o bin/dicer-testd ./cmd/dicer-testd

.PHONY: FORCE
FORCE:

# The Docker-only quick start's images, built from what is here: no base
# image is pulled.
IMAGE ?= caddy-dicer:local
DEMO_IMAGE ?= caddy-dicer-demo:local
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt

image: bin/image/caddy/caddy bin/image/demo/hello ## build the images of example/compose: Caddy with the plugin (static, FROM scratch, CA certificates) and the demo service
	@[ -r $(CA_CERTS) ] || { echo "no CA certificates at $(CA_CERTS); set CA_CERTS" >&2; exit 1; }
	cp $(CA_CERTS) bin/image/caddy/ca-certificates.crt
	cp example/compose/caddy.Dockerfile bin/image/caddy/Dockerfile
	cp example/compose/Caddyfile bin/image/caddy/Caddyfile
	docker build -q -t $(IMAGE) bin/image/caddy
	cp example/compose/demo.Dockerfile bin/image/demo/Dockerfile
	docker build -q -t $(DEMO_IMAGE) bin/image/demo

# With caddy-l4 and our layer4 package, for e2e/swarm's dicer_proxy route:
# the unversioned --replace lets xcaddy take layer4 from this checkout.
bin/image/caddy/caddy: $(GO_SOURCES) go.mod go.sum $(VERSIONS_STAMP)
	mkdir -p $(@D)
	CGO_ENABLED=0 go run github.com/caddyserver/xcaddy/cmd/xcaddy@$(XCADDY_VERSION) build $(CADDY_VERSION) \
		--with $(LOCAL_MODULE) --with github.com/mholt/caddy-l4@v0.1.2 \
		--replace $(MODULE)=$(CURDIR) --with $(MODULE)/modules/l4dicer --output $@

bin/image/demo/hello: $(GO_SOURCES) go.mod go.sum
	mkdir -p $(@D)
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o $@ ./internal/dockertest/helloserver

test-compose: image ## the Docker-only quick start with docker-compose: loads as Compose v2 loads it; up, routed, scaled to 2, down, nothing left; and docs/migrating.md's Compose files, read from the page, each up, routed through Caddy, down (R2f)
	cd example/compose/v2check && go run . ../compose.yaml
	./example/compose/test.sh
	IMAGE=$(IMAGE) DEMO_IMAGE=$(DEMO_IMAGE) ./docs/migrating_compose.sh

fuzz: ## run every fuzz target for FUZZTIME each (default 30s), one after the other
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $${t%%:*} ($${t#*:})"; \
		go test -run='^$$' -fuzz="^$${t%%:*}\$$" -fuzztime=$(FUZZTIME) $(FUZZFLAGS) $${t#*:}; \
	done

bench: ## run the benchmarks
	go test -run='^$$' -bench=. -benchmem ./...

# make bench-base compares with BASE (default: the commit before the
# identity placeholders); BENCH is go test -bench's pattern.
BASE ?= $(shell git log --format=%H -- identity.go | tail -1)^
BENCH ?= ^(BenchmarkGetUpstreams|BenchmarkRequestPath)$$
.PHONY: bench-base
bench-base: ## the request path benchmarks here and at BASE=<commit>, alternately in one run (COUNT=6), as a benchstat table
	./bench/sidebyside.sh '$(BASE)' '$(BENCH)'

load: build ## load through bin/caddy with wrk: dicer routes vs a static upstream list
	./bench/load.sh

# make load-base compares Caddy's CPU per request on a dynamic route with
# a static one, here and at BASE=<commit> given on the command line or in
# the environment (default e790bcf, before the identity records, the
# per-instance metrics and the in-flight counting), in one run.
LOAD_BASE = $(if $(filter command line environment,$(origin BASE)),$(BASE),e790bcf)
.PHONY: load-base
load-base: build ## Caddy's CPU per request, `dynamic dicer app=web 8080` over static, here, at BASE=<commit> (default e790bcf) and for Caddy's own dynamic path (the floor) in one run (bench/cpu.sh: PAIRS, LOAD, CONTROL, EXTRA)
	./bench/cpu.sh '$(LOAD_BASE)'

example: build ## run bin/caddy on example/Caddyfile in front of the test daemon; bin/dicer-testd run, stop, start, standby, rm, ls change its instances
	./example/run.sh

generate: ## regenerate the protobuf code (needs protoc, protoc-gen-go, protoc-gen-go-grpc)
	go generate ./internal/dicerpb

.PHONY: test-realapps
test-realapps: ## the zero-downtime and scale-to-zero tests against real apps (nginx, websocketd, a slow-to-answer app) in an image built here from Debian packages with debootstrap (root; docs/realapps.md)
	go vet ./e2e/engine
	CADDY_DICER_REALAPPS=1 go test -race -count=1 -v -run '^TestRealApps_' -timeout 30m ./e2e/engine

test-podman: ## the Docker backend's Engine tests against Podman from Debian (root): rootful on a socket of its own and rootless as an unprivileged user (MODES=rootful or MODES=rootless for one); starts Podman's API service itself and removes all it made (docs/podman.md)
	MODES="$(or $(MODES),rootful rootless)" ./e2e/podman/run.sh
# The Engine suite's package: one line to change when it moves
ENGINE_SUITE ?= ./e2e/engine
engine29-bin: ## build (once per version) Docker Engine 29's dockerd, docker-proxy and runc into bin/engine29, nothing run
	BUILD_ONLY=1 ./e2e/engine29/run.sh
test-engine29: ## the Docker backend's Engine tests against Docker Engine 29 (root): dockerd and runc built from their Go modules once per version (bin/engine29), run in a network namespace of their own beside this Engine (20.10), the test images loaded from it; a chosen subset (e2e/engine29/run.sh); removes all it made
	go vet ./internal/docker/ $(ENGINE_SUITE)
	ENGINE_PKG=$(ENGINE_SUITE) ./e2e/engine29/run.sh
test-acme: bin/caddy ## on-demand TLS through Pebble, a real ACME CA (Debian's pebble), in a network namespace (root): HTTP-01, TLS-ALPN-01, no orders for unclaimed names, no renewal after the last claim, obtain_on_claim (docs/acme.md)
	go vet -tags e2e ./e2e/acme/
	CADDY_DICER_ACME=1 CADDY_DICER_E2E_CADDY=$(CURDIR)/bin/caddy CADDY_VERSION=$(CADDY_VERSION) XCADDY_VERSION=$(XCADDY_VERSION) go test -tags e2e -count=1 -v -p 1 -timeout 15m ./e2e/acme/

test-dns: ## dns_records (R7e) against BIND 9 from Debian in a network namespace (root; bind9, bind9-dnsutils), with containers on the Engine through a Caddy in the test process: records of claimed hosts written by TSIG-signed RFC 2136 updates, removed after the grace period, hand-made ones and tenants' claims outside allow_suffix untouched (docs/dns-records.md)
	go vet ./modules/rfc2136/... ./internal/dnsrecords/
	go vet -tags e2e ./e2e/dns/
	CADDY_DICER_DNS=1 go test -race -count=1 -v -p 1 -timeout 5m -run 'R7e|DNS' . ./modules/rfc2136/... ./internal/dnsrecords/
	CADDY_DICER_DNS=1 go test -tags e2e -count=1 -v -timeout 5m -run 'R7e' ./e2e/dns/

# The soak (issue 42): a month of a busy operator in ten minutes on 2
# cores; SOAK_SCALE scales it (soak-short: 0.1, under 2 minutes).
SOAK_SCALE ?= 1
soak: build ## the soak, a month in ten minutes (root): three Caddys on one storage folder, the test daemon, the Engine and BIND; 10,000 deploys with runtime weights, 100 restarts, relabels with DNS records, heal cycles, a skewed clock, a 30 s storage outage, budgets; prints the table of what must stay flat (docs/benchmarks.md)
	go vet -tags soak ./e2e/soak/
	SOAK_SCALE=$(SOAK_SCALE) CADDY_DICER_SOAK_CADDY=$(CURDIR)/bin/caddy CADDY_DICER_SOAK_TESTD=$(CURDIR)/bin/dicer-testd \
		go test -tags soak -count=1 -v -timeout 20m -run '^TestSoak_' ./e2e/soak/

soak-short: ## the soak at a tenth (SOAK_SCALE=0.1), under 2 minutes, as .ci/run runs it (root)
	$(MAKE) soak SOAK_SCALE=0.1
