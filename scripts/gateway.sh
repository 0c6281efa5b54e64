#!/usr/bin/env bash
# Gateway mode: this host routes a client network to the outside and mcpintercept intercepts the
# MCP flows its clients start. Two interfaces: CLIENT_IF faces the clients (their default route, or
# a policy route, points at this host's address there), UPSTREAM_IF faces the way out.
#
#   gateway.sh up --client-if IF --upstream-if IF [--masquerade] [--bypass-mark MARK] [--enable]
#   gateway.sh down [--upstream-if IF]
#   gateway.sh persist --client-if IF --upstream-if IF [--masquerade] [--bypass-mark MARK]
#   gateway.sh ca [OUT.pem]      export the appliance CA clients must trust
#   gateway.sh status
#
# up:
#   - forwarding on (IPv4 and IPv6); IPv6 router advertisements still accepted on UPSTREAM_IF
#     (accept_ra=2: forwarding would otherwise turn SLAAC off there);
#   - rp_filter loose (2) on both interfaces and "all": the kernel takes the stricter of "all" and
#     the interface, and strict reverse-path filtering drops clients that reach the gateway over a
#     policy route or a second link; loose still drops sources no route leads back to;
#   - the upstream guard: table `inet mcpi-gateway` marks every packet entering on UPSTREAM_IF with
#     the bypass mark (steering.bypass_mark, default 0x4d500000), which mcpintercept's steering
#     skips, so TPROXY applies on the client-facing side only (the configuration has no
#     per-interface option: destinations and ports select flows, this selects the side);
#   - with --masquerade, source NAT of forwarded traffic leaving UPSTREAM_IF (when the upstream
#     network has no route back to the client network). Intercepted flows need none: the appliance
#     dials the server from its own address;
#   - with --enable, `systemctl enable --now mcpintercept` (installs the steering).
# Non-MCP traffic (other ports, other destinations, or port-443 TLS that no terminate route names)
# is forwarded untouched. down reverses up (not the service: `systemctl disable --now
# mcpintercept`). persist writes the same as /etc/sysctl.d/60-mcpintercept-gateway.conf and
# the unit /etc/systemd/system/mcpintercept-gateway.service, so a reboot keeps it.
set -euo pipefail

TABLE=mcpi-gateway
CONFIG=${MCPINTERCEPT_CONFIG:-/etc/mcpintercept/mcpintercept.yaml}
SYSCTL_FILE=/etc/sysctl.d/60-mcpintercept-gateway.conf
UNIT_FILE=/etc/systemd/system/mcpintercept-gateway.service

die() { echo "gateway: $*" >&2; exit 1; }
say() { echo "gateway: $*" >&2; }

client_if="" upstream_if="" masquerade=0 enable=0 bypass_mark=0x4d500000
parse() {
	while [ $# -gt 0 ]; do
		case "$1" in
		--client-if) client_if=${2:?--client-if IF}; shift 2 ;;
		--upstream-if) upstream_if=${2:?--upstream-if IF}; shift 2 ;;
		--masquerade) masquerade=1; shift ;;
		--enable) enable=1; shift ;;
		--bypass-mark) bypass_mark=${2:?--bypass-mark MARK}; shift 2 ;;
		--config) CONFIG=${2:?--config FILE}; shift 2 ;;
		*) die "unknown argument $1" ;;
		esac
	done
}

need_ifs() {
	[ -n "$client_if" ] && [ -n "$upstream_if" ] || die "--client-if and --upstream-if are required"
	[ "$client_if" != "$upstream_if" ] || die "the client and upstream interfaces must differ"
	for i in "$client_if" "$upstream_if"; do
		ip link show dev "$i" >/dev/null 2>&1 || die "no interface $i"
	done
}

sysctls() {
	cat <<EOF
net.ipv4.ip_forward = 1
net.ipv6.conf.all.forwarding = 1
net.ipv6.conf.$upstream_if.accept_ra = 2
net.ipv4.conf.all.rp_filter = 2
net.ipv4.conf.$client_if.rp_filter = 2
net.ipv4.conf.$upstream_if.rp_filter = 2
EOF
}

# apply_sysctls writes only what differs, so that a host (or a container whose /proc/sys is
# read-only) already set up as a gateway passes: forwarding must be 1, rp_filter must not be
# strict (0 and 2 both do), accept_ra=2 on the upstream side matters only with SLAAC there.
apply_sysctls() {
	local key want cur
	while IFS=' =' read -r key want; do
		[ -n "$key" ] || continue
		cur=$(sysctl -n "$key" 2>/dev/null) || die "no sysctl $key"
		case "$key" in
		*.rp_filter) [ "$cur" != 1 ] && continue ;;
		*) [ "$cur" = "$want" ] && continue ;;
		esac
		if ! sysctl -q -w "$key=$want" >/dev/null 2>&1; then
			case "$key" in
			*.accept_ra) say "warning: cannot set $key=$want (IPv6 SLAAC on $upstream_if stops while forwarding)" ;;
			*) die "cannot set $key=$want (is /proc/sys writable?)" ;;
			esac
		fi
	done < <(sysctls)
}

ruleset() {
	cat <<EOF
table inet $TABLE {
	# Packets entering on the upstream side carry the bypass mark: mcpintercept never steers them.
	chain prerouting {
		type filter hook prerouting priority mangle - 10; policy accept;
		iifname "$upstream_if" meta l4proto tcp meta mark set meta mark | $bypass_mark
	}
EOF
	if [ "$masquerade" = 1 ]; then
		cat <<EOF
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "$upstream_if" iifname "$client_if" masquerade
	}
EOF
	fi
	echo "}"
}

cmd_up() {
	parse "$@"
	need_ifs
	command -v nft >/dev/null 2>&1 || die "nft is missing (apt-get install nftables)"
	apply_sysctls
	nft list table inet "$TABLE" >/dev/null 2>&1 && nft delete table inet "$TABLE"
	ruleset | nft -f -
	say "forwarding on, rp_filter loose, TCP entering on $upstream_if never steered (mark $bypass_mark)$([ "$masquerade" = 1 ] && echo ", masquerade on $upstream_if")"
	if [ -r "$CONFIG" ] && command -v mcpintercept >/dev/null 2>&1; then
		grep -Eq '^\s*bypass_mark:' "$CONFIG" && ! grep -Eq "^\s*bypass_mark:\s*$bypass_mark\b" "$CONFIG" &&
			say "warning: $CONFIG sets another steering.bypass_mark than $bypass_mark (pass --bypass-mark)"
		grep -Eq '^\s*local:\s*true' "$CONFIG" && say "note: $CONFIG steers this host's own processes too (intercept.local: true)"
	fi
	if [ "$enable" = 1 ]; then
		systemctl enable --now mcpintercept.service
		say "mcpintercept enabled and started"
	fi
}

cmd_down() {
	parse "$@"
	nft list table inet "$TABLE" >/dev/null 2>&1 && nft delete table inet "$TABLE"
	rm -f "$SYSCTL_FILE"
	if [ -f "$UNIT_FILE" ]; then
		systemctl disable mcpintercept-gateway.service >/dev/null 2>&1 || true
		rm -f "$UNIT_FILE"
		systemctl daemon-reload || true
	fi
	say "guard table removed (forwarding left as it is: sysctl -w net.ipv4.ip_forward=0 to stop routing)"
}

cmd_persist() {
	parse "$@"
	need_ifs
	sysctls >"$SYSCTL_FILE"
	local self
	self=$(readlink -f "$0")
	local args="--client-if $client_if --upstream-if $upstream_if --bypass-mark $bypass_mark"
	[ "$masquerade" = 1 ] && args+=" --masquerade"
	cat >"$UNIT_FILE" <<EOF
# Written by $self persist: the gateway's sysctls and upstream guard, before mcpintercept starts.
[Unit]
Description=mcpintercept gateway mode (forwarding, rp_filter, upstream guard)
Before=mcpintercept.service
After=network-pre.target systemd-sysctl.service
Wants=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=$self up $args
ExecStop=$self down

[Install]
WantedBy=multi-user.target
EOF
	systemctl daemon-reload
	systemctl enable --now mcpintercept-gateway.service
	say "persisted: $SYSCTL_FILE, $UNIT_FILE (enabled)"
}

cmd_ca() {
	local out=${1:-/dev/stdout}
	command -v mcpintercept >/dev/null 2>&1 || die "mcpintercept is not installed"
	# The CA directory belongs to the service user (the CA loader refuses any other owner).
	if getent passwd mcpintercept >/dev/null; then
		runuser -u mcpintercept -- mcpintercept ca init --config "$CONFIG" >/dev/null 2>&1 || true
		runuser -u mcpintercept -- mcpintercept ca export --config "$CONFIG" >"$out"
	else
		mcpintercept ca export --config "$CONFIG" >"$out"
	fi
	[ "$out" = /dev/stdout ] && return 0
	say "wrote $out; on each client:"
	cat >&2 <<EOF
  Debian/Ubuntu: cp $(basename "$out") /usr/local/share/ca-certificates/mcpintercept.crt && update-ca-certificates
  Node.js:       NODE_EXTRA_CA_CERTS=/path/$(basename "$out")
  Python/curl:   REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE = a bundle of the system roots plus this file
  Windows:       certutil -addstore -f Root $(basename "$out")
  macOS:         security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain $(basename "$out")
EOF
}

cmd_status() {
	sysctl net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv4.conf.all.rp_filter
	nft list table inet "$TABLE" 2>/dev/null || echo "no table inet $TABLE (gateway.sh up)"
	nft list table inet mcpintercept 2>/dev/null | head -20 || true
	ip rule | grep -E 'proto 245|proto 0xf5' || echo "no policy rule of mcpintercept (service stopped?)"
	systemctl is-active mcpintercept.service 2>/dev/null || true
}

[ "$(id -u)" = 0 ] || die "must run as root"
case "${1:-}" in
up) shift; cmd_up "$@" ;;
down) shift; cmd_down "$@" ;;
persist) shift; cmd_persist "$@" ;;
ca) shift; cmd_ca "$@" ;;
status) cmd_status ;;
*) sed -n '2,31p' "$0" >&2; exit 2 ;;
esac
