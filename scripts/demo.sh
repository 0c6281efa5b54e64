#!/usr/bin/env bash
# The lab demo: a real MCP server in mcpi-server, mcpintercept in mcpi-appliance steering with
# nftables TPROXY, real MCP clients (official Go and TypeScript SDKs) in mcpi-client calling the
# server at its own address, then the flow log. The lab and everything of ours are removed on exit,
# whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ "$(id -u)" = 0 ] || { echo "demo: must run as root (network namespaces, netfilter)" >&2; exit 1; }

MECH=${MECHANISM:-nftables-tproxy}
WORK=$(mktemp -d /tmp/mcpi-demo.XXXXXX)
APP_PID=

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

finish() {
	local rc=$?
	if [ -n "$APP_PID" ] && kill -0 "$APP_PID" 2>/dev/null; then kill -TERM "$APP_PID"; wait "$APP_PID" 2>/dev/null || true; fi
	ip netns exec mcpi-appliance "$ROOT/bin/mcpintercept" cleanup >/dev/null 2>&1 || true
	for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	scripts/lab.sh down >/dev/null 2>&1 || true
	rm -rf "$WORK"
	[ $rc = 0 ] && echo "demo: done; lab removed" || echo "demo: FAILED (exit $rc); lab removed" >&2
}
trap finish EXIT

step "build"
go build -o bin/mcpintercept ./cmd/mcpintercept
go build -o bin/ ./e2e/peers/mcpserver ./e2e/peers/mcpclient

step "lab up: mcpi-client -> mcpi-appliance -> mcpi-server"
scripts/lab.sh up

step "MCP servers in mcpi-server: Go SDK on :8080, @modelcontextprotocol/server-everything on :3001"
ip netns exec mcpi-server bin/mcpserver -listen '10.200.2.2:8080,[fd00:200:2::2]:8080' >"$WORK/goserver.out" 2>"$WORK/goserver.err" &
(cd e2e/node && PORT=3001 exec ip netns exec mcpi-server node node_modules/@modelcontextprotocol/server-everything/dist/index.js streamableHttp) >"$WORK/everything.out" 2>&1 &
for i in $(seq 1 100); do
	grep -q READY "$WORK/goserver.out" 2>/dev/null && grep -q "listening on port 3001" "$WORK/everything.out" 2>/dev/null && break
	sleep 0.1
done

step "mcpintercept in mcpi-appliance ($MECH, examples/lab.yaml)"
ip netns exec mcpi-appliance bin/mcpintercept run --config examples/lab.yaml --mechanism "$MECH" >"$WORK/flows.jsonl" 2>"$WORK/appliance.log" &
APP_PID=$!
for i in $(seq 1 100); do grep -q "msg=ready" "$WORK/appliance.log" && break; sleep 0.1; done
grep -q "msg=ready" "$WORK/appliance.log" || { cat "$WORK/appliance.log" >&2; exit 1; }
sed 's/^/  appliance: /' "$WORK/appliance.log"

step "Go SDK client -> http://10.200.2.2:8080/mcp (the server's own address; the client is not configured for any proxy)"
ip netns exec mcpi-client bin/mcpclient -url http://10.200.2.2:8080/mcp | head -40

step "TypeScript SDK client -> http://10.200.2.2:3001/mcp (server-everything)"
(cd e2e/node && ip netns exec mcpi-client node client.mjs http://10.200.2.2:3001/mcp)

step "TypeScript SDK client -> http://[fd00:200:2::2]:3001/mcp (IPv6)"
(cd e2e/node && ip netns exec mcpi-client node client.mjs 'http://[fd00:200:2::2]:3001/mcp') | head -5

step "stop the appliance (SIGTERM: drain, then remove steering)"
kill -TERM "$APP_PID"; wait "$APP_PID" || true; APP_PID=
tail -n 3 "$WORK/appliance.log" | sed 's/^/  appliance: /'

step "flow log (one JSON line per connection)"
cat "$WORK/flows.jsonl"
n=$(wc -l <"$WORK/flows.jsonl")
[ "$n" -gt 0 ] || { echo "demo: the appliance logged no flow" >&2; exit 1; }
echo "($n flows)"
