#!/usr/bin/env bash
# Builds the mcpintercept Debian package with dpkg-deb (in Debian's dpkg; no other packager), and
# with `dist`, a tarball of the same files plus SHA256SUMS.
#
#   packaging/build.sh deb  [OUTDIR]   OUTDIR/mcpintercept_VERSION_ARCH.deb (default OUTDIR: bin)
#   packaging/build.sh dist [OUTDIR]   the .deb, mcpintercept-VERSION-linux-ARCH.tar.gz, SHA256SUMS
#   packaging/build.sh version         the Debian version `git describe` gives
#
# The binary is static (CGO_ENABLED=0), built with -trimpath for GOARCH (default: this machine's).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

GO=${GO:-go}
ARCH=${GOARCH:-$($GO env GOARCH)}

# version maps `git describe --tags --always --dirty` onto a Debian version: v1.2.0-5-gabc1234
# becomes 1.2.0+5.gabc1234; without a tag, 0.0~git<commits>.<hash> (sorts before any 0.x release
# and rises with every commit); a dirty tree adds .dirty.
version() {
	local d v
	if d=$(git describe --tags --dirty 2>/dev/null) &&
		[[ $d =~ ^v?([0-9][0-9A-Za-z.~+]*)(-([0-9]+)-(g[0-9a-f]+))?(-dirty)?$ ]]; then
		v=${BASH_REMATCH[1]}
		[ -n "${BASH_REMATCH[3]}" ] && v+="+${BASH_REMATCH[3]}.${BASH_REMATCH[4]}"
	else
		d=$(git describe --always --dirty 2>/dev/null || echo unknown-dirty)
		v="0.0~git$(git rev-list --count HEAD 2>/dev/null || echo 0).${d%-dirty}"
	fi
	[[ $d == *-dirty ]] && v+=".dirty"
	echo "$v"
}

# stage lays out the package's files under $1 (the binary built into it).
stage() {
	local r=$1
	install -d -m 0755 "$r"
	install -d "$r/usr/bin" "$r/lib/systemd/system" "$r/usr/lib/sysusers.d" "$r/etc/mcpintercept" \
		"$r/etc/logrotate.d" "$r/usr/share/mcpintercept" "$r/usr/share/doc/mcpintercept/examples" \
		"$r/usr/share/man/man1" "$r/usr/share/bash-completion/completions" "$r/usr/share/zsh/vendor-completions"
	# The binary reports the package's version (mcpintercept version, declare, /declaration).
	CGO_ENABLED=0 GOOS=linux GOARCH=$ARCH $GO build -trimpath -ldflags "-s -w -buildid= -X main.version=$(version)" \
		-o "$r/usr/bin/mcpintercept" ./cmd/mcpintercept
	gzip -9n <packaging/man/mcpintercept.1 >"$r/usr/share/man/man1/mcpintercept.1.gz"
	chmod 0644 "$r/usr/share/man/man1/mcpintercept.1.gz"
	install -m 0644 packaging/completion/mcpintercept.bash "$r/usr/share/bash-completion/completions/mcpintercept"
	install -m 0644 packaging/completion/_mcpintercept "$r/usr/share/zsh/vendor-completions/_mcpintercept"
	install -m 0644 packaging/systemd/mcpintercept.service "$r/lib/systemd/system/"
	install -m 0644 packaging/sysusers.d/mcpintercept.conf "$r/usr/lib/sysusers.d/"
	install -m 0644 packaging/etc/mcpintercept/mcpintercept.yaml packaging/etc/mcpintercept/gateway.yaml "$r/etc/mcpintercept/"
	install -m 0644 packaging/logrotate/mcpintercept "$r/etc/logrotate.d/mcpintercept"
	install -m 0755 scripts/gateway.sh "$r/usr/share/mcpintercept/gateway.sh"
	install -m 0644 README.md "$r/usr/share/doc/mcpintercept/README.md"
	install -d "$r/usr/share/doc/mcpintercept/docs"
	install -m 0644 docs/*.md "$r/usr/share/doc/mcpintercept/docs/"
	install -m 0644 packaging/systemd/ebpf.conf "$r/usr/share/doc/mcpintercept/examples/ebpf.conf"
	install -m 0644 examples/lab.yaml examples/exec.yaml "$r/usr/share/doc/mcpintercept/examples/"
	printf 'mcpintercept\n\nThe Debian packaging files are under packaging/ in the source tree.\n' >"$r/usr/share/doc/mcpintercept/copyright"
}

build_deb() {
	local out=$1 v r size deb
	v=$(version)
	r=$(mktemp -d)
	trap 'rm -rf "'"$r"'"' RETURN
	stage "$r"
	install -d "$r/DEBIAN"
	install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$r/DEBIAN/"
	install -m 0644 packaging/debian/conffiles "$r/DEBIAN/"
	size=$(du -sk --exclude=DEBIAN "$r" | cut -f1)
	sed -e "s/@VERSION@/$v/" -e "s/@ARCH@/$ARCH/" -e "s/@SIZE@/$size/" packaging/debian/control.in >"$r/DEBIAN/control"
	(cd "$r" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$r/DEBIAN/md5sums"
	chmod 0644 "$r/DEBIAN/md5sums"
	mkdir -p "$out"
	deb="$out/mcpintercept_${v}_${ARCH}.deb"
	SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)} \
		dpkg-deb --root-owner-group -Zxz --build "$r" "$deb" >/dev/null
	echo "$deb"
}

build_dist() {
	local out=$1 v deb name r
	v=$(version)
	deb=$(build_deb "$out")
	name="mcpintercept-$v-linux-$ARCH"
	r=$(mktemp -d)
	trap 'rm -rf "'"$r"'"' RETURN
	stage "$r/$name"
	tar --owner=0 --group=0 --numeric-owner --sort=name -C "$r" -czf "$out/$name.tar.gz" "$name"
	(cd "$out" && sha256sum "$(basename "$deb")" "$name.tar.gz" >SHA256SUMS)
	echo "$deb"
	echo "$out/$name.tar.gz"
	echo "$out/SHA256SUMS"
}

case "${1:-}" in
deb) build_deb "${2:-bin}" ;;
dist) build_dist "${2:-bin}" ;;
version) version ;;
*) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
