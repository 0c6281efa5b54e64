package origin

import (
	"net"
	"net/netip"
	"testing"
)

func TestAddrPortOf(t *testing.T) {
	tests := []struct {
		name string
		addr net.Addr
		want string
		err  bool
	}{
		{name: "IPv4", addr: &net.TCPAddr{IP: net.IPv4(10, 200, 2, 2), Port: 8080}, want: "10.200.2.2:8080"},
		{name: "IPv4-mapped is unmapped", addr: &net.TCPAddr{IP: net.ParseIP("::ffff:10.200.2.2"), Port: 443}, want: "10.200.2.2:443"},
		{name: "IPv6 in brackets", addr: &net.TCPAddr{IP: net.ParseIP("fd00:200:2::2"), Port: 443}, want: "[fd00:200:2::2]:443"},
		{name: "UDP is refused", addr: &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 53}, err: true},
		{name: "nil", addr: (*net.TCPAddr)(nil), err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AddrPortOf(tc.addr)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !tc.err && got != netip.MustParseAddrPort(tc.want) {
				t.Errorf("got %v, want %s", got, tc.want)
			}
		})
	}
}
