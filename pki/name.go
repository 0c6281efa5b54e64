package pki

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// maxNameLen is the longest DNS name in presentation form without the trailing dot (RFC 1035).
const maxNameLen = 253

// leafName is a validated, canonical leaf subject: exactly one of host or ip is set.
type leafName struct {
	key  string // cache key and certificate CN: lower-case host, or the IP's canonical text
	ip   netip.Addr
	host string
}

// normalizeName validates a name taken from SNI or an original destination. The name arrives from
// the network, so anything outside plain LDH(+underscore) hostnames or IP literals is refused
// rather than written into a certificate.
func normalizeName(name string) (leafName, error) {
	if name == "" {
		return leafName{}, errors.New("pki: empty leaf name")
	}
	// Accept "[v6]" because callers sometimes hand over the host part of a host:port as is.
	lit := name
	if len(lit) > 2 && lit[0] == '[' && lit[len(lit)-1] == ']' {
		lit = lit[1 : len(lit)-1]
	}
	// Only names that could be literals go to ParseAddr: its error allocates, and Leaf's cache
	// hits for host names should not.
	if mayBeIP(lit) {
		if ip, err := netip.ParseAddr(lit); err == nil {
			if ip.Zone() != "" {
				return leafName{}, fmt.Errorf("pki: leaf name %q: IP with a zone cannot be certified", name)
			}
			// An IPv4 client reaching a dual-stack socket shows up as ::ffff:a.b.c.d; certify the
			// address the client actually dialled.
			ip = ip.Unmap()
			return leafName{key: ip.String(), ip: ip}, nil
		}
	}
	host := strings.TrimSuffix(name, ".")
	if host == "" {
		return leafName{}, fmt.Errorf("pki: leaf name %q is empty after removing the trailing dot", name)
	}
	if len(host) > maxNameLen {
		return leafName{}, fmt.Errorf("pki: leaf name is %d characters long, more than %d", len(host), maxNameLen)
	}
	host = strings.ToLower(host)
	for label := range strings.SplitSeq(host, ".") {
		if label == "" {
			return leafName{}, fmt.Errorf("pki: leaf name %q has an empty label", name)
		}
		if len(label) > 63 {
			return leafName{}, fmt.Errorf("pki: leaf name %q has a label longer than 63 characters", name)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' {
				continue
			}
			return leafName{}, fmt.Errorf("pki: leaf name %q has invalid character %q at label %q", name, c, label)
		}
	}
	return leafName{key: host, host: host}, nil
}

// mayBeIP is true for every string netip.ParseAddr could accept: IPv6 has a colon, IPv4 starts
// with a decimal digit.
func mayBeIP(s string) bool {
	return strings.IndexByte(s, ':') >= 0 || (s != "" && s[0] >= '0' && s[0] <= '9')
}
