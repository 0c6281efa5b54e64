#!/usr/bin/env bash
# Builds Dex (github.com/dexidp/dex, the OpenID Connect provider) into OUT (default bin/dex), for
# e2e/credentials_test.go, which runs unmodified Dex token servers: the workload's IdP and RFC 8693
# token-exchange authorization servers. Called by scripts/deps.sh (all mode, as root).
#
# The module proxy serves one recent Dex version (VERSION, a pseudo-version; its tagged releases
# are not served). `go install` refuses it (its go.mod replaces github.com/dexidp/dex/api/v2 with a
# nested directory that is not in the module zip), so the module is copied from the module cache,
# the replace dropped, and nogrpc.patch applied: it leaves out the gRPC admin API, the only user
# of api/v2, which at this commit is newer than any published api/v2 (the test does not use it).
# Only the Go module proxy is needed. Cold (empty module and build caches, 2 cores): 264 s, 92 MB
# of module zips; a 57 MB binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../bin/dex}
case $out in /*) ;; *) out=$PWD/$out ;; esac
version=$(tr -d ' \n' <"$here/VERSION")
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
# Outside any module; -mod=mod lets the build record the sums of api/v2 (from the proxy's sumdb).
export GOFLAGS="-mod=mod -buildvcs=false"
# Without cgo: no SQLite storage (the test's Dex keeps everything in memory), no C compiler needed.
export CGO_ENABLED=0
dir=$(go mod download -json "github.com/dexidp/dex@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[ -d "$dir" ] || { echo "dex build: go mod download gave no directory for github.com/dexidp/dex@$version" >&2; exit 1; }
cp -r "$dir" src
chmod -R u+w src
cd src
go mod edit -dropreplace github.com/dexidp/dex/api/v2
if command -v patch >/dev/null 2>&1; then
	patch -s -p1 <"$here/nogrpc.patch"
else
	git apply -p1 "$here/nogrpc.patch"
fi
mkdir -p "$(dirname "$out")"
go build -trimpath -o "$out.tmp" ./cmd/dex
mv "$out.tmp" "$out"
