#!/usr/bin/env bash
# walk.sh — the walk counter of issue 30: for ONE Level 2 tools/call request and its JSON
# response going through the real chain, how many times control ENTERS each Go source file of
# the module from a function in another file, and how many times it crosses a package
# boundary. The issue's target: no file entered more than 5 times.
#
# Usage: sudo scripts/walk.sh [-c engine|level2|all] [-n TOP] [-f FILE] [-I] [-B] [-k]
#   -c  the chain (default all: engine, then level2):
#         engine  scripts/walk/engine: an engine.Engine on loopback, one plaintext Level 2 route
#                 with two rules: the engine's whole chain for a request (its own stages —
#                 records, rules, shadow —, Level 1 and Level 2, upstream). It uses the engine's
#                 exported API, so when a refactor changes that API this harness needs the same
#                 edit as the engine's own tests; if it does not build, walk.sh says so and goes
#                 on with level2.
#         level2  scripts/walk/level2: level1's classifier and level2.Flow.Stage() behind
#                 exchange.Serve on loopback (level2's BenchmarkExchangeLevel2 chain): only the
#                 stable API (level2.Flow, (*Flow).Stage, exchange.Serve).
#   -n  print the TOP files only (default 30; 0: all)
#   -f  also list the calls that enter FILE (e.g. level2/stage.go; "all": every entry),
#       caller → callee
#   -I  keep the compiler's inlining (a release build's calls) instead of -gcflags=all=-l
#   -B  probe with bpftrace instead of scripts/walk/trace
#   -k  keep the work directory (test binary, probe output and raw counts)
# Needs root, the Go toolchain, and either Linux ≥ 6.6 (uprobe_multi: scripts/walk/trace, a
# second per chain) or bpftrace (apt-get install -y bpftrace; 0.17 on Debian 12 opens one perf
# event per function: 3–5 minutes per chain). walk.sh falls back to bpftrace when
# scripts/walk/trace cannot attach; both give the same counts (checked on 6c3588c).
#
# Method:
#  1. The harness (scripts/walk/harness) is an MCP client and a loopback MCP server with the chain
#     between them. On one keep-alive connection it sends initialize, notifications/initialized
#     and two tools/call (warm-up: session memory, lazily built tables, sync.Once), waits 100 ms,
#     calls harness.Begin, sends ONE tools/call (~1 KiB, as in the level2 benchmark) and reads
#     its JSON response (~1 KiB), waits 100 ms more (work the chain does after forwarding the
#     response: records, metrics, going back to read the next request), then calls harness.End.
#     The walk is per request: the connection (accept, origin, route choice, disposition, the
#     chain's construction) was set up in the warm-up, as for every request after a
#     connection's first.
#  2. The test binary is built with `go test -c -gcflags=all=-l`: no inlining, so every call the
#     source writes is a real call (the count is of the source's structure, not of what the
#     compiler happens to inline in a release build; -I counts the inlined build's calls).
#  3. A uprobe on the entry of every function of the module (scripts/walk/trace: one
#     uprobe_multi link built with cilium/ebpf; or bpftrace on the symbols `mcpintercept*`);
#     between Begin and End each hit counts the key (callee address, the return address at
#     [SP] — the caller —, and [BP+8] — the caller's caller, used when the caller is a
#     compiler-generated wrapper).
#  4. scripts/walk/count resolves the addresses with the binary's pclntab (debug/gosym) to
#     function, package and file (a function's file is that of its entry: a closure counts to
#     the file that encloses it), and counts an ENTRY of file F whenever a function of F is
#     called from a function in another file (any package, the standard library included: a
#     callback from io.Copy or a goroutine start enters the file too). A PACKAGE CROSSING is a
#     call between two different packages of the module. The harness's own functions
#     (mcpintercept/scripts/walk/...) are outside the walk: neither counted nor a caller of the
#     module.
# Output columns: entries (from another file), non_leaf (of those, into a function that itself
# called a function of the module during the walk: small helpers such as httptok's character
# tests are leaves), from_pkg (from another package of the module), from_out (from outside the
# module), calls (every call of the file's functions, its own file's included: the figure of
# the issue's "enters level2/stage.go 44 times"). Then the package pairs crossed, and totals.
#
# Limits:
#  - One request, one shape (plain JSON response, no SSE, two allow rules, no audit, tokens,
#    tracing, tool pins or redaction configured): features the route does not turn on are not
#    walked. Other shapes need another harness test.
#  - Background goroutines of the process that run between Begin and End (timers, the other
#    side's reads) are counted too; the 100 ms settle windows bound that, they do not remove it.
#  - A function whose prologue grows its goroutine's stack runs its entry twice (morestack
#    restarts it): such a call counts twice. Rare after warm-up; new goroutines can hit it.
#  - Calls the compiler generates (wrappers, <autogenerated>) are not files: they are counted in
#    "wrappers" and their caller stands in for them. Calls made through assembly or cgo, and
#    calls into the standard library, are not probed (only the module's functions are).
#  - Release builds inline small functions: their true call counts are lower than these (-I
#    measures the inlined build; there a call is attributed to the function it was inlined
#    into).
#  - amd64 only ([SP] and [BP+8] at entry are the Go amd64 ABI's return address and frame
#    pointer chain).
set -euo pipefail

chains=all top=30 keep= gcflags=all=-l probe=trace file=
while getopts "c:n:f:IBk" o; do
	case $o in
	c) chains=$OPTARG ;;
	n) top=$OPTARG ;;
	f) file=$OPTARG ;;
	I) gcflags= ;;
	B) probe=bpftrace ;;
	k) keep=1 ;;
	*) sed -n '2,28p' "$0"; exit 2 ;;
	esac
done
case $chains in all) chains="engine level2" ;; engine | level2) ;; *) echo "walk.sh: -c engine|level2|all" >&2; exit 2 ;; esac

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
module=$(go list -m)
[ "$(id -u)" = 0 ] || { echo "walk.sh: needs root (uprobes)" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || { echo "walk.sh: amd64 only" >&2; exit 1; }

work=$(mktemp -d /tmp/walk.XXXXXX)
[ -n "$keep" ] || trap 'rm -rf "$work"' EXIT
go build -o "$work/count" ./scripts/walk/count
go build -o "$work/trace" ./scripts/walk/trace
echo "tree: $root ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ', modified'))"

ran=0
for c in $chains; do
	bin=$work/walk-$c.test
	echo
	echo "== chain: $c (scripts/walk/$c) =="
	echo "\$ go test -c ${gcflags:+-gcflags=$gcflags }-o $bin ./scripts/walk/$c"
	if ! go test -c ${gcflags:+-gcflags=$gcflags} -o "$bin" "./scripts/walk/$c" >"$work/build-$c.log" 2>&1; then
		echo "walk.sh: the $c harness does not build on this tree (fix scripts/walk/$c for the new API):"
		sed 's/^/    /' "$work/build-$c.log" | head -20
		continue
	fi
	p=$probe
	if [ "$p" = trace ]; then
		echo "\$ MCPI_WALK=1 scripts/walk/trace -bin $bin -- $bin -test.run '^TestWalk\$' -test.v"
		rc=0
		(cd "scripts/walk/$c" && MCPI_WALK=1 "$work/trace" -bin "$bin" -module "$module" \
			-exclude "$module/scripts/walk/" -markers "$module/scripts/walk/harness." \
			-- "$bin" -test.run '^TestWalk$' -test.count=1 -test.v) >"$work/raw-$c.txt" 2>"$work/trace-$c.log" || rc=$?
		if [ "$rc" = 3 ]; then
			echo "walk.sh: scripts/walk/trace cannot probe ($(tail -1 "$work/trace-$c.log")); trying bpftrace"
			p=bpftrace
		fi
	fi
	if [ "$p" = bpftrace ]; then
		command -v bpftrace >/dev/null || { echo "walk.sh: needs bpftrace (apt-get install -y bpftrace)" >&2; exit 1; }
		nprobes=$(go tool nm "$bin" | awk -v m="$module" '$2 == "T" && index($3, m) == 1' | wc -l)
		cat >"$work/walk-$c.bt" <<EOF
uprobe:$bin:"$module/scripts/walk/harness.Begin" { @on = 1; }
uprobe:$bin:"$module/scripts/walk/harness.End" { @on = 0; }
uprobe:$bin:$module* /@on == 1/ { @c[reg("ip"), *(uint64 *)reg("sp"), *(uint64 *)(reg("bp") + 8)] = count(); }
EOF
		echo "\$ MCPI_WALK=1 bpftrace -c '$bin -test.run ^TestWalk\$ -test.v' walk-$c.bt   # $nprobes probes"
		(cd "scripts/walk/$c" && MCPI_WALK=1 BPFTRACE_MAX_PROBES=$((nprobes + 100)) BPFTRACE_MAP_KEYS_MAX=262144 \
			bpftrace -c "$bin -test.run ^TestWalk\$ -test.count=1 -test.v" "$work/walk-$c.bt" \
			>"$work/raw-$c.txt" 2>"$work/bpftrace-$c.log") || true
	fi
	if ! grep -q -- '--- PASS: TestWalk' "$work/raw-$c.txt"; then
		echo "walk.sh: the $c walk did not pass:"
		grep -v '^@c\[' "$work/raw-$c.txt" | sed 's/^/    /' | head -30
		cat "$work/trace-$c.log" "$work/bpftrace-$c.log" 2>/dev/null | grep -v 'failed to detach\|uprobe_events' | sed 's/^/    /' | head -10
		continue
	fi
	keys=$(grep -c '^@c\[' "$work/raw-$c.txt" || true)
	[ "$keys" -lt 262144 ] || echo "walk.sh: warning: the count map is full ($keys keys); raise BPFTRACE_MAP_KEYS_MAX"
	echo "\$ scripts/walk/count -bin $bin -in raw-$c.txt -module $module -root $root -top $top${file:+ -file $file}"
	"$work/count" -bin "$bin" -in "$work/raw-$c.txt" -module "$module" -exclude "$module/scripts/walk/" -root "$root" -top "$top" -file "$file"
	ran=$((ran + 1))
done
[ -z "$keep" ] || echo "work directory kept: $work"
[ "$ran" -gt 0 ]
