#!/usr/bin/env bash
# archcount.sh — issue 30's architecture figures, counted from the tree, each printed after the
# command that counts it (so the closing note can quote both):
#   1. the engine's project imports, and which of audit, auth, integrity, tracing, level1, level2
#      it imports (target: ≤ 8, none of audit/auth/integrity/tracing);
#   2. MCP method-name string literals in non-test Go code outside package mcp, and their files
#      (a literal whose whole value is a method name of mcp/methods.go, found by go/parser:
#      comments and longer strings do not count; e2e/ — the test peers — is listed apart);
#   3. the packages that import config (target: appliance and cmd only);
#   4. cmd/mcpintercept's non-test lines and project imports;
#   5. the methods of level2's biggest type;
#   6. with commit SHAs as arguments: the files those commits touched — non-test .go files
#      (the "a new setting touched N files" figure), then the test and other files apart.
# Usage: scripts/archcount.sh [SHA...]   (run from anywhere inside the tree)
set -euo pipefail
cd "$(dirname "$0")/.."
module=$(go list -m)
run() { printf '$ %s\n' "$1"; bash -c "$1" || true; }

echo "tree: $(pwd) ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"

echo
echo "== 1. engine's project imports =="
run "go list -f '{{join .Imports \"\\n\"}}' ./engine | grep -c '^$module/'"
run "go list -f '{{join .Imports \"\\n\"}}' ./engine | grep '^$module/' | tr '\\n' ' '; echo"
for p in audit auth integrity tracing level1 level2; do
	if go list -f '{{join .Imports "\n"}}' ./engine | grep -qx "$module/$p"; then
		echo "engine imports $p: yes"
	else
		echo "engine imports $p: no"
	fi
done

echo
echo "== 2. MCP method-name string literals in non-test Go code outside package mcp =="
lits=$(go run ./scripts/archcount literals)
echo "\$ go run ./scripts/archcount literals | grep -v '^e2e/' | wc -l"
grep -v '^e2e/' <<<"$lits" | grep -c . || true
echo "\$ go run ./scripts/archcount literals | grep -v '^e2e/' | cut -d: -f1 | sort | uniq -c | sort -rn   # files"
grep -v '^e2e/' <<<"$lits" | cut -d: -f1 | sort | uniq -c | sort -rn || true
echo "\$ go run ./scripts/archcount literals | grep -v '^e2e/' | cut -d: -f1,2 | sort -u | wc -l   # lines"
grep -v '^e2e/' <<<"$lits" | cut -d: -f1,2 | sort -u | grep -c . || true
echo "\$ go run ./scripts/archcount literals | grep -c '^e2e/'   # the e2e test peers, apart"
grep -c '^e2e/' <<<"$lits" || true
echo "\$ go run ./scripts/archcount literals | grep -v '^e2e/'   # each literal"
grep -v '^e2e/' <<<"$lits" || true

echo
echo "== 3. packages that import config =="
run "go list -f '{{.ImportPath}}: {{join .Imports \" \"}}' ./... | grep ' $module/config\\( \\|\$\\)' | cut -d: -f1"

echo
echo "== 4. cmd/mcpintercept =="
run "cat \$(ls cmd/mcpintercept/*.go | grep -v '_test\\.go\$') | wc -l   # non-test lines"
run "go list -f '{{join .Imports \"\\n\"}}' ./cmd/mcpintercept | grep -c '^$module/'   # project imports"
run "go list -f '{{join .Imports \"\\n\"}}' ./cmd/mcpintercept | grep '^$module/' | tr '\\n' ' '; echo"

echo
echo "== 5. level2's biggest type =="
run "go run ./scripts/archcount methods level2 3   # methods, type, the files they are in"

if [ $# -gt 0 ]; then
	echo
	echo "== 6. files touched by $* =="
	for c in "$@"; do
		echo "\$ git show --stat --format= $c   # $(git log -1 --format=%s "$c" | cut -c1-90)"
		git show --stat --format= "$c" | sed 's/^/    /'
	done
	all=$(for c in "$@"; do git show --name-only --format= "$c"; done | grep . | sort -u)
	src=$(grep '\.go$' <<<"$all" | grep -v '_test\.go$' || true)
	echo "\$ for c in $*; do git show --name-only --format= \$c; done | sort -u | grep '\\.go\$' | grep -vc '_test\\.go\$'"
	echo "non-test .go files touched: $(grep -c . <<<"$src" || true)"
	[ -z "$src" ] || sed 's/^/    /' <<<"$src"
	echo "test .go files: $(grep -c '_test\.go$' <<<"$all" || true); other files (docs, goldens, config): $(grep -vc '\.go$' <<<"$all" || true)"
	grep -v '\.go$' <<<"$all" | sed 's/^/    /' || true
fi
