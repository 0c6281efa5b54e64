#!/usr/bin/env bash
# The mcpintercept lab: three network namespaces joined by two veth pairs.
#
#   mcpi-client  10.200.1.2/24  fd00:200:1::2/64   default route via the appliance
#        |  veth mcpi-c0 <-> mcpi-c1
#   mcpi-appliance  10.200.1.1/24 fd00:200:1::1/64 | 10.200.2.1/24 fd00:200:2::1/64   forwarding on
#        |  veth mcpi-s1 <-> mcpi-s0
#   mcpi-server  10.200.2.2/24  fd00:200:2::2/64   default route via the appliance
#
# Usage: scripts/lab.sh up|down|status
# Both up and down are idempotent; down removes every namespace and link the lab created (the
# veth pairs live inside the namespaces, so deleting the namespaces removes them). Only addresses
# inside these namespaces ever receive test traffic.
set -euo pipefail

NS_CLIENT=mcpi-client
NS_APPLIANCE=mcpi-appliance
NS_SERVER=mcpi-server
ALL_NS=("$NS_CLIENT" "$NS_APPLIANCE" "$NS_SERVER")

die() { echo "lab: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "missing command '$1' (install: $2)"; }

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

ns_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

up() {
	[ "$(id -u)" = 0 ] || die "must run as root (network namespaces)"
	need ip iproute2
	need ping iputils-ping
	need openssl openssl
	# Start from a known state: a half-built lab from an interrupted run is rebuilt from scratch.
	if lab_complete; then
		echo "lab: already up"
		return 0
	fi
	down quiet
	for ns in "${ALL_NS[@]}"; do
		ip netns add "$ns"
		# IPv6 duplicate address detection would delay the addresses by ~2s; the lab has no
		# duplicates. Set before the links exist so they inherit it.
		in_ns "$ns" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
	done

	ip link add mcpi-c0 netns "$NS_CLIENT" type veth peer name mcpi-c1 netns "$NS_APPLIANCE"
	ip link add mcpi-s0 netns "$NS_SERVER" type veth peer name mcpi-s1 netns "$NS_APPLIANCE"

	for ns in "${ALL_NS[@]}"; do
		in_ns "$ns" ip link set lo up
	done

	in_ns "$NS_CLIENT" ip addr add 10.200.1.2/24 dev mcpi-c0
	in_ns "$NS_CLIENT" ip -6 addr add fd00:200:1::2/64 dev mcpi-c0 nodad
	in_ns "$NS_CLIENT" ip link set mcpi-c0 up
	in_ns "$NS_CLIENT" ip route add default via 10.200.1.1
	in_ns "$NS_CLIENT" ip -6 route add default via fd00:200:1::1

	in_ns "$NS_APPLIANCE" ip addr add 10.200.1.1/24 dev mcpi-c1
	in_ns "$NS_APPLIANCE" ip -6 addr add fd00:200:1::1/64 dev mcpi-c1 nodad
	in_ns "$NS_APPLIANCE" ip addr add 10.200.2.1/24 dev mcpi-s1
	in_ns "$NS_APPLIANCE" ip -6 addr add fd00:200:2::1/64 dev mcpi-s1 nodad
	in_ns "$NS_APPLIANCE" ip link set mcpi-c1 up
	in_ns "$NS_APPLIANCE" ip link set mcpi-s1 up
	in_ns "$NS_APPLIANCE" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1

	in_ns "$NS_SERVER" ip addr add 10.200.2.2/24 dev mcpi-s0
	in_ns "$NS_SERVER" ip -6 addr add fd00:200:2::2/64 dev mcpi-s0 nodad
	in_ns "$NS_SERVER" ip link set mcpi-s0 up
	in_ns "$NS_SERVER" ip route add default via 10.200.2.1
	in_ns "$NS_SERVER" ip -6 route add default via fd00:200:2::1

	# Prove the lab routes end to end before anyone relies on it.
	# Link-local addresses and neighbour discovery take a moment after the links come up.
	wait_ping 10.200.2.2 || { down quiet; die "client cannot reach 10.200.2.2"; }
	wait_ping fd00:200:2::2 || { down quiet; die "client cannot reach fd00:200:2::2"; }
	# Names for the lab server: `ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts.
	for ns in "${ALL_NS[@]}"; do
		mkdir -p "/etc/netns/$ns"
		printf '127.0.0.1 localhost\n::1 localhost\n10.200.2.2 mcp.lab.test mcp4.lab.test\nfd00:200:2::2 mcp.lab.test mcp6.lab.test\n' >"/etc/netns/$ns/hosts"
	done
	lab_pki
	echo "lab: up (${ALL_NS[*]})"
}

# lab_pki creates the lab server's own CA and certificate (what a real MCP server on the internet
# would have), so upstream verification in terminate mode has something real to verify:
# .lab/pki/server-ca.pem, .lab/pki/server.pem, .lab/pki/server-key.pem; SANs 10.200.2.2,
# fd00:200:2::2, mcp.lab.test. Kept across up/down (it is not network state); `rm -rf .lab` resets.
lab_pki() {
	local dir
	dir="$(cd "$(dirname "$0")/.." && pwd)/.lab/pki"
	[ -s "$dir/server.pem" ] && [ -s "$dir/server-key.pem" ] && [ -s "$dir/server-ca.pem" ] && [ -s "$dir/server-ca-key.pem" ] && return 0
	need openssl openssl
	mkdir -p "$dir"
	chmod 700 "$dir"
	local tmp
	tmp=$(mktemp -d)
	openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/ca-key.pem" 2>/dev/null
	openssl req -x509 -new -key "$tmp/ca-key.pem" -sha256 -days 3650 -subj "/CN=mcpintercept lab server CA" \
		-addext "basicConstraints=critical,CA:TRUE,pathlen:0" -addext "keyUsage=critical,keyCertSign,cRLSign" \
		-out "$tmp/server-ca.pem" 2>/dev/null
	openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/server-key.pem" 2>/dev/null
	openssl req -new -key "$tmp/server-key.pem" -subj "/CN=mcp.lab.test" -out "$tmp/server.csr" 2>/dev/null
	printf 'subjectAltName=DNS:mcp.lab.test,IP:10.200.2.2,IP:fd00:200:2::2\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' >"$tmp/ext.cnf"
	openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/server-ca.pem" -CAkey "$tmp/ca-key.pem" -CAcreateserial \
		-days 825 -sha256 -extfile "$tmp/ext.cnf" -out "$tmp/server.pem" 2>/dev/null
	install -m 0644 "$tmp/server-ca.pem" "$dir/server-ca.pem"
	install -m 0644 "$tmp/server.pem" "$dir/server.pem"
	install -m 0600 "$tmp/server-key.pem" "$dir/server-key.pem"
	# The lab CA's key stays too (0600): tests sign deliberately bad server certificates with it
	# (expired, wrong name) to prove the appliance refuses them.
	install -m 0600 "$tmp/ca-key.pem" "$dir/server-ca-key.pem"
	rm -rf "$tmp"
	echo "lab: created lab server PKI in $dir"
}

wait_ping() {
	local i
	for i in $(seq 1 50); do
		in_ns "$NS_CLIENT" ping -c1 -W1 "$1" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

lab_complete() {
	for ns in "${ALL_NS[@]}"; do ns_exists "$ns" || return 1; done
	in_ns "$NS_CLIENT" ip -br addr show dev mcpi-c0 2>/dev/null | grep -q 10.200.1.2 || return 1
	in_ns "$NS_SERVER" ip -br addr show dev mcpi-s0 2>/dev/null | grep -q 10.200.2.2 || return 1
	[ "$(in_ns "$NS_APPLIANCE" sysctl -n net.ipv4.ip_forward)" = 1 ] || return 1
}

down() {
	local quiet=${1:-}
	local removed=0
	for ns in "${ALL_NS[@]}"; do
		if ns_exists "$ns"; then
			# Processes still inside would keep the namespace alive; the lab owns them.
			local pids
			pids=$(ip netns pids "$ns" 2>/dev/null || true)
			[ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
			ip netns del "$ns"
			removed=1
		fi
		rm -rf "/etc/netns/$ns"
	done
	[ -n "$quiet" ] && return 0
	if [ "$removed" = 1 ]; then echo "lab: down"; else echo "lab: already down"; fi
}

status() {
	for ns in "${ALL_NS[@]}"; do
		if ns_exists "$ns"; then echo "$ns: present"; else echo "$ns: absent"; fi
	done
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
*) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
