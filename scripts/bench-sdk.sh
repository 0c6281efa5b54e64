#!/usr/bin/env bash
# The Go SDK server row set of `make bench` (BENCH_SDK=1 scripts/bench.sh, or run this directly):
# requests/s, p50 and p99 of MCP tools/call (1 KiB JSON bodies, keep-alive, 16 connections, fixed
# duration) from mcpi-client to a stateless Go SDK server in mcpi-server, directly and through each
# steering mechanism, disposition and level, in one run so the ratios compare like with like.
# Plaintext rows compare with direct plaintext, TLS rows with direct TLS. The SDK server saturates
# the two cores first, which hides the appliance's own cost: scripts/bench.sh's fast-origin set is
# the one that measures the appliance. MCPINTERCEPT_BIN=path uses a prebuilt binary.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ "$(id -u)" = 0 ] || { echo "bench: must run as root" >&2; exit 1; }
# The lab is shared with the e2e suite: one user of it at a time.
if [ -z "${MCPI_LAB_LOCK_HELD:-}" ]; then
	export MCPI_LAB_LOCK_HELD=1
	exec flock /tmp/mcpi-lab.lock "$0" "$@"
fi
DURATION=${DURATION:-10s}
CONNS=${CONNS:-16}
WORK=$(mktemp -d /tmp/mcpi-bench.XXXXXX)
APP_PID=
MCPI=${MCPINTERCEPT_BIN:-$ROOT/bin/mcpintercept}

finish() {
	[ -n "$APP_PID" ] && kill -TERM "$APP_PID" 2>/dev/null && wait "$APP_PID" 2>/dev/null || true
	ip netns exec mcpi-appliance "$MCPI" cleanup >/dev/null 2>&1 || true
	for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	scripts/lab.sh down >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap finish EXIT

[ -n "${MCPINTERCEPT_BIN:-}" ] || go build -o bin/mcpintercept ./cmd/mcpintercept
go build -o bin/ ./e2e/peers/mcpserver ./e2e/peers/loadgen ./e2e/peers/tlsprobe
scripts/lab.sh up >/dev/null
PKI=$ROOT/.lab/pki

ip netns exec mcpi-server bin/mcpserver -stateless -listen '10.200.2.2:8080' >"$WORK/server.out" 2>/dev/null &
ip netns exec mcpi-server bin/mcpserver -stateless -listen '10.200.2.2:8443,10.200.2.2:9443,[fd00:200:2::2]:8443' \
	-tls-cert "$PKI/server.pem" -tls-key "$PKI/server-key.pem" >"$WORK/tlsserver.out" 2>/dev/null &
for i in $(seq 1 100); do grep -qs READY "$WORK/server.out" && grep -qs READY "$WORK/tlsserver.out" && break; sleep 0.1; done

base='mechanism: nftables-tproxy
listen: {port: 15001}
intercept:
  destinations: [10.200.2.0/24, "fd00:200:2::/64"]
  ports: [8080, 8443, 9443]
admin: {listen: "off"}
log: {flows: "off"}'
printf '%s\n' "$base" >"$WORK/core.yaml"
cat >"$WORK/routes.yaml" <<YAML
$base
ca: {dir: $WORK/ca}
upstream_tls: {extra_cas: [$PKI/server-ca.pem]}
routes:
  - {name: l1-plain, match: {ports: [8080]}, tls: plaintext, level: 1, development: true, rule_set: bench}
  - {name: terminate, match: {ports: [8443]}, tls: terminate, level: 1, rule_set: bench}
  - {name: passthrough, match: {ports: [9443]}, tls: passthrough}
rule_sets:
  bench:
    - name: deny-denied-tools
      when: 'mcp.method == "tools/call" && mcp.name.startsWith("denied_")'
      action: deny
YAML

load() { # label url [extra loadgen args]
	local label=$1 url=$2
	shift 2
	echo "bench: $label ($DURATION, $CONNS connections)..." >&2
	ip netns exec mcpi-client bin/loadgen -url "$url" -conns "$CONNS" -duration "$DURATION" \
		-warmup 2s -body-size 1024 -mcp-version 2025-06-18 -label "$label" "$@" >>"$RESULTS"
}

appliance() { # config mechanism
	ip netns exec mcpi-appliance "$MCPI" run --config "$1" --mechanism "$2" >/dev/null 2>"$WORK/app.log" &
	APP_PID=$!
	for i in $(seq 1 100); do grep -q msg=ready "$WORK/app.log" && return 0; sleep 0.1; done
	cat "$WORK/app.log" >&2
	return 1
}
stop_appliance() { kill -TERM "$APP_PID"; wait "$APP_PID" || true; APP_PID=; }

PLAIN=http://10.200.2.2:8080/mcp
run_pass() { # results-file
	RESULTS=$1
	load direct "$PLAIN"
	for m in nftables-tproxy iptables-redirect; do
		appliance "$WORK/core.yaml" "$m"
		load "$m" "$PLAIN"
		stop_appliance
	done
	appliance "$WORK/routes.yaml" nftables-tproxy
	load "level1 (tproxy)" "$PLAIN"
	stop_appliance

	# eBPF: the appliance runs on the client's host (exec), the load generator is its child.
	echo "bench: ebpf ($DURATION, $CONNS connections)..." >&2
	ip netns exec mcpi-client "$MCPI" exec --config "$WORK/core.yaml" -- bin/loadgen -url "$PLAIN" \
		-conns "$CONNS" -duration "$DURATION" -warmup 2s -body-size 1024 -mcp-version 2025-06-18 -label "ebpf (exec)" 2>/dev/null >>"$RESULTS"

	echo "tls" >>"$RESULTS"
	load "direct TLS" https://10.200.2.2:8443/mcp -ca "$PKI/server-ca.pem"
	appliance "$WORK/routes.yaml" nftables-tproxy
	ip netns exec mcpi-appliance "$MCPI" ca export --dir "$WORK/ca" >"$WORK/appliance-ca.pem"
	load "passthrough" https://10.200.2.2:9443/mcp -ca "$PKI/server-ca.pem"
	load "terminate+L1" https://10.200.2.2:8443/mcp -ca "$WORK/appliance-ca.pem"
	stop_appliance
}

# Throughput at 16 connections (the server saturates the 2 cores: p50 there is mostly queueing),
# then latency with one connection (nothing queues: the added p50 is the appliance's own cost).
PASSES=${PASSES:-throughput latency handshake}
touch "$WORK/results.jsonl" "$WORK/latency.jsonl"
case " $PASSES " in *" throughput "*) run_pass "$WORK/results.jsonl" ;; esac
case " $PASSES " in *" latency "*) CONNS=1 DURATION=${LATENCY_DURATION:-5s} run_pass "$WORK/latency.jsonl" ;; esac

# TLS handshakes (TCP connect + handshake, microseconds): direct, then through terminate for a
# name the appliance has not minted a leaf for yet (first) and again (cached leaf).
hs() { ip netns exec mcpi-client bin/tlsprobe -addr 10.200.2.2:8443 -sni "$1" -ca "$2" -path /mcp | python3 -c 'import json,sys; print(json.load(sys.stdin)["handshake_us"])'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
if [[ " $PASSES " == *" handshake "* ]]; then
	echo "bench: TLS handshakes..." >&2
	hs_direct=$(for i in 1 2 3 4 5 6 7; do hs mcp.lab.test "$PKI/server-ca.pem"; done | median)
	# Each round restarts the appliance (an empty leaf cache) and warms it up with one handshake to
	# the IPv6 name, so that the first-time costs of the process itself are not counted; then the
	# first handshakes to a name and to an IPv4 address it has not minted yet.
	: >"$WORK/first_name"; : >"$WORK/first_ip"; : >"$WORK/cached"
	for round in 1 2 3 4 5; do
		appliance "$WORK/routes.yaml" nftables-tproxy
		[ -s "$WORK/appliance-ca.pem" ] || ip netns exec mcpi-appliance "$MCPI" ca export --dir "$WORK/ca" >"$WORK/appliance-ca.pem"
		ip netns exec mcpi-client bin/tlsprobe -addr '[fd00:200:2::2]:8443' -ca "$WORK/appliance-ca.pem" -path /mcp >/dev/null
		hs mcp.lab.test "$WORK/appliance-ca.pem" >>"$WORK/first_name"
		hs 10.200.2.2 "$WORK/appliance-ca.pem" >>"$WORK/first_ip"
		hs mcp.lab.test "$WORK/appliance-ca.pem" >>"$WORK/cached"
		stop_appliance
	done
	hs_first_name=$(median <"$WORK/first_name")
	hs_first_ip=$(median <"$WORK/first_ip")
	hs_cached=$(median <"$WORK/cached")
	printf '{"direct": %s, "first_name": %s, "first_ip": %s, "cached": %s}\n' "$hs_direct" "$hs_first_name" "$hs_first_ip" "$hs_cached" >"$WORK/handshake.json"
fi

case " $PASSES " in *" handshake "*) ;; *) echo '{"direct": 0, "first_name": 0, "first_ip": 0, "cached": 0}' >"$WORK/handshake.json" ;; esac
python3 - "$WORK/results.jsonl" "$WORK/latency.jsonl" "$WORK/handshake.json" <<'PY'
import json, sys
for path, title in ((sys.argv[1], "throughput: 16 connections"), (sys.argv[2], "latency: 1 connection")):
  base = None
  print(f"\n== {title}")
  print(f"{'path':<22}{'req/s':>10}{'p50 us':>10}{'p99 us':>10}{'errors':>8}{'x direct':>10}{'+p50 us':>10}")
  for line in open(path):
    if line.strip() == "tls":
        base = None
        print()
        continue
    r = json.loads(line)
    if base is None:
        base = r
    print(f"{r['label']:<22}{r['rps']:>10.0f}{r['p50_us']:>10.0f}{r['p99_us']:>10.0f}{r['errors']:>8}"
          f"{r['rps']/base['rps']:>10.2f}{r['p50_us']-base['p50_us']:>10.0f}")
h = json.load(open(sys.argv[3]))
print("\n== TLS handshake (TCP connect + handshake), microseconds, medians")
print(f"direct {h['direct']}; through terminate: first handshake to a new name {h['first_name']} "
      f"(+{h['first_name']-h['direct']}), to a new IP {h['first_ip']} (+{h['first_ip']-h['direct']}), "
      f"cached leaf {h['cached']} (+{h['cached']-h['direct']})")
PY
