package config

import (
	"slices"
	"strings"
	"testing"
)

// TestAdminHosts: admin.hosts takes names and addresses, normalised as the admin listener
// compares Host (lower case, no trailing dot, no brackets), and refuses what is not a host.
func TestAdminHosts(t *testing.T) {
	for _, tt := range []struct {
		name    string
		src     string
		want    []string
		wantErr string
	}{
		{name: "absent", src: "", want: nil},
		{name: "names and addresses", src: "admin:\n  hosts: [Scrape.Example., 192.0.2.7, \"[2001:DB8::7]\", \"::1\"]\n", want: []string{"scrape.example", "192.0.2.7", "2001:db8::7", "::1"}},
		{name: "with a port", src: "admin:\n  hosts: [scrape.example:9464]\n", wantErr: "admin.hosts[0]: a host name or address alone"},
		{name: "a URL", src: "admin:\n  hosts: [\"http://scrape.example\"]\n", wantErr: "admin.hosts[0]: a host name or address alone"},
		{name: "a wildcard", src: "admin:\n  hosts: [\"*.example\"]\n", wantErr: "admin.hosts[0]: a wildcard"},
		{name: "empty", src: "admin:\n  hosts: [\"\"]\n", wantErr: "admin.hosts[0]: must not be empty"},
		{name: "empty label", src: "admin:\n  hosts: [a..b]\n", wantErr: "admin.hosts[0]: must be a DNS name"},
		{name: "label starting with a hyphen", src: "admin:\n  hosts: [-a.example]\n", wantErr: "admin.hosts[0]: must be a DNS name"},
		{name: "space", src: "admin:\n  hosts: [\"a b\"]\n", wantErr: "admin.hosts[0]: must be a DNS name"},
		{name: "zone", src: "admin:\n  hosts: [\"fe80::1%eth0\"]\n", wantErr: "admin.hosts[0]: an address with a zone"},
		{name: "duplicate after normalising", src: "admin:\n  hosts: [a.example, A.example.]\n", wantErr: "admin.hosts[1]: duplicate of admin.hosts[0]"},
		{name: "not a list", src: "admin:\n  hosts: a.example\n", wantErr: "admin.hosts: expected a list"},
		{name: "a number", src: "admin:\n  hosts: [1]\n", wantErr: "admin.hosts[0]: expected a host name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("admin.yaml", []byte(minimal+tt.src), Overrides{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Admin.Hosts, tt.want) {
				t.Errorf("admin.hosts = %q, want %q", c.Admin.Hosts, tt.want)
			}
		})
	}
}
