#!/usr/bin/env bash
# make soak: the fault soak (issue 31). For DURATION (30m; 3m for a quick run) the appliance, on a
# terminate + Level 2 route with audit, tool pins and tracing on, carries a closed-loop load
# generator and real Go SDK and Node SDK clients, each call with its own nonce, while faults come
# on a schedule scaled to DURATION: the upstream resets connections mid-response, the upstream
# hangs, the audit file system is full, SIGHUP every 2 s, one kill -9 and restart, the OTLP
# collector down. Then it prints a table and exits non-zero when a check fails: every call the
# upstream executed has an authorization record, `audit verify` passes across the restart, no
# fabricated result, errors only inside fault windows (+ GRACE), the service back after the last
# fault, reloads accepted, the appliance stopped cleanly, the host clean; RSS and fd slopes
# printed. The work is done by e2e/peers/soak (its doc comment has the details), which
# TestSoakShort (e2e/soak_test.go) runs for 60 s with the same checks.
#
# Environment: DURATION (30m) CONNS (4) GRACE (3s) SOAK_KEEP=1 (keep the working directory, its
# path is printed) MCPINTERCEPT_BIN=path (use that binary instead of building ./cmd/mcpintercept).
# Needs root; holds the lab locks (/tmp/mcpi-e2e.lock, /tmp/mcpi-lab.lock) as scripts/bench.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ "$(id -u)" = 0 ] || { echo "soak: must run as root" >&2; exit 1; }
if [ -z "${MCPI_LAB_LOCK_HELD:-}" ]; then
	export MCPI_LAB_LOCK_HELD=1
	exec flock /tmp/mcpi-e2e.lock flock /tmp/mcpi-lab.lock "$0" "$@"
fi
export PATH=/usr/local/go/bin:$PATH

DURATION=${DURATION:-30m}
CONNS=${CONNS:-4}
GRACE=${GRACE:-3s}
BIN=$(mktemp -d /tmp/mcpi-soak-bin.XXXXXX)
SOAK_PID=

finish() {
	# The driver cleans up after itself on SIGTERM; this is for when it could not.
	if [ -n "$SOAK_PID" ] && kill -0 "$SOAK_PID" 2>/dev/null; then
		kill -TERM "$SOAK_PID" 2>/dev/null || true
		wait "$SOAK_PID" 2>/dev/null || true
	fi
	ip netns exec mcpi-appliance "$BIN/mcpintercept" cleanup >/dev/null 2>&1 || true
	scripts/lab.sh down >/dev/null 2>&1 || true
	local m
	for m in $(findmnt -rn -o TARGET | grep '^/tmp/mcpi-soak\.' || true); do umount "$m" || true; done
	rm -rf "$BIN"
}
trap finish EXIT

if [ -n "${MCPINTERCEPT_BIN:-}" ]; then
	cp "$MCPINTERCEPT_BIN" "$BIN/mcpintercept"
else
	go build -o "$BIN/mcpintercept" ./cmd/mcpintercept
fi
go build -o "$BIN/" ./e2e/peers/soak ./e2e/peers/soakorigin ./e2e/peers/loadgen ./e2e/peers/otlpsink ./e2e/peers/mcpserver ./e2e/peers/mcpclient
[ -d e2e/node/node_modules ] || echo "soak: e2e/node/node_modules is missing (make deps): no Node SDK client loop" >&2

KEEP=()
[ "${SOAK_KEEP:-0}" = 1 ] && KEEP=(-keep)
"$BIN/soak" -bin "$BIN" -repo "$ROOT" -own-lab -duration "$DURATION" -conns "$CONNS" -grace "$GRACE" "${KEEP[@]}" &
SOAK_PID=$!
set +e
wait "$SOAK_PID"
rc=$?
set -e
SOAK_PID=
exit "$rc"
