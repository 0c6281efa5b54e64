#!/usr/bin/env bash
# The mcpintercept appliance image: a Debian 12 root filesystem built from Debian's own packages
# (debootstrap), with the mcpintercept .deb installed by apt from the local file, booted with
# systemd-nspawn.
#
#   scripts/image.sh rootfs                    build (or reuse) the cached base root filesystem;
#                                              prints its path. Exit 3: the mirror is unreachable.
#   scripts/image.sh prepare DEB WORKDIR       overlay a writable copy of the base on WORKDIR/root
#                                              and install DEB into it with apt; prints WORKDIR/root
#   scripts/image.sh boot ROOT [NETNS]         boot ROOT with systemd-nspawn --boot (in the network
#                                              namespace /run/netns/NETNS when given, e.g. the
#                                              lab's mcpi-appliance); runs in the foreground
#   scripts/image.sh release WORKDIR           unmount and remove what prepare made
#   scripts/image.sh tar ROOT OUT.tar          the root filesystem as a tarball (machinectl
#                                              import-tar, or unpack on a disk of your own)
#   scripts/image.sh disk DEB OUTDIR [SIZE]    rootfs.img + vmlinuz + initrd.img for a VM (qemu or
#                                              libvirt direct kernel boot); not used by the tests
#
# The base is cached under /var/cache/mcpintercept-image (MCPI_IMAGE_CACHE), keyed by suite,
# mirror and package list, so a rerun costs seconds; `rm -rf /var/cache/mcpintercept-image`
# rebuilds it. debootstrap and systemd-container are installed from apt when missing.
set -euo pipefail

SUITE=bookworm
MIRROR=${MCPI_IMAGE_MIRROR:-http://deb.debian.org/debian}
CACHE=${MCPI_IMAGE_CACHE:-/var/cache/mcpintercept-image}
# What an appliance needs besides minbase: an init, the tools an operator uses to look at steering
# (ip, nft, iptables), CA roots for upstream verification, ps.
PACKAGES=systemd,systemd-sysv,dbus,iproute2,nftables,iptables,ca-certificates,procps,less

die() { echo "image: $*" >&2; exit 1; }
say() { echo "image: $*" >&2; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, mounts, systemd-nspawn)"; }

# ensure_tools installs what is missing (debootstrap, systemd-nspawn) from Debian's packages.
ensure_tools() {
	local missing=()
	command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
	command -v systemd-nspawn >/dev/null 2>&1 || missing+=(systemd-container)
	command -v curl >/dev/null 2>&1 || missing+=(curl)
	[ ${#missing[@]} -eq 0 ] && return 0
	say "installing ${missing[*]} (apt)"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
		say "cannot install ${missing[*]} from apt (is the package mirror reachable?)"
		exit 3
	fi
}

base_dir() {
	local key
	key=$(printf '%s\n' "$SUITE" "$MIRROR" "$PACKAGES" "v2" | sha256sum | cut -c1-12)
	echo "$CACHE/$SUITE-$key"
}

cmd_rootfs() {
	need_root
	local base
	base=$(base_dir)
	if [ -f "$base/.complete" ]; then
		echo "$base"
		return 0
	fi
	ensure_tools
	if ! curl -fsS --max-time 15 -o /dev/null "$MIRROR/dists/$SUITE/Release"; then
		say "cannot reach the Debian mirror $MIRROR (set MCPI_IMAGE_MIRROR)"
		exit 3
	fi
	mkdir -p "$CACHE"
	local tmp="$base.tmp.$$"
	rm -rf "$tmp"
	trap 'rm -rf "'"$tmp"'"' EXIT
	say "debootstrap $SUITE from $MIRROR into $base (a few minutes, once)"
	local t0=$SECONDS
	if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1; then
		tail -20 "$CACHE/debootstrap.log" >&2
		if grep -qiE 'Failed getting release file|Temporary failure|Could not resolve|Connection (refused|timed out)|couldn.t download' "$CACHE/debootstrap.log"; then
			say "cannot reach the Debian mirror $MIRROR during debootstrap"
			exit 3
		fi
		die "debootstrap failed (log: $CACHE/debootstrap.log)"
	fi
	configure_base "$tmp"
	rm -rf "$base"
	mv "$tmp" "$base"
	trap - EXIT
	touch "$base/.complete"
	say "base root filesystem ready in $((SECONDS - t0)) s: $base"
	echo "$base"
}

# configure_base makes the root filesystem an appliance: a hostname, an apt source, the units a
# container or VM does not need masked (faster, quieter boots).
configure_base() {
	local r=$1
	echo mcpi-appliance >"$r/etc/hostname"
	printf '127.0.0.1 localhost mcpi-appliance\n::1 localhost\n' >"$r/etc/hosts"
	printf 'deb %s %s main\ndeb http://deb.debian.org/debian-security %s-security main\n' "$MIRROR" "$SUITE" "$SUITE" >"$r/etc/apt/sources.list"
	: >"$r/etc/machine-id" # a fresh one per boot (first boot semantics off: empty file)
	for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer systemd-timesyncd.service \
		getty@tty1.service; do
		ln -sf /dev/null "$r/etc/systemd/system/$u"
	done
	ln -sf /lib/systemd/system/multi-user.target "$r/etc/systemd/system/default.target"
	# journald: keep the journal in memory and bounded (a container or a small VM).
	mkdir -p "$r/etc/systemd/journald.conf.d"
	printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=64M\n' >"$r/etc/systemd/journald.conf.d/appliance.conf"
	chroot "$r" apt-get clean
	rm -rf "$r/var/lib/apt/lists/"*
}

cmd_prepare() {
	need_root
	local deb=${1:?usage: image.sh prepare DEB WORKDIR} work=${2:?usage: image.sh prepare DEB WORKDIR}
	[ -f "$deb" ] || die "no such package: $deb"
	deb=$(readlink -f "$deb")
	local base
	base=$(cmd_rootfs) || exit $?
	mkdir -p "$work/upper" "$work/work" "$work/root"
	mountpoint -q "$work/root" || mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/work" "$work/root"
	cp "$deb" "$work/root/var/tmp/mcpintercept.deb"
	# apt installs the local file (and nothing else: the base holds every dependency).
	systemd-nspawn -q --register=no --keep-unit --machine=mcpi-image-prep --pipe -D "$work/root" -E DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends /var/tmp/mcpintercept.deb >"$work/apt.log" 2>&1 ||
		{ cat "$work/apt.log" >&2; die "apt-get install of $deb failed"; }
	rm -f "$work/root/var/tmp/mcpintercept.deb"
	echo "$work/root"
}

cmd_boot() {
	need_root
	local root=${1:?usage: image.sh boot ROOT [NETNS]} ns=${2:-}
	# --register=no --keep-unit: no machined or host systemd needed (the container runs in the
	# caller's cgroup). The container's root gets what a VM's root has for our purposes:
	# CAP_NET_ADMIN (nspawn grants it only with a private network it made itself) and bpf(2), which
	# `mcpintercept cleanup` uses to look for eBPF links of ours.
	local args=(--boot --quiet --register=no --keep-unit --console=read-only -D "$root" --machine=mcpi-appliance
		--capability=CAP_NET_ADMIN --system-call-filter=bpf)
	if [ -n "$ns" ]; then
		[ -e "/run/netns/$ns" ] || die "no network namespace $ns (scripts/lab.sh up)"
		args+=(--network-namespace-path="/run/netns/$ns")
	fi
	exec systemd-nspawn "${args[@]}"
}

cmd_release() {
	local work=${1:?usage: image.sh release WORKDIR}
	mountpoint -q "$work/root" && umount "$work/root"
	rm -rf "$work"
}

cmd_tar() {
	local root=${1:?usage: image.sh tar ROOT OUT.tar} out=${2:?usage: image.sh tar ROOT OUT.tar}
	tar --numeric-owner --xattrs --acls -C "$root" -cf "$out" .
	say "wrote $out"
}

# cmd_disk writes what a VM boots, with qemu's or libvirt's direct kernel boot: OUTDIR/rootfs.img
# (an ext4 file system of the base plus the .deb, a Debian kernel and DHCP on every Ethernet link
# by systemd-networkd), OUTDIR/vmlinuz and OUTDIR/initrd.img. No partition table or boot loader:
# nothing here needs loop devices or udev. The kernel comes from the mirror. Not run by the tests.
cmd_disk() {
	need_root
	local deb=${1:?usage: image.sh disk DEB OUTDIR [SIZE]} out=${2:?usage: image.sh disk DEB OUTDIR [SIZE]} size=${3:-2G}
	local work root
	work=$(mktemp -d /var/tmp/mcpi-disk.XXXXXX)
	trap 'cmd_release "'"$work"'"' EXIT
	root=$(cmd_prepare "$deb" "$work")
	systemd-nspawn -q --register=no --keep-unit --machine=mcpi-image-disk --pipe -D "$root" -E DEBIAN_FRONTEND=noninteractive \
		sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends linux-image-amd64 >/dev/null && apt-get clean' ||
		die "cannot install a kernel into the image (is the mirror reachable?)"
	printf '[Match]\nType=ether\n\n[Network]\nDHCP=yes\n' >"$root/etc/systemd/network/80-dhcp.network"
	ln -sf /lib/systemd/system/systemd-networkd.service "$root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
	echo '/dev/vda / ext4 defaults 0 1' >"$root/etc/fstab"
	rm -f "$root/etc/systemd/system/getty@tty1.service"
	# A way in on the console: MCPI_DISK_ROOT_PASSWORD (none by default: root stays locked).
	if [ -n "${MCPI_DISK_ROOT_PASSWORD:-}" ]; then echo "root:$MCPI_DISK_ROOT_PASSWORD" | chroot "$root" chpasswd; fi
	mkdir -p "$out"
	cp -L "$root/vmlinuz" "$out/vmlinuz"
	cp -L "$root/initrd.img" "$out/initrd.img"
	rm -f "$out/rootfs.img"
	truncate -s "$size" "$out/rootfs.img"
	mkfs.ext4 -q -L mcpi-root -d "$root" "$out/rootfs.img"
	say "wrote $out/rootfs.img, vmlinuz, initrd.img; boot with:"
	say "  qemu-system-x86_64 -m 1024 -nographic -kernel $out/vmlinuz -initrd $out/initrd.img -append 'root=/dev/vda console=ttyS0' -drive file=$out/rootfs.img,format=raw,if=virtio -nic user,model=virtio -nic user,model=virtio"
	say "  virt-install --import --name mcpi-appliance --memory 1024 --disk $out/rootfs.img,bus=virtio --boot kernel=$out/vmlinuz,initrd=$out/initrd.img,kernel_args='root=/dev/vda console=ttyS0' --network network=default --network network=default --osinfo debian12"
}

case "${1:-}" in
rootfs) shift; cmd_rootfs "$@" ;;
prepare) shift; cmd_prepare "$@" ;;
boot) shift; cmd_boot "$@" ;;
release) shift; cmd_release "$@" ;;
tar) shift; cmd_tar "$@" ;;
disk) shift; cmd_disk "$@" ;;
*) sed -n '2,21p' "$0" >&2; exit 2 ;;
esac
