//go:build linux

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestExternalMechanism: with `mechanism: external` the appliance installs nothing and serves flows
// that the operator's own infrastructure delivers — here rules the test installs itself with the
// system tools, as an operator would — in both documented styles: TPROXY-style (the accepted
// socket's local address is the original destination) and NAT-style (SO_ORIGINAL_DST). "An
// intermediary that accepts an integration-provided backend selection conforms to this section
// without implementing any interception mechanism of its own" (draft, Transparent Mode, General
// Requirements).
func TestExternalMechanism(t *testing.T) {
	needLab(t)
	goServer(t)
	want := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")
	cases := []struct {
		name, originalDst, listen string
		install, remove           [][]string
	}{
		{
			name: "tproxy-style", originalDst: "local-address", listen: "[127.0.0.1]",
			install: [][]string{
				{"nft", "add table ip opsteer"},
				{"nft", "add chain ip opsteer pre { type filter hook prerouting priority mangle; }"},
				{"nft", "add rule ip opsteer pre ip daddr 10.200.2.2 tcp dport 8080 meta mark set 0x77 tproxy to 127.0.0.1:15001 accept"},
				{"ip", "rule", "add", "fwmark", "0x77", "lookup", "177"},
				{"ip", "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "177"},
			},
			remove: [][]string{
				{"nft", "delete table ip opsteer"},
				{"ip", "rule", "del", "fwmark", "0x77", "lookup", "177"},
				{"ip", "route", "del", "local", "0.0.0.0/0", "dev", "lo", "table", "177"},
			},
		},
		{
			name: "nat-style", originalDst: "so-original-dst", listen: "[0.0.0.0]",
			install: [][]string{
				{"iptables", "-t", "nat", "-A", "PREROUTING", "-d", "10.200.2.2", "-p", "tcp", "--dport", "8080", "-j", "REDIRECT", "--to-ports", "15001"},
			},
			remove: [][]string{
				{"iptables", "-t", "nat", "-D", "PREROUTING", "-d", "10.200.2.2", "-p", "tcp", "--dport", "8080", "-j", "REDIRECT", "--to-ports", "15001"},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := "mechanism: external\nlisten: {port: 15001, addresses: " + c.listen + "}\n" +
				"intercept: {destinations: [10.200.2.0/24], ports: [8080]}\n" +
				"external: {original_dst: " + c.originalDst + "}\n"
			a := startAppliance(t, "external", cfg)
			if left := oursLeft(steeringState(t)); len(left) > 0 {
				t.Fatalf("external installed steering of its own:\n%s", strings.Join(left, "\n"))
			}
			for _, cmd := range c.install {
				runT(t, 10*time.Second, nsAppliance, cmd[0], cmd[1:]...)
			}
			t.Cleanup(func() {
				for _, cmd := range c.remove {
					run(context.Background(), nsAppliance, cmd[0], cmd[1:]...)
				}
			})
			if got := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp"); got != want {
				t.Errorf("through external %s:\n%s\nwant\n%s", c.name, got, want)
			}
			recs := a.stopGracefully(t)
			n := 0
			for _, r := range recs {
				if r.Mechanism == "external" && r.OrigDst == "10.200.2.2:8080" && strings.HasPrefix(r.Client, "10.200.1.2:") {
					n++
				}
			}
			if n == 0 {
				t.Errorf("no flow record with the original destination:\n%s", a.stdout)
			}
		})
	}
}
