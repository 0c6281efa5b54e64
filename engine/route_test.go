package engine

import (
	"net/netip"
	"testing"
)

func TestMatchSNI(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		sni      string
		want     bool
	}{
		{"exact", []string{"mcp.lab.test"}, "mcp.lab.test", true},
		{"case and trailing dot", []string{"MCP.lab.test."}, "mcp.LAB.test.", true},
		{"other name", []string{"mcp.lab.test"}, "api.lab.test", false},
		{"wildcard one label", []string{"*.lab.test"}, "mcp.lab.test", true},
		{"wildcard several labels", []string{"*.lab.test"}, "a.b.lab.test", true},
		{"wildcard not the bare suffix", []string{"*.lab.test"}, "lab.test", false},
		{"wildcard not a lookalike", []string{"*.lab.test"}, "evillab.test", false},
		{"no sni never matches", []string{"*.lab.test"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MatchSNI(tt.patterns, tt.sni); got != tt.want {
				t.Fatalf("MatchSNI(%v, %q) = %v", tt.patterns, tt.sni, got)
			}
		})
	}
}

func TestSelectRoute(t *testing.T) {
	routes := []*Route{
		{Name: "sni-mcp", SNI: []string{"mcp.lab.test"}, Ports: []PortRange{{From: 8443, To: 8443}}, TLS: Terminate},
		{Name: "port-8443", Ports: []PortRange{{From: 8443, To: 8443}}, TLS: Passthrough},
		{Name: "clients", Clients: []netip.Prefix{netip.MustParsePrefix("10.200.1.0/24")}, Destinations: []netip.Prefix{netip.MustParsePrefix("10.200.2.0/24")}, Ports: []PortRange{{From: 3000, To: 3010}}, TLS: Plaintext},
	}
	client := netip.MustParseAddrPort("10.200.1.2:40000")
	other := netip.MustParseAddrPort("10.9.9.9:40000")
	tests := []struct {
		name      string
		client    netip.AddrPort
		dst       string
		sni       string
		want      string
		wantAsked bool
	}{
		{"sni route", client, "10.200.2.2:8443", "mcp.lab.test", "sni-mcp", true},
		{"sni differs falls through", client, "10.200.2.2:8443", "other.test", "port-8443", true},
		{"port range and client", client, "10.200.2.2:3005", "", "clients", false},
		{"client outside prefix", other, "10.200.2.2:3005", "", "default", false},
		{"nothing matches, sni never asked", client, "10.200.2.2:80", "", "default", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := 0
			r := selectRoute(routes, tt.client, netip.MustParseAddrPort(tt.dst), func() string { asked++; return tt.sni })
			if r.Name != tt.want {
				t.Fatalf("route %q, want %q", r.Name, tt.want)
			}
			if (asked > 0) != tt.wantAsked || asked > 1 {
				t.Fatalf("sni asked %d times", asked)
			}
		})
	}
}
