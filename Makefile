# mcpintercept — every target that touches the network needs root (network namespaces, netfilter).
GO      ?= go
BIN     := bin
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: all build deps demo-deps demo-build test test-unit test-e2e generate lab-up lab-down demo bench soak fuzz vet clean deb dist

all: build

# The version `mcpintercept version` and `declare` report: the .deb's (packaging/build.sh version,
# from git describe); a plain `go build` says devel and its VCS revision instead.
VERSION ?= $(shell packaging/build.sh version 2>/dev/null || echo devel)

# Every build of mcpintercept (make build, make demo) is stamped with it.
LDFLAGS := -X main.version=$(VERSION)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/mcpintercept ./cmd/mcpintercept
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/mcpintercept-cni ./cmd/mcpintercept-cni

# Installs what a fresh Debian machine lacks (apt, npm, Go modules, bin/jaeger, bin/dex) for the tests
# and the benchmark; quick and quiet when all is present.
deps:
	scripts/deps.sh all

# Only what the demo uses (apt packages for the lab, the Node peers in e2e/node). scripts/demo.sh
# installs them itself (the Node peers alongside the Go build).
demo-deps:
	scripts/deps.sh demo

# The demo's binaries in one go build, into bin/demo/: mcpintercept, stamped as by `make build`,
# and the Go SDK peers. mcpintercept is built without what the demo never uses, the node agent's
# Kubernetes client and the OpenTelemetry exporters (gRPC) — with them, a cold build on 2 cores
# takes a third longer — and, as the .deb's binary is (packaging/build.sh), static (CGO_ENABLED=0:
# no C compiler run for net, os/user and runtime/cgo) and without debug symbols; `make build`
# builds the full binary into bin/.
# The first time, the standard library compiles while the modules download.
DEMO_TAGS := nonodeagent,notracing
DEMO_PKGS := ./cmd/mcpintercept ./e2e/peers/mcpserver ./e2e/peers/mcpclient
DEMO_STD  := net/http crypto/tls crypto/x509 crypto/pbkdf2 encoding/json encoding/xml encoding/gob \
	encoding/base32 log/slog os/exec os/signal os/user text/template text/tabwriter compress/gzip \
	compress/zlib regexp flag go/format debug/elf runtime/pprof runtime/metrics runtime/debug \
	database/sql expvar hash/fnv hash/maphash io/ioutil embed
demo-build:
	@echo "demo: building mcpintercept for the demo and the Go SDK peers into $(BIN)/demo/ (the first time, on an empty Go cache: about a minute and a half on 2 cores)..." >&2
	@CGO_ENABLED=0 $(GO) build -tags $(DEMO_TAGS) $(DEMO_STD) & std=$$!; \
		CGO_ENABLED=0 $(GO) list -deps -tags $(DEMO_TAGS) $(DEMO_PKGS) >/dev/null; rc=$$?; wait $$std; [ $$rc = 0 ]
	CGO_ENABLED=0 $(GO) build -tags $(DEMO_TAGS) -ldflags "$(LDFLAGS) -s -w" -o $(BIN)/demo/ $(DEMO_PKGS)

# The whole suite CI runs: unit tests, fuzz regressions (committed corpora), and the end-to-end lab
# tests with real MCP peers (root required; they skip with a message otherwise).
test: deps
	$(GO) vet ./...
	$(GO) vet -tags $(DEMO_TAGS) ./cmd/mcpintercept ./tracing/
	$(GO) test -count=1 -tags $(DEMO_TAGS) ./tracing/
	$(GO) test -count=1 -timeout 40m ./...

test-unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /e2e)

test-e2e: deps
	$(GO) test -count=1 -timeout 40m -v ./e2e/

generate:
	$(GO) generate ./...

lab-up:
	scripts/lab.sh up

lab-down:
	scripts/lab.sh down

# The lab demo: real MCP server, real clients, real interception, flow log printed. It installs only
# what it uses (demo-deps); scripts/demo.sh builds its binaries (demo-build), then runs the lab.
demo:
	scripts/demo.sh

# Go micro-benchmarks, then the lab benchmark (scripts/bench.sh, root): requests/s, p50, p99 and the
# proxy's CPU against a fast origin — direct, HAProxy and a minimal Go relay as references,
# mcpintercept opaque, passthrough, Level 1 (plaintext and terminate) — medians of three rounds, plus
# the added p99 at a fixed 1000 req/s. BENCH_SDK=1 adds the Go SDK server set (each mechanism, the
# latency pass, TLS handshakes; scripts/bench-sdk.sh). The lab part holds /tmp/mcpi-lab.lock.
bench: deps build
	$(GO) test -run '^$$' -bench . -benchmem ./engine/ ./exchange/ ./level1/ ./policy/ ./pki/ ./tlsmitm/ ./telemetry/
	$(GO) test -run '^$$' -bench ConnectRedirect -benchtime 2000x ./intercept/
	scripts/bench.sh

# The fault soak (scripts/soak.sh, root): load through terminate + Level 2 with audit, tool pins and
# tracing while the upstream resets and hangs, the audit disk fills, SIGHUPs, a kill -9 and the
# collector going down; a table of checks, non-zero on a failure. DURATION (30m; 3m for a quick run).
soak: deps
	scripts/soak.sh

# Every fuzz target for FUZZTIME each (the committed corpora also run in `make test`).
FUZZTIME ?= 30s
fuzz:
	@set -e; for t in config:FuzzParse config:FuzzParsePartial nodeagent:FuzzParseObject nodeagent/cniproto:FuzzDecodeRequest intercept/dns:FuzzHashAssign tlsmitm:FuzzPeek tlsmitm:FuzzParseClientHello \
		exchange/httptok:FuzzForEachToken exchange:FuzzReadRequestHead exchange:FuzzReadResponseHead exchange:FuzzProxy exchange:FuzzSSE \
		exchange:FuzzFramingDifferential exchange:FuzzTransferCodings auth:FuzzSplitHeader auth:FuzzCarriers audit:FuzzCheckpointExtensions audit:FuzzLastNote appliance:FuzzElideCEL appliance:FuzzElideURL telemetry:FuzzAdminHost \
		mcp:FuzzDecodeHeaderValue mcp:FuzzRedactURI level1:FuzzGuards policy:FuzzCompile \
		mcp:FuzzDecode mcp:FuzzSkipString mcp:FuzzCheckResult audit:FuzzDecodeRecord auth:FuzzParse level2:FuzzDecodeBody level2:FuzzStage level2:FuzzListFilter level2:FuzzRedact \
		level2:FuzzPeerDifferential level2:FuzzCaseVariant level2:FuzzMessageCaseVariant level2:FuzzProgressKey level2:FuzzSchema intercept/upstream:FuzzDenyListEmbedded \
		cmd/mcpintercept:FuzzParseReport telemetry:FuzzFlowRecordEncoding intercept/dns:FuzzDNSQuery \
		integrity:FuzzCanonical integrity:FuzzScan integrity:FuzzPinFile integrity:FuzzStateFile appliance:FuzzApproveBody \
		cmd/mcpintercept:FuzzSafe cmd/mcpintercept:FuzzAdminURL cmd/mcpintercept:FuzzReadRecords \
		tracing:FuzzEndpoint tracing:FuzzParent level2:FuzzInjectMeta appliance:FuzzParseObserveQuery; do \
		pkg=$${t%%:*}; fn=$${t#*:}; echo "fuzz: $$fn ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./$$pkg/; done

vet:
	$(GO) vet ./...

# The Debian package (packaging/build.sh, dpkg-deb): static binary, hardened systemd unit, example
# configs as conffiles, service user, postinst that starts nothing. bin/mcpintercept_VERSION_ARCH.deb,
# VERSION from `git describe`.
deb:
	packaging/build.sh deb bin

# The .deb, a tarball of the same files (bin/mcpintercept-VERSION-linux-ARCH.tar.gz) and bin/SHA256SUMS.
dist:
	packaging/build.sh dist bin

clean:
	rm -rf $(BIN)
