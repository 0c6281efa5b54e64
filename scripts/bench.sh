#!/usr/bin/env bash
# make bench, fast-origin set: what the appliance itself costs, measured from outside in the
# three-namespace lab (scripts/lab.sh). loadgen in mcpi-client sends MCP tools/call POSTs (1 KiB
# JSON bodies, MCP 2026-07-28 request headers: MCP-Protocol-Version, Mcp-Method, Mcp-Name) over 16
# keep-alive connections to e2e/peers/fastorigin in mcpi-server, which answers a fixed 1 KiB
# JSON-RPC result in microseconds, so the server does not saturate the cores first and hide the
# path in front of it. Every row runs in the same invocation, three rounds interleaved (each round
# runs every row once), and the table shows the median of the three per column:
#
#   direct, direct TLS                     no appliance in the path (the appliance namespace routes)
#   HAProxy TCP                            Debian's haproxy, mode tcp, transparent bind, server
#                                          0.0.0.0:0 (the original destination)
#   Go relay splice / buffer               e2e/peers/gorelay: accept, dial the original destination
#                                          with the bypass mark, io.Copy both ways — Go's floor
#   mcpintercept opaque / passthrough      level 0 routes (plaintext / TLS passthrough); the opaque
#                                          route says `level: 0` explicitly: a plaintext route
#                                          without `level` is Level 1 (config.LevelOrDefault)
#   Level 1 plaintext, terminate + Level 1 level 1 routes, one deny rule, flow log on (/dev/null)
#   Level 2 plaintext / terminate          only when `mcpintercept check` accepts `level: 2`
#   sidecar Level 2 plaintext              Sidecar mode: the appliance in mcpi-server (mechanism
#                                          external, `inbound:` port 3041, Level 2 plaintext, the
#                                          same rule set) tproxies the clients' connections to the
#                                          origin's port 3041 and delivers them from the client's
#                                          address; x direct: against direct (the same origin
#                                          process, port 8080) in the same rounds
#   PATH + audit                           each Level 1 / Level 2 path (plaintext and terminate)
#                                          on its own route with the durable audit on (issue 18)
#   PATH + tracing                         each Level 1 / Level 2 path in a second appliance run
#                                          with telemetry.otlp on (sampling 1.0: every call a
#                                          span), exporting to e2e/peers/otlpsink (discards,
#                                          answers 200)
#   terminate + Level 2, tracing, collector down  the same with the endpoint on a port nothing
#                                          listens on: spans dropped (counted), traffic unaffected
#   ... observe, no reader / stalled reader  terminate + Level 2 in a third appliance run with the
#                                          live view's token (tool_integrity.dir; every run has the
#                                          admin listener on, its default, for the allocation
#                                          count): first with no /observe subscriber, then
#                                          with one that subscribed and stopped reading (curl,
#                                          SIGSTOP): it must be dropped
#                                          (mcpintercept_observe_dropped_total), not slow the rows
#   open loop at RATE req/s                p50/p99 measured from each request's due time; the
#                                          "added p99" is the row's p99 minus direct's
#   one sequential client                  terminate + Level 2 with and without audit, one
#                                          connection, closed loop: the added p50 is what the
#                                          audit's durable write adds to one call
#
# HAProxy and the Go relay sit behind exactly the steering mcpintercept installs: scripts/benchsteer
# runs intercept.New(cfg).Install — the same code, on the same configuration file as the appliance
# rows — and removes it after the rows (table inet mcpintercept: prerouting returns local
# destinations and the bypass mark, jumps the lab prefix to tproxy4, where each intercepted port
# sets mark 0x4d49 and tproxies to 127.0.0.1:15001; output chain (intercept.local, on by default):
# the bypass mark and conntrack reply packets return, the steered destinations and ports get the
# mark; ip rule fwmark 0x4d49 lookup 4915 + local default dev lo in table 4915). The reference
# proxies listen on 127.0.0.1:15001 in mcpintercept's place. The Go relay gets those rules
# unchanged (it dials with the bypass mark, as mcpintercept does). HAProxy gets them with
# --local false, i.e. without the output chain (what mcpintercept installs with
# `intercept.local: false`): its 2.6 server lines cannot set SO_MARK, so the output chain would
# steer its upstream dials back into itself.
#
# Ratios: plaintext rows against direct, TLS rows against direct TLS; "x relay" is a row's ratio
# divided by the Go relay (splice) ratio of its family (plaintext relay for opaque and Level 1
# plaintext, the relay over the TLS port for passthrough and terminate). cpu % is the proxy
# process's utime+stime (/proc/PID/stat) over the loadgen run, warm-up included; 100 = one core.
# "cpu us/req" is the proxy's CPU seconds over the run divided by every request of the run
# (loadgen's "total", warm-up included; median of the rounds): what one request costs the proxy,
# the figure to compare across paths when the two cores are shared; "cpu x relay" divides it by
# the Go relay's of the same family. "x off" is a feature row's req/s over the same path's without
# it (audit, tracing, observe: the issue-31 targets are >= 0.85). "allocs/req" is the appliance's
# Go heap allocations (go_memstats_mallocs_total from its admin listener, 127.0.0.1:9464-9466 in
# the appliance namespace) over the run divided by the same total.
#
# Environment: DURATION (8s) WARMUP (2s) ROUNDS (3) CONNS (16) RATE (1000) RATE_DURATION (5s)
# FLOWS (/dev/null: the appliance's flow log; "off" disables it) BENCH_SDK=1 (then also run the Go
# SDK server set, scripts/bench-sdk.sh) MCPINTERCEPT_BIN=path (use that binary instead of building
# ./cmd/mcpintercept, e.g. one built from a clean checkout) MCPINTERCEPT_BASELINE=path (also run
# the appliance rows with that binary in the same rounds, marked [baseline]: before and after side
# by side under the same conditions) BENCH_OUT=file (also write the tables there, and every run's
# JSON to file.jsonl) BENCH_LABEL=text (printed in the header) BENCH_ROWS=regex (run only the rows
# whose label matches this extended regex, case-insensitive, e.g. 'relay splice$|opaque'; the
# closed-loop direct and direct TLS rows always run, the ratios need them). Needs root; installs haproxy with apt when it
# is missing (bench only).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ "$(id -u)" = 0 ] || { echo "bench: must run as root" >&2; exit 1; }
# The lab is shared with the e2e suite: one user of it at a time. The e2e suite is run under
# /tmp/mcpi-e2e.lock (flock /tmp/mcpi-e2e.lock go test ./e2e), so the bench holds that one too:
# its rows and its final `mcpintercept cleanup` would otherwise meet an e2e appliance.
if [ -z "${MCPI_LAB_LOCK_HELD:-}" ]; then
	export MCPI_LAB_LOCK_HELD=1
	exec flock /tmp/mcpi-e2e.lock flock /tmp/mcpi-lab.lock "$0" "$@"
fi
export PATH=/usr/local/go/bin:$PATH

DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-16}
RATE=${RATE:-1000}
RATE_DURATION=${RATE_DURATION:-5s}
FLOWS=${FLOWS:-/dev/null}
MCPI=${MCPINTERCEPT_BIN:-$ROOT/bin/mcpintercept}
WORK=$(mktemp -d /tmp/mcpi-bench.XXXXXX)
PROXY_PID=
STEERED=

stop_proxy() {
	ADMIN=
	ADMIN_NS=mcpi-appliance
	if [ -n "$PROXY_PID" ]; then
		kill -TERM "$PROXY_PID" 2>/dev/null || true
		wait "$PROXY_PID" 2>/dev/null || true
		PROXY_PID=
	fi
}
finish() {
	stop_proxy
	[ -n "$STEERED" ] && bench_unsteer
	ip netns exec mcpi-appliance "$MCPI" cleanup >/dev/null 2>&1 || true
	# The sidecar row's inbound table (mcpintercept_inbound) in the server's namespace.
	ip netns exec mcpi-server "$MCPI" cleanup >/dev/null 2>&1 || true
	for p in $(jobs -p); do kill "$p" 2>/dev/null || true; kill -CONT "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	scripts/lab.sh down >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap finish EXIT

if ! command -v haproxy >/dev/null 2>&1; then
	echo "bench: installing haproxy (apt; the reference row only)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends haproxy >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends haproxy >/dev/null; }
fi
[ -n "${MCPINTERCEPT_BIN:-}" ] || go build -o bin/mcpintercept ./cmd/mcpintercept
go build -o bin/ ./e2e/peers/fastorigin ./e2e/peers/gorelay ./e2e/peers/loadgen ./e2e/peers/otlpsink ./scripts/benchsteer
scripts/lab.sh up >/dev/null
PKI=$ROOT/.lab/pki
CLK_TCK=$(getconf CLK_TCK)

# The origin: plaintext on 8080 (direct, relays, opaque), 8081 (Level 1), 8082 (Level 2), 8083
# (Level 1 + audit), 8084 (Level 2 + audit), 3041 (sidecar: not in intercept.ports, only the
# sidecar steers it); TLS with the lab server certificate on 8443 (direct TLS, relays, terminate +
# Level 1), 8444 (terminate + Level 2), 8445 (terminate + Level 2 + audit), 8446 (terminate + Level
# 1 + audit), 9443 (passthrough).
ip netns exec mcpi-server bin/fastorigin -listen 10.200.2.2:8080,10.200.2.2:8081,10.200.2.2:8082,10.200.2.2:8083,10.200.2.2:8084,10.200.2.2:3041 >"$WORK/origin.out" 2>&1 &
ip netns exec mcpi-server bin/fastorigin -listen 10.200.2.2:8443,10.200.2.2:8444,10.200.2.2:8445,10.200.2.2:8446,10.200.2.2:9443 \
	-tls-cert "$PKI/server.pem" -tls-key "$PKI/server-key.pem" >"$WORK/tlsorigin.out" 2>&1 &
# The OTLP receiver of the tracing rows, beside the appliance (its exports go to loopback).
ip netns exec mcpi-appliance bin/otlpsink -listen 127.0.0.1:4318 >"$WORK/otlpsink.out" 2>&1 &
SINK_PID=$!
for i in $(seq 1 100); do
	[ "$(grep -cs READY "$WORK/origin.out")" = 6 ] && [ "$(grep -cs READY "$WORK/tlsorigin.out")" = 5 ] &&
		grep -qs READY "$WORK/otlpsink.out" && break
	sleep 0.1
done

# --- steering for the reference proxies (see the header) ---
# mcpintercept's own rules from $WORK/routes.yaml (written below), installed by its own code.
BENCH_PORT=15001
STEER_PID=
STEER_LOCAL=
bench_steer() { # true|false: intercept.local (the output chain)
	bench_unsteer
	ip netns exec mcpi-appliance bin/benchsteer --config "$WORK/routes.yaml" --mechanism nftables-tproxy --local "$1" >"$WORK/steer.log" 2>&1 &
	STEER_PID=$!
	STEERED=1
	STEER_LOCAL=$1
	for i in $(seq 1 100); do
		grep -qs READY "$WORK/steer.log" && return 0
		kill -0 "$STEER_PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$WORK/steer.log" >&2
	return 1
}
bench_unsteer() {
	if [ -n "$STEER_PID" ]; then
		kill -TERM "$STEER_PID" 2>/dev/null || true
		wait "$STEER_PID" 2>/dev/null || true
		STEER_PID=
	fi
	STEERED=
	STEER_LOCAL=
}
# want LABEL: the row is selected by BENCH_ROWS (all rows when unset).
want() { [ -z "${BENCH_ROWS:-}" ] || grep -qiE -- "$BENCH_ROWS" <<<"$1"; }

cat >"$WORK/haproxy.cfg" <<CFG
global
	maxconn 4096
defaults
	mode tcp
	timeout connect 5s
	timeout client 60s
	timeout server 60s
frontend tproxied
	bind 127.0.0.1:$BENCH_PORT transparent
	default_backend original_destination
backend original_destination
	# 0.0.0.0 and no port: connect to the address and port the client connected to.
	server origdst 0.0.0.0
CFG
haproxy -c -q -f "$WORK/haproxy.cfg"

# --- mcpintercept configurations: one per binary under test (ID "" or "_base") ---
RULES=$(cat <<'YAML'
rule_sets:
  bench:
    - name: deny-denied-tools
      when: 'mcp.method == "tools/call" && mcp.name.startsWith("denied_")'
      action: deny
YAML
)
# mcpi_config BINARY ID: writes $WORK/routesID.yaml (Level 2 routes too when BINARY's check accepts
# them; otherwise $WORK/l2noteID says why) and sets L2ID=0|1.
mcpi_config() {
	local bin=$1 id=$2 base
	base="mechanism: nftables-tproxy
listen: {port: 15001}
intercept:
  destinations: [10.200.2.0/24]
  ports: [8080, 8081, 8082, 8083, 8084, 8443, 8444, 8445, 8446, 9443]
admin: {listen: \"127.0.0.1:9464\"}
log: {flows: \"$FLOWS\"}
ca: {dir: $WORK/ca$id}
upstream_tls: {extra_cas: [$PKI/server-ca.pem]}
routes:
  - {name: opaque, match: {ports: [8080]}, tls: plaintext, level: 0}
  - {name: l1-plain, match: {ports: [8081]}, tls: plaintext, level: 1, development: true, rule_set: bench}
  - {name: terminate, match: {ports: [8443]}, tls: terminate, level: 1, rule_set: bench}
  - {name: passthrough, match: {ports: [9443]}, tls: passthrough}"
	local l2='  - {name: l2-plain, match: {ports: [8082]}, tls: plaintext, level: 2, development: true, rule_set: bench}
  - {name: terminate-l2, match: {ports: [8444]}, tls: terminate, level: 2, rule_set: bench}'
	# Each path with the durable audit (issue 18), when BINARY knows it.
	local l2audit="  - {name: l1-plain-audit, match: {ports: [8083]}, tls: plaintext, level: 1, development: true, rule_set: bench, audit: true}
  - {name: l2-plain-audit, match: {ports: [8084]}, tls: plaintext, level: 2, development: true, rule_set: bench, audit: true}
  - {name: terminate-l1-audit, match: {ports: [8446]}, tls: terminate, level: 1, rule_set: bench, audit: true}
  - {name: terminate-l2-audit, match: {ports: [8445]}, tls: terminate, level: 2, rule_set: bench, audit: true}"
	printf -v "AUDIT$id" 0
	printf -v "TRACE$id" 0
	printf '%s\n' "$base" "$l2" "$l2audit" "$RULES" "audit: {dir: $WORK/audit$id}" >"$WORK/routes$id.yaml"
	if "$bin" check --config "$WORK/routes$id.yaml" >/dev/null 2>&1; then
		printf -v "L2$id" 1
		printf -v "AUDIT$id" 1
		# Tracing (issue 21), when BINARY knows telemetry.otlp: the same routes in a second run
		# with every call a span, exported to the sink; and to a port nothing listens on. The
		# admin endpoint (appliance namespace) gives the dropped-span count.
		local tel="telemetry: {otlp: {endpoint: 'http://127.0.0.1:4318', sampling_ratio: 1}}"
		local down="telemetry: {otlp: {endpoint: 'http://127.0.0.1:4319', sampling_ratio: 1}}"
		printf '%s\n' "$base" "$l2" "$RULES" "$tel" | sed 's/^admin: .*/admin: {listen: "127.0.0.1:9465"}/' >"$WORK/routes${id}_trace.yaml"
		printf '%s\n' "$base" "$l2" "$RULES" "$down" | sed 's/^admin: .*/admin: {listen: "127.0.0.1:9465"}/' >"$WORK/routes${id}_tracedown.yaml"
		if "$bin" check --config "$WORK/routes${id}_trace.yaml" >/dev/null 2>&1; then
			printf -v "TRACE$id" 1
		fi
		# The live view (issue 22): the same routes with the admin listener on; its token in
		# tool_integrity.dir.
		printf '%s\n' "$base" "$l2" "$RULES" "tool_integrity: {dir: $WORK/tools$id}" |
			sed 's/^admin: .*/admin: {listen: "127.0.0.1:9466"}/' >"$WORK/routes${id}_observe.yaml"
		printf -v "OBSERVE$id" 0
		if "$bin" check --config "$WORK/routes${id}_observe.yaml" >/dev/null 2>&1 && "$bin" observe --help >/dev/null 2>&1; then
			printf -v "OBSERVE$id" 1
		fi
		return
	fi
	printf '%s\n' "$base" "$l2" "$RULES" >"$WORK/routes$id.yaml"
	if "$bin" check --config "$WORK/routes$id.yaml" >"$WORK/l2check$id.out" 2>&1; then
		printf -v "L2$id" 1
		return
	fi
	printf -v "L2$id" 0
	local note
	note=$( (grep -m1 -i "level" "$WORK/l2check$id.out" || head -n1 "$WORK/l2check$id.out") | sed "s/^.*routes\[[0-9]*\]\.level: //")
	echo "bench: $bin: Level 2 rows skipped: $note" >&2
	printf '%s\n' "$note" >"$WORK/l2note$id"
	printf '%s\n' "$base" "$RULES" >"$WORK/routes$id.yaml"
	"$bin" check --config "$WORK/routes$id.yaml" >/dev/null
}
mcpi_config "$MCPI" ""
L2_base=0
[ -n "${MCPINTERCEPT_BASELINE:-}" ] && mcpi_config "$MCPINTERCEPT_BASELINE" _base

# Sidecar mode: the appliance in the server's namespace, nothing steered on egress (mechanism
# external), inbound connections to 3041 tproxied into it: the Level 2 plaintext route of the
# rows above on the sidecar's own port. SIDECAR=0 (row skipped) when the binary's check refuses it.
SIDECAR_ADMIN=http://127.0.0.1:9474
cat >"$WORK/sidecar.yaml" <<YAML
mechanism: external
listen: {addresses: [127.0.0.1, "::1"], port: 15101}
inbound:
  ports: [3041]
  listen_port: 15106
admin: {listen: "${SIDECAR_ADMIN#http://}"}
log: {flows: "$FLOWS"}
ca: {dir: $WORK/ca_sidecar}
routes:
  - {name: sidecar-l2-plain, match: {ports: [3041]}, tls: plaintext, level: 2, development: true, rule_set: bench}
$RULES
YAML
SIDECAR=1
if ! "$MCPI" check --config "$WORK/sidecar.yaml" >"$WORK/sidecarcheck.out" 2>&1; then
	SIDECAR=0
	echo "bench: $MCPI: sidecar row skipped: $(head -n1 "$WORK/sidecarcheck.out")" >&2
fi

# --- one row ---
RESULTS=$WORK/results.jsonl
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# The running appliance's admin listener (empty for the reference proxies): its Go runtime's
# allocation count (go_memstats_mallocs_total) before and after a row gives allocations per request.
ADMIN=
ADMIN_NS=mcpi-appliance # the namespace of its admin listener (mcpi-server for the sidecar)
mallocs() {
	[ -n "$ADMIN" ] || { echo null; return; }
	local m
	m=$(ip netns exec "$ADMIN_NS" curl -s --max-time 5 "$ADMIN/metrics" | awk '$1 == "go_memstats_mallocs_total" {printf "%.0f", $2}')
	echo "${m:-null}"
}
# row ROUND GROUP LABEL URL [loadgen args]: one loadgen run, its JSON line plus the proxy's CPU.
row() {
	local round=$1 group=$2 label=$3 url=$4
	shift 4
	# With BENCH_ROWS, the closed-loop direct rows still run (every ratio needs them).
	want "$label" || case "$group:$label" in *plain:direct | *"tls:direct TLS") ;; *) return 0 ;; esac
	local dur=$DURATION extra=()
	case "$group" in
	rate*) dur=$RATE_DURATION extra=(-rate "$RATE" -warmup 1s) ;;
	seq*) dur=$RATE_DURATION extra=(-warmup 1s) ;;
	*) extra=(-warmup "$WARMUP") ;;
	esac
	case "$url" in https:*) extra+=(-ca "$CA") ;; esac
	echo "bench: round $round: $label ($dur)" >&2
	local t0 c0 t1 c1 out m0 m1
	m0=$(mallocs)
	t0=$(date +%s%N)
	c0=0
	[ -n "$PROXY_PID" ] && c0=$(cpu_ticks "$PROXY_PID")
	local conns=$CONNS
	case "$group" in seq*) conns=1 ;; esac
	out=$(ip netns exec mcpi-client bin/loadgen -url "$url" -conns "$conns" -duration "$dur" -body-size 1024 \
		-label "$label" "${extra[@]}" "$@" 2>"$WORK/loadgen.err") || {
		echo "bench: $label: loadgen failed: $(head -c 400 "$WORK/loadgen.err")" >&2
	}
	t1=$(date +%s%N)
	c1=0
	[ -n "$PROXY_PID" ] && c1=$(cpu_ticks "$PROXY_PID")
	m1=$(mallocs)
	[ -n "$out" ] || out="{\"label\":\"$label\",\"requests\":0,\"errors\":-1,\"rps\":0,\"p50_us\":0,\"p99_us\":0}"
	local cpu=null cpus=null allocs=null
	if [ -n "$PROXY_PID" ]; then
		cpu=$(awk -v d="$((c1 - c0))" -v hz="$CLK_TCK" -v ns="$((t1 - t0))" 'BEGIN {printf "%.1f", d / hz / (ns / 1e9) * 100}')
		cpus=$(awk -v d="$((c1 - c0))" -v hz="$CLK_TCK" 'BEGIN {printf "%.3f", d / hz}')
	fi
	[ "$m0" != null ] && [ "$m1" != null ] && allocs=$((m1 - m0))
	printf '{"round": %s, "group": "%s", "cpu": %s, "cpu_s": %s, "allocs": %s, "r": %s}\n' "$round" "$group" "$cpu" "$cpus" "$allocs" "$out" >>"$RESULTS"
}

start_proxy() { # log-file ready-pattern command...
	local log=$1 pat=$2
	ADMIN=
	shift 2
	"$@" >"$log" 2>&1 &
	PROXY_PID=$!
	for i in $(seq 1 100); do
		grep -qs -- "$pat" "$log" && return 0
		kill -0 "$PROXY_PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$log" >&2
	return 1
}
# HAProxy prints nothing when it is up: wait for its listener instead.
start_haproxy() {
	ip netns exec mcpi-appliance haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
	PROXY_PID=$!
	for i in $(seq 1 100); do
		ip netns exec mcpi-appliance ss -Hltn "sport = :$BENCH_PORT" | grep -q . && return 0
		sleep 0.1
	done
	cat "$WORK/haproxy.log" >&2
	return 1
}

# mcpi_rows ROUND BINARY ID SUFFIX: the appliance's rows, with BINARY and $WORK/routesID.yaml.
mcpi_rows() {
	local round=$1 bin=$2 id=$3 sfx=$4 l2var="L2$3" auditvar="AUDIT$3"
	local l2=${!l2var} au=${!auditvar:-0} p any=
	for p in "mcpintercept opaque" "Level 1 plaintext" "passthrough" "terminate + Level 1"; do want "$p$sfx" && any=1; done
	if [ "$l2" = 1 ]; then
		for p in "Level 2 plaintext" "terminate + Level 2"; do want "$p$sfx" && any=1; done
	fi
	if [ "$au" = 1 ]; then
		for p in "Level 1 plaintext" "Level 2 plaintext" "terminate + Level 1" "terminate + Level 2"; do want "$p + audit$sfx" && any=1; done
	fi
	[ -n "$any" ] && mcpi_plain_rows "$@"
	mcpi_trace_rows "$round" "$bin" "$id" "$sfx" "" " + tracing$sfx"
	mcpi_trace_rows "$round" "$bin" "$id" "$sfx" down ", tracing, collector down$sfx"
	mcpi_observe_rows "$round" "$bin" "$id" "$sfx"
}

# mcpi_plain_rows ROUND BINARY ID SUFFIX: the rows of one appliance run with $WORK/routesID.yaml:
# each path, then each path with the durable audit on (its own route and origin port).
mcpi_plain_rows() {
	local round=$1 bin=$2 id=$3 sfx=$4 l2var="L2$3" auditvar="AUDIT$3"
	local l2=${!l2var} au=${!auditvar:-0} group
	start_proxy "$WORK/app$id.log" msg=ready ip netns exec mcpi-appliance "$bin" run --config "$WORK/routes$id.yaml" --mechanism nftables-tproxy
	ADMIN=http://127.0.0.1:9464
	[ -s "$WORK/appliance-ca$id.pem" ] || ip netns exec mcpi-appliance "$bin" ca export --dir "$WORK/ca$id" >"$WORK/appliance-ca$id.pem"
	CA=$PKI/server-ca.pem
	row "$round" plain "mcpintercept opaque$sfx" "$PLAIN:8080/mcp"
	for group in plain rate-plain; do
		row "$round" $group "Level 1 plaintext$sfx" "$PLAIN:8081/mcp"
		[ "$au" = 1 ] && row "$round" $group "Level 1 plaintext + audit$sfx" "$PLAIN:8083/mcp"
		[ "$l2" = 1 ] && row "$round" $group "Level 2 plaintext$sfx" "$PLAIN:8082/mcp"
		[ "$au" = 1 ] && row "$round" $group "Level 2 plaintext + audit$sfx" "$PLAIN:8084/mcp"
	done
	row "$round" tls "passthrough$sfx" "$TLSURL:9443/mcp"
	CA=$WORK/appliance-ca$id.pem
	for group in tls rate-tls; do
		row "$round" $group "terminate + Level 1$sfx" "$TLSURL:8443/mcp"
		[ "$au" = 1 ] && row "$round" $group "terminate + Level 1 + audit$sfx" "$TLSURL:8446/mcp"
		[ "$l2" = 1 ] && row "$round" $group "terminate + Level 2$sfx" "$TLSURL:8444/mcp"
		[ "$au" = 1 ] && row "$round" $group "terminate + Level 2 + audit$sfx" "$TLSURL:8445/mcp"
	done
	# One sequential client (one connection, closed loop): what the audit adds to each call.
	if [ "$au" = 1 ]; then
		row "$round" seq-tls "terminate + Level 2$sfx" "$TLSURL:8444/mcp"
		row "$round" seq-tls "terminate + Level 2 + audit$sfx" "$TLSURL:8445/mcp"
	fi
	stop_proxy
}

# mcpi_trace_rows ROUND BINARY ID SUFFIX KIND TAIL: each path in an appliance run with
# telemetry.otlp on ($WORK/routesID_trace.yaml, KIND down: _tracedown.yaml), its label the path's
# with TAIL appended (only terminate + Level 2 for KIND down); the appliance's
# mcpintercept_spans_dropped_total after the rows goes to $WORK/droppedID_KIND.
mcpi_trace_rows() {
	local round=$1 bin=$2 id=$3 sfx=$4 kind=$5 tail=$6 tvar="TRACE$3" p any= group
	[ "${!tvar:-0}" = 1 ] || return 0
	local paths=("Level 1 plaintext" "Level 2 plaintext" "terminate + Level 1" "terminate + Level 2")
	[ -n "$kind" ] && paths=("terminate + Level 2")
	for p in "${paths[@]}"; do want "$p$tail" && any=1; done
	[ -n "$any" ] || return 0
	start_proxy "$WORK/app${id}_trace$kind.log" msg=ready ip netns exec mcpi-appliance "$bin" run --config "$WORK/routes${id}_trace$kind.yaml" --mechanism nftables-tproxy
	ADMIN=http://127.0.0.1:9465
	[ -s "$WORK/appliance-ca$id.pem" ] || ip netns exec mcpi-appliance "$bin" ca export --dir "$WORK/ca$id" >"$WORK/appliance-ca$id.pem"
	for group in plain rate-plain tls rate-tls; do
		for p in "${paths[@]}"; do
			case "$group:$p" in
			plain*:Level*) CA=$PKI/server-ca.pem ;;
			tls*:terminate*) CA=$WORK/appliance-ca$id.pem ;;
			*) continue ;;
			esac
			local port
			case "$p" in "Level 1 plaintext") port=8081 ;; "Level 2 plaintext") port=8082 ;; "terminate + Level 1") port=8443 ;; *) port=8444 ;; esac
			case "$p" in Level*) row "$round" $group "$p$tail" "$PLAIN:$port/mcp" ;; *) row "$round" $group "$p$tail" "$TLSURL:$port/mcp" ;; esac
		done
	done
	local d
	d=$(ip netns exec mcpi-appliance curl -s --max-time 5 http://127.0.0.1:9465/metrics | awk '$1 == "mcpintercept_spans_dropped_total" {print $2}')
	echo "${d:-?}" >>"$WORK/dropped${id}_$kind"
	stop_proxy
}

# mcpi_observe_rows ROUND BINARY ID SUFFIX: terminate + Level 2 (port 8444) in an appliance run
# with the admin listener on ($WORK/routesID_observe.yaml): the rows with no /observe subscriber,
# then the same rows with a subscriber that stopped reading. After each stalled row the
# appliance's mcpintercept_observe_dropped_total and _subscribers go to $WORK/observeID.
OBS_ADMIN=http://127.0.0.1:9466
obs_metric() { ip netns exec mcpi-appliance curl -s --max-time 5 "$OBS_ADMIN/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
mcpi_observe_rows() {
	local round=$1 bin=$2 id=$3 sfx=$4 ovar="OBSERVE$3"
	local quiet="terminate + Level 2, observe, no reader$sfx" stalled="terminate + Level 2, observe, stalled reader$sfx"
	[ "${!ovar:-0}" = 1 ] && { want "$quiet" || want "$stalled"; } || return 0
	start_proxy "$WORK/app${id}_observe.log" msg=ready ip netns exec mcpi-appliance "$bin" run --config "$WORK/routes${id}_observe.yaml" --mechanism nftables-tproxy
	ADMIN=$OBS_ADMIN
	[ -s "$WORK/appliance-ca$id.pem" ] || ip netns exec mcpi-appliance "$bin" ca export --dir "$WORK/ca$id" >"$WORK/appliance-ca$id.pem"
	CA=$WORK/appliance-ca$id.pem
	local token group reader
	token=$(cat "$WORK/tools$id/admin.token")
	for group in tls rate-tls; do
		row "$round" "$group" "$quiet" "$TLSURL:8444/mcp"
	done
	for group in tls rate-tls; do
		want "$stalled" || continue
		# A reader that asks for the stream and stops reading it (`ip netns exec` execs curl,
		# so $! is curl). SIGSTOP once the appliance counts it as a subscriber.
		ip netns exec mcpi-appliance curl -sN -o /dev/null -H "Authorization: Bearer $token" "$OBS_ADMIN/observe" &
		reader=$!
		for i in $(seq 1 100); do
			[ "$(obs_metric mcpintercept_observe_subscribers)" = 1 ] && break
			sleep 0.1
		done
		[ "$(obs_metric mcpintercept_observe_subscribers)" = 1 ] || echo "bench: $stalled: the reader did not subscribe (see $WORK/app${id}_observe.log)" >&2
		kill -STOP "$reader"
		local d0
		d0=$(obs_metric mcpintercept_observe_dropped_total)
		row "$round" "$group" "$stalled" "$TLSURL:8444/mcp"
		# Dropped during the row (0 or 1), and whether it is still subscribed (stalled, its
		# records queued or discarded, the data path not waiting).
		echo "round $round $group: dropped $(($(obs_metric mcpintercept_observe_dropped_total) - ${d0:-0})), still subscribed $(obs_metric mcpintercept_observe_subscribers)" >>"$WORK/observe$id"
		kill "$reader" 2>/dev/null || true
		kill -CONT "$reader" 2>/dev/null || true
		wait "$reader" 2>/dev/null || true
	done
	stop_proxy
}

# sidecar_rows ROUND: the sidecar appliance in mcpi-server ($WORK/sidecar.yaml), Level 2 plaintext
# on port 3041, closed loop and open loop; stopped (SIGTERM: its nft table goes) before the next row.
sidecar_rows() {
	local round=$1 group label="sidecar Level 2 plaintext"
	[ "$SIDECAR" = 1 ] && want "$label" || return 0
	start_proxy "$WORK/sidecar.log" msg=ready ip netns exec mcpi-server "$MCPI" run --config "$WORK/sidecar.yaml"
	ADMIN=$SIDECAR_ADMIN
	ADMIN_NS=mcpi-server
	for group in plain rate-plain; do
		row "$round" $group "$label" "$PLAIN:3041/mcp"
	done
	stop_proxy
}

PLAIN=http://10.200.2.2
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
TLSURL=https://10.200.2.2
for round in $(seq 1 "$ROUNDS"); do
	CA=$PKI/server-ca.pem
	row "$round" plain "direct" "$PLAIN:8080/mcp"
	row "$round" tls "direct TLS" "$TLSURL:8443/mcp"
	row "$round" rate-plain "direct" "$PLAIN:8080/mcp"
	row "$round" rate-tls "direct TLS" "$TLSURL:8443/mcp"

	if want "HAProxy TCP"; then
		bench_steer false
		start_haproxy
		row "$round" plain "HAProxy TCP" "$PLAIN:8080/mcp"
		stop_proxy
	fi
	for mode in splice buffer; do
		want "Go relay $mode" || { [ "$mode" = splice ] && want "Go relay splice (TLS)"; } || continue
		[ "$STEER_LOCAL" = true ] || bench_steer true
		start_proxy "$WORK/relay.log" READY ip netns exec mcpi-appliance bin/gorelay -mode "$mode" -listen "127.0.0.1:$BENCH_PORT"
		row "$round" plain "Go relay $mode" "$PLAIN:8080/mcp"
		[ "$mode" = splice ] && row "$round" tls "Go relay splice (TLS)" "$TLSURL:8443/mcp"
		stop_proxy
	done
	bench_unsteer

	mcpi_rows "$round" "$MCPI" "" ""
	if [ -n "${MCPINTERCEPT_BASELINE:-}" ]; then mcpi_rows "$round" "$MCPINTERCEPT_BASELINE" _base " [baseline]"; fi
	sidecar_rows "$round"
done
# The sink prints what it received when it stops.
kill -TERM "$SINK_PID" 2>/dev/null || true
wait "$SINK_PID" 2>/dev/null || true

{
	echo "mcpintercept: $MCPI${BENCH_LABEL:+ ($BENCH_LABEL)}"
	[ -n "${MCPINTERCEPT_BASELINE:-}" ] && echo "baseline: $MCPINTERCEPT_BASELINE (rows marked [baseline], same rounds)"
	echo "haproxy: $(haproxy -v 2>/dev/null | head -n1)"
	echo "host: $(nproc) CPUs, $(uname -r); rounds $ROUNDS, $DURATION + $WARMUP warm-up per row, $CONNS connections; flow log: $FLOWS"
	echo "load average (1/5/15 min) before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg) (the lab itself adds ~4-6)"
	python3 - "$RESULTS" "$WORK/l2note" "$ROUNDS" "$RATE" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
l2note = open(sys.argv[2]).read().strip() if os.path.exists(sys.argv[2]) else ""
rate = sys.argv[4]
order, by = [], {}
for x in rows:
    k = (x["group"], x["r"]["label"])
    if k not in by:
        order.append(k)
        by[k] = []
    by[k].append(x)
# A baseline row right after its counterpart.
first = {}
for i, k in enumerate(order):
    first.setdefault((k[0], k[1].removesuffix(" [baseline]")), i)
order.sort(key=lambda k: (first[(k[0], k[1].removesuffix(" [baseline]"))], k[1].endswith(" [baseline]")))

def med(k, f):
    v = [f(x) for x in by.get(k, []) if x["r"].get("requests", 0) > 0]
    return statistics.median(v) if v else 0.0

# CPU per request: the proxy's CPU seconds over the run divided by every request it handled
# (loadgen's "total", warm-up included); from an older loadgen without it, cpu % over req/s.
def per_req_us(x):
    if x.get("cpu_s") is not None and x["r"].get("total"):
        return x["cpu_s"] * 1e6 / x["r"]["total"]
    if x["cpu"] is not None and x["r"].get("rps"):
        return x["cpu"] / 100 * 1e6 / x["r"]["rps"]
    return None

# The path a feature row adds to: "terminate + Level 2 + audit" -> "terminate + Level 2".
FEATURES = (" + audit", " + tracing", ", tracing, collector down", ", observe, no reader", ", observe, stalled reader")
def path_of(label):
    base, sfx = label.removesuffix(" [baseline]"), " [baseline]" if label.endswith(" [baseline]") else ""
    for f in FEATURES:
        if base.endswith(f):
            return base.removesuffix(f) + sfx
    return None

def agg(k):
    xs = by[k]
    cpu = [x["cpu"] for x in xs if x["cpu"] is not None]
    return {"rps": med(k, lambda x: x["r"]["rps"]), "p50": med(k, lambda x: x["r"]["p50_us"]),
            "p99": med(k, lambda x: x["r"]["p99_us"]), "errors": sum(max(x["r"]["errors"], 0) for x in xs),
            "failed": sum(1 for x in xs if x["r"]["errors"] < 0 or x["r"].get("requests", 0) == 0),
            "cpu": statistics.median(cpu) if cpu else None, "n": len(xs),
            "us": statistics.median(us) if (us := [v for x in xs if (v := per_req_us(x)) is not None]) else None,
            "allocs": statistics.median(al) if (al := [x["allocs"] / x["r"]["total"] for x in xs
                                                      if x.get("allocs") is not None and x["r"].get("total")]) else None,
            "late": sum(x["r"].get("late", 0) for x in xs)}

print(f"\n== fast origin, closed loop: median of {sys.argv[3]} rounds")
print("x direct: req/s over direct's (TLS rows: direct TLS); x relay: that over the Go relay's; x off: req/s over the same")
print("path without the feature; cpu us/req: the proxy's CPU per request; cpu x relay: that over the Go relay's;")
print("allocs/req: the appliance's Go heap allocations per request (go_memstats_mallocs_total)")
print(f"{'path':<52}{'req/s':>8}{'p50 us':>8}{'p99 us':>8}{'errors':>7}{'x direct':>9}{'x relay':>8}{'x off':>6}{'cpu %':>6}{'cpu us/req':>11}{'cpu x relay':>12}{'allocs/req':>11}")
relay = {"plain": ("plain", "Go relay splice"), "tls": ("tls", "Go relay splice (TLS)")}
vs_relay = {"mcpintercept opaque", "passthrough", "Level 1 plaintext", "terminate + Level 1",
            "Level 2 plaintext", "terminate + Level 2"}
for fam, base_label in (("plain", "direct"), ("tls", "direct TLS")):
    base = agg((fam, base_label)) if (fam, base_label) in by else None
    rk = relay[fam]
    ra = agg(rk) if rk in by else None
    rratio = ra["rps"] / base["rps"] if base and base["rps"] and ra else None
    for k in order:
        if k[0] != fam:
            continue
        a = agg(k)
        ratio = a["rps"] / base["rps"] if base and base["rps"] else 0
        plain_label = k[1].removesuffix(" [baseline]")
        onrelay = plain_label in vs_relay or (path_of(k[1]) or "").removesuffix(" [baseline]") in vs_relay
        xr = f"{ratio / rratio:>8.2f}" if onrelay and rratio else f"{'':>8}"
        off = path_of(k[1])
        xo = f"{a['rps'] / agg((fam, off))['rps']:>6.2f}" if off and (fam, off) in by and agg((fam, off))["rps"] else f"{'':>6}"
        cpu = f"{a['cpu']:>6.0f}" if a["cpu"] is not None else f"{'-':>6}"
        us = f"{a['us']:>11.1f}" if a["us"] is not None else f"{'-':>11}"
        cr = f"{a['us'] / ra['us']:>12.2f}" if onrelay and a["us"] is not None and ra and ra["us"] else f"{'':>12}"
        al = f"{a['allocs']:>11.1f}" if a["allocs"] is not None else f"{'-':>11}"
        err = f"{a['errors']}" + (f" ({a['failed']} runs failed)" if a["failed"] else "")
        print(f"{k[1]:<52}{a['rps']:>8.0f}{a['p50']:>8.0f}{a['p99']:>8.0f}{err:>7}{ratio:>9.2f}{xr}{xo}{cpu}{us}{cr}{al}")
    if fam == "plain" and l2note:
        print(f"{'Level 2 plaintext':<52}skipped: {l2note}")
    if fam == "tls" and l2note:
        print(f"{'terminate + Level 2':<52}skipped: {l2note}")
    print()
print(f"== open loop at {rate} req/s ({sys.argv[3]} rounds, medians): latency from each request's due time")
print("added: over direct's; feature p99: a feature row's p99 minus the same path's without it")
print(f"{'path':<52}{'req/s':>9}{'p50 us':>9}{'p99 us':>9}{'errors':>8}{'late':>7}{'added p50':>11}{'added p99':>11}{'feature p99':>12}{'cpu %':>8}{'cpu us/req':>11}{'allocs/req':>11}")
for fam, base_label in (("rate-plain", "direct"), ("rate-tls", "direct TLS")):
    base = agg((fam, base_label)) if (fam, base_label) in by else None
    for k in order:
        if k[0] != fam:
            continue
        a = agg(k)
        cpu = f"{a['cpu']:>8.0f}" if a["cpu"] is not None else f"{'-':>8}"
        ap50 = f"{a['p50'] - base['p50']:>11.0f}" if base and k[1] != base_label else f"{'':>11}"
        ap99 = f"{a['p99'] - base['p99']:>11.0f}" if base and k[1] != base_label else f"{'':>11}"
        al = f"{a['allocs']:>11.1f}" if a["allocs"] is not None else f"{'-':>11}"
        us = f"{a['us']:>11.1f}" if a["us"] is not None else f"{'-':>11}"
        off = path_of(k[1])
        fp = f"{a['p99'] - agg((fam, off))['p99']:>12.0f}" if off and (fam, off) in by else f"{'':>12}"
        print(f"{k[1]:<52}{a['rps']:>9.0f}{a['p50']:>9.0f}{a['p99']:>9.0f}{a['errors']:>8}{a['late']:>7}{ap50}{ap99}{fp}{cpu}{us}{al}")
if l2note:
    print(f"{'Level 2':<52}skipped: {l2note}")
if any(k[0] == "seq-tls" for k in order):
    print(f"\n== one sequential client (1 connection, closed loop; {sys.argv[3]} rounds, medians): what the audit adds to each call")
    print(f"{'path':<52}{'req/s':>9}{'p50 us':>9}{'p99 us':>9}{'errors':>8}{'added p50':>11}{'added p99':>11}{'cpu us/req':>11}{'allocs/req':>11}")
    for k in order:
        if k[0] != "seq-tls":
            continue
        a = agg(k)
        off = path_of(k[1])
        b = agg(("seq-tls", off)) if off and ("seq-tls", off) in by else None
        ap50 = f"{a['p50'] - b['p50']:>11.0f}" if b else f"{'':>11}"
        ap99 = f"{a['p99'] - b['p99']:>11.0f}" if b else f"{'':>11}"
        us = f"{a['us']:>11.1f}" if a["us"] is not None else f"{'-':>11}"
        al = f"{a['allocs']:>11.1f}" if a["allocs"] is not None else f"{'-':>11}"
        print(f"{k[1]:<52}{a['rps']:>9.0f}{a['p50']:>9.0f}{a['p99']:>9.0f}{a['errors']:>8}{ap50}{ap99}{us}{al}")
f = os.path.join(os.path.dirname(sys.argv[1]), "observe")
if os.path.exists(f):
    print("stalled observe reader: " + "; ".join(l for l in open(f).read().split("\n") if l))
for kind, what in (("", "tracing (sink up)"), ("down", "tracing, collector down")):
    f = os.path.join(os.path.dirname(sys.argv[1]), f"dropped_{kind}")
    if os.path.exists(f):
        print(f"spans dropped per run, {what}: {', '.join(open(f).read().split())} (mcpintercept_spans_dropped_total)")
PY
	grep -h '^otlpsink:' "$WORK/otlpsink.out" || true
} | tee "$WORK/table.txt"
if [ -n "${BENCH_OUT:-}" ]; then
	cp "$WORK/table.txt" "$BENCH_OUT"
	cp "$RESULTS" "$BENCH_OUT.jsonl" # every run of every row, for a second look
fi

if [ "${BENCH_SDK:-0}" = 1 ]; then
	stop_proxy
	scripts/lab.sh down >/dev/null
	MCPINTERCEPT_BIN=$MCPI scripts/bench-sdk.sh
fi
