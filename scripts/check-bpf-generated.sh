#!/usr/bin/env bash
# Regenerates the committed eBPF loaders (bpf/*_bpfel.go, bpf/*_bpfel.o) and fails when they differ
# from what is committed, so a change to bpf/*.c or *.h cannot land without its objects. Without
# clang it has nothing to compare with and says so. The committed objects are built with Debian
# 12's clang 14; another major version produces different (equally valid) bytes, so the check is
# skipped with a warning there rather than failing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

want_clang=14

for tool in clang llvm-strip; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "check-bpf-generated: $tool not found; skipped (building uses the committed objects)"
		exit 0
	fi
done
major=$(clang -dumpversion | cut -d. -f1)
if [ "$major" != "$want_clang" ]; then
	echo "check-bpf-generated: WARNING: clang $major, the committed objects are from clang $want_clang; skipped"
	exit 0
fi

generated=(bpf/*_bpfel.go bpf/*_bpfel.o)
snapshot=$(mktemp -d)
trap 'rm -rf "$snapshot"' EXIT
for f in "${generated[@]}"; do
	[ -e "$f" ] && cp "$f" "$snapshot/"
done

go generate ./bpf

status=0
for f in bpf/*_bpfel.go bpf/*_bpfel.o; do
	if ! cmp -s "$f" "$snapshot/$(basename "$f")"; then
		echo "check-bpf-generated: $f differs from the committed one"
		status=1
	fi
done
for f in "$snapshot"/*; do
	[ -e "bpf/$(basename "$f")" ] || { echo "check-bpf-generated: bpf/$(basename "$f") is no longer generated"; status=1; }
done
if [ "$status" -ne 0 ]; then
	echo "check-bpf-generated: run 'make generate' and commit the result"
	exit 1
fi
echo "check-bpf-generated: bpf objects match their sources"
