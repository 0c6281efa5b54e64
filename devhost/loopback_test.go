//go:build linux

package devhost

import (
	"net/netip"
	"slices"
	"testing"

	"mcpintercept/config"
)

// TestAllowLoopback: exec's loopback steering drops exactly the loopback entries of upstream_deny
// (the command's localhost servers are dialled for it); the metadata, link-local and other
// entries stay.
func TestAllowLoopback(t *testing.T) {
	got := AllowLoopback(config.DefaultUpstreamDeny)
	for _, p := range got {
		if p.Addr().IsLoopback() {
			t.Errorf("%s kept", p)
		}
	}
	if len(got) != len(config.DefaultUpstreamDeny)-2 {
		t.Errorf("kept %d of %d: %v", len(got), len(config.DefaultUpstreamDeny), got)
	}
	for _, keep := range []string{"169.254.169.254/32", "0.0.0.0/8", "::/128", "fe80::/10"} {
		if !slices.Contains(got, netip.MustParsePrefix(keep)) {
			t.Errorf("%s dropped", keep)
		}
	}
	// A wider entry that holds loopback and more is the operator's choice: kept.
	if wide := AllowLoopback([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}); len(wide) != 1 {
		t.Errorf("0.0.0.0/0 dropped")
	}
}
