package config

import (
	"net/netip"
	"strings"

	"go.yaml.in/yaml/v3"
)

// parseAdminHost takes one admin.hosts entry: a DNS name or an IP address (an IPv6 one with or
// without brackets), without a port, lower-cased and without a trailing dot, as the admin
// listener compares Host values.
func parseAdminHost(n *yaml.Node) (string, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", "expected a host name such as prometheus-scrape.example or an address, got " + describe(n)
	}
	s := strings.ToLower(n.Value)
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	} else {
		s = strings.TrimSuffix(s, ".")
	}
	return s, checkAdminHost(s)
}

// checkAdminHost accepts an IP address (no zone) or a DNS name: labels of letters, digits and
// '-' (not at either end), at most 63 characters each and 253 in all. A port, a wildcard or a
// URL is refused: the listener compares the host part of Host alone.
func checkAdminHost(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		if ip.Zone() != "" {
			return "an address with a zone is not a Host value"
		}
		return ""
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, ":/") {
		return "a host name or address alone, without scheme, port or path (the port is not compared)"
	}
	if strings.Contains(s, "*") {
		return "a wildcard would answer names a DNS rebinding attacker chooses; list each name"
	}
	if len(s) > 253 {
		return "a DNS name has at most 253 characters"
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "must be a DNS name (labels of 1 to 63 letters, digits and '-', not starting or ending with '-') or an address"
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return "must be a DNS name (letters, digits, '-', '_', '.') or an address"
			}
		}
	}
	return ""
}
