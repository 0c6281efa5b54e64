#!/usr/bin/env bash
# make bench: requests/s, p50 and p99 of MCP tools/call (1 KiB JSON bodies, keep-alive, 16
# connections, fixed duration) from mcpi-client to a stateless Go SDK server in mcpi-server,
# directly and through each steering mechanism, in one run so the ratios compare like with like.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ "$(id -u)" = 0 ] || { echo "bench: must run as root" >&2; exit 1; }
DURATION=${DURATION:-10s}
CONNS=${CONNS:-16}
MECHS=${MECHS:-"nftables-tproxy iptables-redirect"}
WORK=$(mktemp -d /tmp/mcpi-bench.XXXXXX)
APP_PID=

finish() {
	[ -n "$APP_PID" ] && kill -TERM "$APP_PID" 2>/dev/null && wait "$APP_PID" 2>/dev/null || true
	ip netns exec mcpi-appliance "$ROOT/bin/mcpintercept" cleanup >/dev/null 2>&1 || true
	for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	scripts/lab.sh down >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap finish EXIT

go build -o bin/mcpintercept ./cmd/mcpintercept
go build -o bin/ ./e2e/peers/mcpserver ./e2e/peers/loadgen
scripts/lab.sh up >/dev/null

ip netns exec mcpi-server bin/mcpserver -stateless -listen '10.200.2.2:8080' >"$WORK/server.out" 2>/dev/null &
for i in $(seq 1 100); do grep -q READY "$WORK/server.out" && break; sleep 0.1; done

load() { # label
	echo "bench: $1 ($DURATION, $CONNS connections)..." >&2
	ip netns exec mcpi-client bin/loadgen -url http://10.200.2.2:8080/mcp -conns "$CONNS" \
		-duration "$DURATION" -warmup 2s -body-size 1024 -label "$1" | tee -a "$WORK/results.jsonl" >/dev/null
}

load direct
for m in $MECHS; do
	ip netns exec mcpi-appliance bin/mcpintercept run --config examples/lab.yaml --mechanism "$m" >/dev/null 2>"$WORK/app.log" &
	APP_PID=$!
	for i in $(seq 1 100); do grep -q msg=ready "$WORK/app.log" && break; sleep 0.1; done
	load "$m"
	kill -TERM "$APP_PID"; wait "$APP_PID" || true; APP_PID=
done

python3 - "$WORK/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
d = rows[0]
print(f"{'path':<20}{'req/s':>10}{'p50 us':>10}{'p99 us':>10}{'errors':>8}{'x direct':>10}{'+p50 us':>10}")
for r in rows:
    print(f"{r['label']:<20}{r['rps']:>10.0f}{r['p50_us']:>10.0f}{r['p99_us']:>10.0f}{r['errors']:>8}"
          f"{r['rps']/d['rps']:>10.2f}{r['p50_us']-d['p50_us']:>10.0f}")
PY
