package intercept

import (
	"net"
	"testing"

	"mcpintercept/origin"
)

// TestOriginLocalAddress: the mechanisms that deliver TPROXY-style report the accepted socket's
// local address as the destination, under their own name, with no identity or host.
func TestOriginLocalAddress(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tests := []struct {
		name string
		mech Mechanism
		want string
	}{
		{name: "nftables-tproxy", mech: newNftables(Options{Mechanism: origin.NftablesTProxy}), want: "nftables-tproxy"},
		{name: "external local-address", mech: &external{}, want: "external"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := ln.AcceptTCP()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			o, err := tc.mech.Origin(s)
			if err != nil {
				t.Fatal(err)
			}
			dst, _ := AddrPortOf(ln.Addr())
			want := origin.Origin{Dst: dst, Mechanism: tc.want}
			if o != want {
				t.Errorf("origin %+v, want %+v", o, want)
			}
		})
	}
}
