#!/bin/sh
# Provisions the appliance VM: the .deb from the host's bin/, the gateway configuration, gateway
# mode persisted (forwarding, rp_filter, upstream guard), then the service enabled and started.
set -eu
deb=$(ls -t /vagrant/bin/mcpintercept_*.deb 2>/dev/null | head -1 || true)
[ -n "$deb" ] || { echo "provision: no /vagrant/bin/mcpintercept_*.deb; run 'make deb' on the host first" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -q --no-install-recommends "$deb" nftables

# The interfaces carrying the two private networks, found by address (names differ per provider).
ifname() { ip -o -4 addr show | awk -v a="$1" '$4 ~ "^"a"/" {print $2; exit}'; }
client_if=$(ifname 10.200.1.254)
upstream_if=$(ifname 10.200.2.254)
[ -n "$client_if" ] && [ -n "$upstream_if" ] || { echo "provision: private networks not found" >&2; ip -br addr >&2; exit 1; }

# Gateway configuration: the packaged example, steering the lab's server network on the ports
# MCP servers in the lab use (edit /etc/mcpintercept/mcpintercept.yaml, then systemctl reload).
sed -e 's|destinations: \[0.0.0.0/0, "::/0"\]|destinations: [10.200.2.0/24]|' \
    -e 's|ports: \[80, 443\] .*|ports: [80, 443, 8080, 8443]|' \
    /etc/mcpintercept/gateway.yaml >/etc/mcpintercept/mcpintercept.yaml
mcpintercept check --config /etc/mcpintercept/mcpintercept.yaml

/usr/share/mcpintercept/gateway.sh persist --client-if "$client_if" --upstream-if "$upstream_if"
systemctl enable --now mcpintercept
systemctl --no-pager status mcpintercept | head -5
/usr/share/mcpintercept/gateway.sh ca /vagrant/bin/mcpintercept-ca.pem
echo "provision: appliance ready; clients trust bin/mcpintercept-ca.pem (on the host)"
