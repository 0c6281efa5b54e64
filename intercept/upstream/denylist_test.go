package upstream

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"mcpintercept/config"
)

// TestDefaultDenyListHardened: the default upstream_deny refuses the other clouds' metadata
// addresses, site-local, and every IPv6 form that carries a denied IPv4 address (issue 16 case
// 12), while the same forms around a public address still pass (NAT64 must keep working on an
// IPv6-only network).
func TestDefaultDenyListHardened(t *testing.T) {
	d := NewDenyList("upstream_deny", config.DefaultUpstreamDeny...)
	d.Add("VIP pool", pfx("198.18.0.0/24"))
	tests := []struct {
		name, addr string
		prefix     string // "" allowed
		embedded   string
	}{
		{name: "Alibaba metadata", addr: "100.100.100.200", prefix: "100.100.100.200/32"},
		{name: "AWS IMDS IPv6", addr: "fd00:ec2::254", prefix: "fd00:ec2::254/128"},
		{name: "GCP metadata IPv6", addr: "fd20:ce::254", prefix: "fd20:ce::254/128"},
		{name: "Oracle Classic metadata", addr: "192.0.0.192", prefix: "192.0.0.192/32"},
		{name: "Azure WireServer", addr: "168.63.129.16", prefix: "168.63.129.16/32"},
		{name: "AWS ECS task metadata", addr: "169.254.170.2", prefix: "169.254.0.0/16"},
		{name: "site-local", addr: "fec0::1", prefix: "fec0::/10"},
		{name: "site-local top", addr: "feff:ffff::1", prefix: "fec0::/10"},
		{name: "NAT64 loopback", addr: "64:ff9b::7f00:1", prefix: "127.0.0.0/8", embedded: "127.0.0.1"},
		{name: "NAT64 metadata", addr: "64:ff9b::169.254.169.254", prefix: "169.254.169.254/32", embedded: "169.254.169.254"},
		{name: "NAT64 Alibaba", addr: "64:ff9b::100.100.100.200", prefix: "100.100.100.200/32", embedded: "100.100.100.200"},
		{name: "NAT64 VIP", addr: "64:ff9b::198.18.0.7", prefix: "198.18.0.0/24", embedded: "198.18.0.7"},
		{name: "NAT64 local-use /96", addr: "64:ff9b:1::127.0.0.1", prefix: "127.0.0.0/8", embedded: "127.0.0.1"},
		{name: "NAT64 local-use /48", addr: "64:ff9b:1:a9fe:a9:fe00::", prefix: "169.254.169.254/32", embedded: "169.254.169.254"},
		{name: "NAT64 local-use /64", addr: "64:ff9b:1:0:7f:0:100:0", prefix: "127.0.0.0/8", embedded: "127.0.0.1"},
		{name: "6to4 loopback", addr: "2002:7f00:1::1", prefix: "127.0.0.0/8", embedded: "127.0.0.1"},
		{name: "6to4 metadata", addr: "2002:a9fe:a9fe::", prefix: "169.254.169.254/32", embedded: "169.254.169.254"},
		{name: "Teredo client loopback", addr: "2001:0:4136:e378:8000:63bf:80ff:fffe", prefix: "127.0.0.0/8", embedded: "127.0.0.1"},
		{name: "IPv4-compatible loopback", addr: "::127.0.0.1", prefix: "127.0.0.0/8", embedded: "127.0.0.1"},
		{name: "IPv4-compatible metadata", addr: "::169.254.169.254", prefix: "169.254.169.254/32", embedded: "169.254.169.254"},
		{name: "IPv4-translated loopback", addr: "::ffff:0:127.0.0.1", prefix: "127.0.0.0/8", embedded: "127.0.0.1"},
		{name: "IPv4-mapped Alibaba", addr: "::ffff:100.100.100.200", prefix: "100.100.100.200/32"},
		{name: "NAT64 public", addr: "64:ff9b::8.8.8.8"},
		{name: "NAT64 local-use public", addr: "64:ff9b:1::8.8.8.8"},
		{name: "6to4 public", addr: "2002:808:808::1"},
		{name: "IPv4-compatible public", addr: "::8.8.8.8"},
		{name: "lab server", addr: "fd00:200:2::2"},
		{name: "CGNAT neighbour", addr: "100.100.100.201"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.Check(netip.MustParseAddr(tt.addr))
			if tt.prefix == "" {
				if err != nil {
					t.Fatalf("%s denied: %v", tt.addr, err)
				}
				return
			}
			var de *Denial
			if !errors.As(err, &de) || de.Prefix.String() != tt.prefix {
				t.Fatalf("%s: %v, want denied by %s", tt.addr, err, tt.prefix)
			}
			if got := de.Embedded.String(); tt.embedded != "" && got != tt.embedded {
				t.Fatalf("embedded %s, want %s", got, tt.embedded)
			}
			if tt.embedded != "" && !strings.Contains(err.Error(), "embeds "+tt.embedded) {
				t.Fatalf("message %q does not name the embedded address", err)
			}
		})
	}
}

// TestDenyListEmbeddedOnlyWhatIsListed: an embedded form is refused by the list's own IPv4
// entries, not by a built-in list: upstream_deny: [] denies nothing.
func TestDenyListEmbeddedOnlyWhatIsListed(t *testing.T) {
	if err := NewDenyList("upstream_deny").Check(netip.MustParseAddr("64:ff9b::7f00:1")); err != nil {
		t.Fatalf("an empty list denied: %v", err)
	}
	d := NewDenyList("upstream_deny", pfx("10.9.0.0/16"))
	if err := d.Check(netip.MustParseAddr("2002:a09:1::")); err == nil {
		t.Fatal("6to4 of a listed private prefix allowed")
	}
}

// embedForms writes v4 in every IPv6 form the deny list reads.
func embedForms(v4 [4]byte) []netip.Addr {
	var out []netip.Addr
	put := func(base string, at ...int) {
		b := netip.MustParseAddr(base).As16()
		for i, p := range at {
			b[p] = v4[i]
		}
		out = append(out, netip.AddrFrom16(b))
	}
	put("64:ff9b::", 12, 13, 14, 15)
	put("64:ff9b:1::", 12, 13, 14, 15)
	put("64:ff9b:1::", 6, 7, 9, 10)
	put("64:ff9b:1::", 7, 9, 10, 11)
	put("64:ff9b:1::", 9, 10, 11, 12)
	put("2002::", 2, 3, 4, 5)
	put("::", 12, 13, 14, 15)
	put("::ffff:0:0:0", 12, 13, 14, 15)
	t := netip.MustParseAddr("2001::").As16()
	for i := range 4 {
		t[12+i] = ^v4[i]
	}
	return append(out, netip.AddrFrom16(t))
}

// FuzzDenyListEmbedded: whatever IPv4 address, each IPv6 form carrying it is refused exactly
// when the IPv4 address itself is (a form that escapes is an SSRF path around the list).
func FuzzDenyListEmbedded(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "169.254.169.254", "100.100.100.200", "8.8.8.8", "0.0.0.0", "198.18.0.1"} {
		a := netip.MustParseAddr(s).As4()
		f.Add(a[:])
	}
	d := NewDenyList("upstream_deny", config.DefaultUpstreamDeny...)
	d.Add("VIP pool", pfx("198.18.0.0/24"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != 4 {
			return
		}
		v4 := [4]byte(b)
		denied := d.Check(netip.AddrFrom4(v4)) != nil
		for _, a := range embedForms(v4) {
			if !denied {
				// Allowed v4, yet the form may still be denied by another reading of the same
				// bits (local-use NAT64 is read four ways) or by a listed IPv6 prefix: only
				// the denied direction is an invariant.
				continue
			}
			if d.Check(a) == nil {
				t.Fatalf("%s (carrying denied %s) allowed", a, netip.AddrFrom4(v4))
			}
		}
	})
}

// TestLoopbackIsNotIPv4Compatible: ::1 and :: are IPv6's own loopback and unspecified addresses,
// decided by their own entries, never read as the IPv4-compatible 0.0.0.1 / 0.0.0.0 (exec drops
// ::1/128 from upstream_deny to reach a localhost server and keeps 0.0.0.0/8); a real
// IPv4-compatible address still is.
func TestLoopbackIsNotIPv4Compatible(t *testing.T) {
	d := NewDenyList("upstream_deny", netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("::/128"), netip.MustParsePrefix("127.0.0.0/8"))
	if err := d.Check(netip.MustParseAddr("::1")); err != nil {
		t.Errorf("::1 refused by its IPv4-compatible reading: %v", err)
	}
	if err := d.Check(netip.MustParseAddr("::")); err == nil {
		t.Errorf(":: allowed although ::/128 is listed")
	}
	if err := d.Check(netip.MustParseAddr("::7f00:1")); err == nil {
		t.Errorf("::127.0.0.1 (IPv4-compatible) allowed although 127.0.0.0/8 is listed")
	}
}
