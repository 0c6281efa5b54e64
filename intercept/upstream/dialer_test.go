package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"mcpintercept/origin"
)

// fakeResolver maps VIPs for the dialer tests.
type fakeResolver map[netip.Addr]struct {
	name  string
	addrs []netip.Addr
}

func (f fakeResolver) ResolveVIP(ctx context.Context, a netip.Addr) (string, []netip.Addr, bool, error) {
	e, ok := f[a]
	if !ok {
		if pfx("198.18.0.0/24").Contains(a) {
			return "", nil, true, origin.Refuse("unbound_vip", fmt.Errorf("VIP %s is bound to no name (never answered, or freed and forgotten)", a))
		}
		return "", nil, false, nil
	}
	return e.name, e.addrs, true, nil
}

type recordDialer struct{ got []string }

func (r *recordDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	r.got = append(r.got, address)
	return nil, errors.New("recorded")
}

func TestDenyList(t *testing.T) {
	d := NewDenyList("upstream_deny", mustPrefixes("169.254.169.254/32", "fd00:ec2::254/128", "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "::/128", "::1/128", "fe80::/10")...)
	d.Add("VIP pool", pfx("198.18.0.0/24"))
	for _, tt := range []struct {
		addr, prefix string
	}{
		{"127.0.0.1", "127.0.0.0/8"}, {"::ffff:127.0.0.1", "127.0.0.0/8"}, {"169.254.169.254", "169.254.169.254/32"},
		{"169.254.1.1", "169.254.0.0/16"}, {"fd00:ec2::254", "fd00:ec2::254/128"}, {"::1", "::1/128"},
		{"fe80::1%eth0", "fe80::/10"}, {"0.0.0.0", "0.0.0.0/8"}, {"::", "::/128"}, {"198.18.0.9", "198.18.0.0/24"},
		{"10.200.2.2", ""}, {"fd00:200:2::2", ""}, {"8.8.8.8", ""},
	} {
		err := d.Check(netip.MustParseAddr(tt.addr))
		var de *Denial
		switch {
		case tt.prefix == "" && err != nil:
			t.Errorf("%s denied: %v", tt.addr, err)
		case tt.prefix != "" && (!errors.As(err, &de) || de.Prefix.String() != tt.prefix):
			t.Errorf("%s: %v, want denied by %s", tt.addr, err, tt.prefix)
		}
	}
	var nilList *DenyList
	if nilList.Check(netip.MustParseAddr("127.0.0.1")) != nil {
		t.Error("a nil list denies")
	}
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, pfx(s))
	}
	return out
}

// TestUpstreamDialer: a VIP is dialled as its name's addresses on the client's port; a name
// resolving into the deny list is refused whole (rebinding), with the message the engine logs;
// plain destinations are checked too; an unbound VIP is refused.
func TestUpstreamDialer(t *testing.T) {
	deny := NewDenyList("upstream_deny", mustPrefixes("127.0.0.0/8", "169.254.169.254/32")...)
	deny.Add("VIP pool", pfx("198.18.0.0/24"))
	res := fakeResolver{
		netip.MustParseAddr("198.18.0.1"): {"mcp.test", []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00:1::3")}},
		netip.MustParseAddr("198.18.0.2"): {"rebind.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		netip.MustParseAddr("198.18.0.3"): {"mixed.test", []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("169.254.169.254")}},
	}
	base := &recordDialer{}
	m := NewDenyCounter()
	u := &Dialer{Base: base, Deny: deny, VIPs: res, Metrics: m}
	ctx := context.Background()
	u.DialContext(ctx, "tcp", "198.18.0.1:8443")
	if want := []string{"10.1.2.3:8443", "[fd00:1::3]:8443"}; fmt.Sprint(base.got) != fmt.Sprint(want) {
		t.Fatalf("dialled %v, want %v", base.got, want)
	}
	for _, tt := range []struct{ addr, want string }{
		{"198.18.0.2:8443", "upstream address 127.0.0.1 is in the deny list (127.0.0.0/8, upstream_deny): rebind.test resolved into it"},
		{"198.18.0.3:8443", "upstream address 169.254.169.254 is in the deny list (169.254.169.254/32, upstream_deny): mixed.test resolved into it"},
		{"198.18.0.77:8443", "VIP 198.18.0.77 is bound to no name"},
		{"127.0.0.1:80", "upstream address 127.0.0.1 is in the deny list (127.0.0.0/8, upstream_deny)"},
	} {
		base.got = nil
		_, err := u.DialContext(ctx, "tcp", tt.addr)
		if err == nil || !strings.Contains(err.Error(), tt.want) || len(base.got) != 0 {
			t.Errorf("%s: %v (dialled %v), want %q and no dial", tt.addr, err, base.got, tt.want)
		}
	}
	if v := testutil.ToFloat64(m.WithLabelValues("dns")); v != 2 {
		t.Errorf("rebinding refusals counted %v", v)
	}
	if v := testutil.ToFloat64(m.WithLabelValues("address")); v != 1 {
		t.Errorf("address refusals counted %v", v)
	}
	base.got = nil
	u.DialContext(ctx, "tcp", "10.200.2.2:8080")
	if len(base.got) != 1 {
		t.Errorf("a plain allowed destination was not dialled: %v", base.got)
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
