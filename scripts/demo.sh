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
go build -o bin/ ./e2e/peers/mcpserver ./e2e/peers/mcpclient ./e2e/peers/tlsprobe

step "lab up: mcpi-client -> mcpi-appliance -> mcpi-server"
scripts/lab.sh up

step "MCP servers in mcpi-server: Go SDK on :8080 (stateful) and :3002 (stateless, 2026-07-28), TLS on :8443/:9443, server-everything on :3001"
PKI=$ROOT/.lab/pki
ip netns exec mcpi-server bin/mcpserver -listen '10.200.2.2:8080,[fd00:200:2::2]:8080' >"$WORK/goserver.out" 2>"$WORK/goserver.err" &
ip netns exec mcpi-server bin/mcpserver -stateless -response sse -listen '10.200.2.2:3002' >"$WORK/stateless.out" 2>/dev/null &
ip netns exec mcpi-server bin/mcpserver -listen '10.200.2.2:8443,10.200.2.2:9443' -tls-cert "$PKI/server.pem" -tls-key "$PKI/server-key.pem" >"$WORK/tls.out" 2>/dev/null &
(cd e2e/node && PORT=3001 exec ip netns exec mcpi-server node node_modules/@modelcontextprotocol/server-everything/dist/index.js streamableHttp) >"$WORK/everything.out" 2>&1 &
for i in $(seq 1 100); do
	grep -q READY "$WORK/goserver.out" 2>/dev/null && grep -q READY "$WORK/stateless.out" 2>/dev/null &&
		grep -q READY "$WORK/tls.out" 2>/dev/null && grep -q "listening on port 3001" "$WORK/everything.out" 2>/dev/null && break
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

step "Go SDK client, protocol 2026-07-28 (Mcp-Method/Mcp-Name headers) -> :3002: echo is allowed, denied_delete is refused by the Level 1 rule"
ip netns exec mcpi-client bin/mcpclient -url http://10.200.2.2:3002/mcp -tool echo -args '{"text":"allowed"}' || true
ip netns exec mcpi-client bin/mcpclient -url http://10.200.2.2:3002/mcp -tool denied_delete -args '{"path":"/etc"}' || echo "  (refused with HTTP 403 by rule deny-denied-tools; the server never saw it)"

step "TLS terminate: Go SDK client -> https://mcp.lab.test:8443/mcp, trusting only the exported appliance CA"
ip netns exec mcpi-appliance bin/mcpintercept ca export --config examples/lab.yaml >"$WORK/appliance-ca.pem"
ip netns exec mcpi-client bin/mcpclient -url https://mcp.lab.test:8443/mcp -ca "$WORK/appliance-ca.pem" | head -8

step "TLS passthrough: -> 10.200.2.2:9443 sees the server's own certificate"
ip netns exec mcpi-client bin/tlsprobe -addr 10.200.2.2:9443 -sni mcp.lab.test -ca "$PKI/server-ca.pem"

step "stop the appliance (SIGTERM: drain, then remove steering)"
kill -TERM "$APP_PID"; wait "$APP_PID" || true; APP_PID=
tail -n 3 "$WORK/appliance.log" | sed 's/^/  appliance: /'

step "decisions (the flow log: one JSON line per HTTP request at Level 1, one per opaque or passthrough connection)"
python3 - "$WORK/flows.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
fmt = "{:<14}{:<22}{:<12}{:>3} {:<7}{:<16}{:<15}{:>6}  {:<13}{}"
print(fmt.format("client", "orig_dst", "tls", "lvl", "http", "mcp_method", "mcp_name", "status", "decision", "rule / reason"))
for r in rows:
    print(fmt.format(r["client"].rsplit(":", 1)[0][:13], r["orig_dst"], r["tls"] or "-", r["level"],
                     r["http_method"] or "-", (r["mcp_method"] or "-")[:15], (r["mcp_name"] or "-")[:14],
                     r["status"] or "-", r["decision"], (r["rule"] + " " + r["reason"]).strip()[:60]))
print(f"({len(rows)} records)")
if not rows:
    sys.exit("demo: the appliance logged nothing")
PY
echo "first raw JSON lines:"
head -n 2 "$WORK/flows.jsonl"
