#!/usr/bin/env bash
# The mcpintercept lab: three network namespaces joined by two veth pairs.
#
#   mcpi-client  10.200.1.2/24  fd00:200:1::2/64   default route via the appliance
#        |  veth mcpi-c0 <-> mcpi-c1
#   mcpi-appliance  10.200.1.1/24 fd00:200:1::1/64 | 10.200.2.1/24 fd00:200:2::1/64   forwarding on
#        |  veth mcpi-s1 <-> mcpi-s0
#   mcpi-server  10.200.2.2/24  fd00:200:2::2/64   default route via the appliance
#
# The lab DNS server (dnsmasq, Debian package dnsmasq-base) runs in mcpi-server on 10.200.2.2:53
# and [fd00:200:2::2]:53, UDP and TCP, authoritative for lab.test (anything else there: NXDOMAIN;
# TTL 60; no recursion, nothing else is forwarded):
#   mcp.lab.test, *.mcp.lab.test  A 10.200.2.2, AAAA fd00:200:2::2
#   plain.lab.test                A 10.200.2.2
#   rebind.lab.test               A 127.0.0.1         (DNS rebinding, for the dns mechanism)
#   meta.lab.test                 A 169.254.169.254   (cloud metadata)
#   big.lab.test                  TXT: 40 strings of 200 bytes (truncated over UDP: TCP retry)
# Its generated config, pid file and query log (log-queries) are in .lab/dns/, removed by down.
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
	need openssl openssl
	# LAB_DNS=off (the demo): no lab DNS server, so no dnsmasq needed; names come from the
	# namespaces' hosts files either way.
	[ "${LAB_DNS:-on}" = off ] || need dnsmasq dnsmasq-base
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
	if [ "${LAB_DNS:-on}" = off ]; then
		echo "lab: up (${ALL_NS[*]}; no lab DNS server: LAB_DNS=off)"
		return 0
	fi
	lab_dns_start || { down quiet; die "the lab DNS server did not start (see $DNS_DIR/dnsmasq.log)"; }
	echo "lab: up (${ALL_NS[*]}; DNS 10.200.2.2:53)"
}

DNS_DIR="$(cd "$(dirname "$0")/.." && pwd)/.lab/dns"

# lab_dns_start writes $DNS_DIR/dnsmasq.conf and starts dnsmasq in mcpi-server (it daemonizes and
# writes its pid file once its sockets are bound), then waits until it answers over UDP and TCP.
lab_dns_start() {
	rm -rf "$DNS_DIR"
	mkdir -p "$DNS_DIR"
	{
		echo "# Generated by scripts/lab.sh up; removed by scripts/lab.sh down."
		echo "port=53"
		echo "listen-address=10.200.2.2,fd00:200:2::2"
		echo "bind-interfaces"
		echo "no-resolv"
		echo "no-hosts"
		echo "no-poll"
		echo "no-negcache"
		echo "local-ttl=60"
		echo "edns-packet-max=1232"
		echo "local=/lab.test/"
		echo "address=/mcp.lab.test/10.200.2.2"
		echo "address=/mcp.lab.test/fd00:200:2::2"
		echo "host-record=plain.lab.test,10.200.2.2"
		echo "host-record=rebind.lab.test,127.0.0.1"
		echo "host-record=meta.lab.test,169.254.169.254"
		local i
		for i in $(seq 0 39); do
			printf 'txt-record=big.lab.test,%s\n' "$(printf "%0200d" 0 | tr 0 "$((i % 10))")"
		done
		echo "user=root"
		echo "pid-file=$DNS_DIR/dnsmasq.pid"
		echo "log-queries=extra"
		echo "log-facility=$DNS_DIR/dnsmasq.log"
	} >"$DNS_DIR/dnsmasq.conf"
	in_ns "$NS_SERVER" dnsmasq --conf-file="$DNS_DIR/dnsmasq.conf" || return 1
	local i
	for i in $(seq 1 50); do
		if lab_dns_running && lab_dns_answers; then return 0; fi
		sleep 0.1
	done
	return 1
}

lab_dns_running() {
	local pid
	pid=$(cat "$DNS_DIR/dnsmasq.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dnsmasq ]
}

# lab_dns_answers: mcp.lab.test A over UDP and TCP from mcpi-server itself (bash's /dev/udp and
# /dev/tcp, no DNS client needed; one read is one datagram). The answer's last four bytes are the
# address.
lab_dns_answers() {
	local q='\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03mcp\x03lab\x04test\x00\x00\x01\x00\x01'
	in_ns "$NS_SERVER" timeout 2 bash -c '
		exec 3<>/dev/udp/10.200.2.2/53 && printf "$1" >&3 && dd bs=512 count=1 status=none <&3 | tail -c 4 | od -An -tx1 | tr -d " \n" | grep -qx 0ac80202 &&
		exec 4<>/dev/tcp/10.200.2.2/53 && printf "\x00\x1e$1" >&4 && dd bs=512 count=1 status=none <&4 | tail -c 4 | od -An -tx1 | tr -d " \n" | grep -qx 0ac80202' _ "$q"
}

lab_dns_stop() {
	local pid
	pid=$(cat "$DNS_DIR/dnsmasq.pid" 2>/dev/null || true)
	if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dnsmasq ]; then
		kill "$pid" 2>/dev/null || true
		local i
		for i in $(seq 1 50); do
			[ -d "/proc/$pid" ] || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -rf "$DNS_DIR"
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

# wait_ping waits until the client reaches $1: by ping when iputils-ping is installed, else by a
# TCP connect to a port nobody listens on (a refusal came back from the server: reachable).
wait_ping() {
	local i out
	for i in $(seq 1 50); do
		if command -v ping >/dev/null 2>&1; then
			in_ns "$NS_CLIENT" ping -c1 -W1 "$1" >/dev/null 2>&1 && return 0
		else
			out=$(in_ns "$NS_CLIENT" timeout 1 bash -c "exec 3<>/dev/tcp/$1/9" 2>&1) && return 0
			case $out in *"Connection refused"*) return 0 ;; esac
		fi
		sleep 0.1
	done
	return 1
}

lab_complete() {
	for ns in "${ALL_NS[@]}"; do ns_exists "$ns" || return 1; done
	in_ns "$NS_CLIENT" ip -br addr show dev mcpi-c0 2>/dev/null | grep -q 10.200.1.2 || return 1
	in_ns "$NS_SERVER" ip -br addr show dev mcpi-s0 2>/dev/null | grep -q 10.200.2.2 || return 1
	[ "$(in_ns "$NS_APPLIANCE" sysctl -n net.ipv4.ip_forward)" = 1 ] || return 1
	lab_dns_running || return 1
}

down() {
	local quiet=${1:-}
	local removed=0
	[ -e "$DNS_DIR" ] && removed=1
	lab_dns_stop
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
	if lab_dns_running; then echo "dns: dnsmasq pid $(cat "$DNS_DIR/dnsmasq.pid") on 10.200.2.2:53"; else echo "dns: absent"; fi
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
*) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
