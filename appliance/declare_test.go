package appliance

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"mcpintercept/config"
	"mcpintercept/telemetry"
)

// TestCapabilitiesOf: the levels, dispositions and routes a configuration declares, for
// configurations shaped like the lab's.
func TestCapabilitiesOf(t *testing.T) {
	const base = "mechanism: nftables-tproxy\nintercept: {destinations: [10.200.2.0/24], ports: [8080, 8443, 9443]}\n"
	const lab = base + `routes:
  - {name: lab-terminate, match: {ports: [8443]}, tls: terminate, level: 1}
  - {name: lab-passthrough, match: {ports: [9443]}, tls: passthrough}
  - {name: lab-plaintext, match: {ports: [8080]}, tls: plaintext, level: 1, development: true, strict_mcp_headers: true, allow_upgrade: [websocket]}
`
	const plain = base + "routes:\n  - {name: p, match: {ports: [8080]}, tls: plaintext, level: 1, development: true}\n"
	route := func(name string, level int) telemetry.RouteCapability {
		return telemetry.RouteCapability{Name: name, Level: level}
	}
	tests := []struct {
		name string
		src  string
		want telemetry.Capabilities
	}{
		{name: "no routes: everything forwarded untouched", src: base,
			want: telemetry.Capabilities{Dispositions: []string{"passthrough"}, Routes: []telemetry.RouteCapability{}}},
		{name: "the lab's routes", src: lab, want: telemetry.Capabilities{
			Levels: []int{1, 0}, Dispositions: []string{"terminate", "passthrough", "plaintext"},
			Routes: []telemetry.RouteCapability{route("lab-terminate", 1), route("lab-passthrough", 0),
				{Name: "lab-plaintext", Level: 1, StrictMCPHeaders: true, AllowUpgrade: []string{"websocket"}}}}},
		{name: "plaintext only: unmatched flows add passthrough", src: plain, want: telemetry.Capabilities{
			Levels: []int{1}, Dispositions: []string{"plaintext", "passthrough"}, Routes: []telemetry.RouteCapability{route("p", 1)}}},
		{name: "default_route opaque is the same", src: plain + "default_route: opaque\n", want: telemetry.Capabilities{
			Levels: []int{1}, Dispositions: []string{"plaintext", "passthrough"}, Routes: []telemetry.RouteCapability{route("p", 1)}}},
		{name: "default_route close: unmatched flows add nothing", src: plain + "default_route: close\n", want: telemetry.Capabilities{
			Levels: []int{1}, Dispositions: []string{"plaintext"}, Routes: []telemetry.RouteCapability{route("p", 1)}}},
		{name: "default_route with settings is one more route", src: plain + "default_route: {tls: terminate, level: 1}\n",
			want: telemetry.Capabilities{Levels: []int{1}, Dispositions: []string{"plaintext", "terminate"},
				Routes: []telemetry.RouteCapability{route("p", 1), route("default", 1)}}},
	}
	dir := t.TempDir()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, filepath.Join(dir, "c.yaml"), tc.src)
			got := capabilitiesOf(cfg)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("capabilities\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestDeclaration: with a configuration, the mechanism in effect and how the original destination
// reaches the engine; without one, every mechanism this build offers, none in effect.
func TestDeclaration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lab.yaml")
	writeConfig(t, path, labLike)
	tests := []struct {
		name      string
		override  config.Mechanism
		nilConfig bool
		mechs     []string
		inEffect  bool
		recovery  string
		levels    []int
	}{
		{name: "build", nilConfig: true, mechs: []string{"nftables-tproxy", "iptables-redirect", "ebpf", "dns", "external", "external"},
			levels: telemetry.BuildCapabilities.Levels},
		{name: "lab config", mechs: []string{"external"}, inEffect: true, recovery: "local address", levels: []int{1}},
		{name: "--mechanism iptables-redirect", override: config.IptablesRedirect, mechs: []string{"iptables-redirect"}, inEffect: true,
			recovery: "SO_ORIGINAL_DST", levels: []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cfg *config.Config
			if !tc.nilConfig {
				var err error
				if cfg, err = config.Load(path, config.Overrides{Mechanism: tc.override}); err != nil {
					t.Fatal(err)
				}
			}
			d := Declaration(cfg)
			var mechs []string
			for _, m := range d.Interception {
				mechs = append(mechs, m.Mechanism)
				if m.InEffect != tc.inEffect {
					t.Errorf("%s in effect %v, want %v", m.Mechanism, m.InEffect, tc.inEffect)
				}
				if !strings.Contains(m.OriginalDestination, tc.recovery) {
					t.Errorf("%s recovery %q lacks %q", m.Mechanism, m.OriginalDestination, tc.recovery)
				}
			}
			if !reflect.DeepEqual(mechs, tc.mechs) {
				t.Errorf("mechanisms %q, want %q", mechs, tc.mechs)
			}
			if !reflect.DeepEqual(d.AwarenessLevels, tc.levels) || d.ModeSet[0] != "Transparent" {
				t.Errorf("levels %v mode %v, want %v Transparent", d.AwarenessLevels, d.ModeSet, tc.levels)
			}
		})
	}
}

// The federation endpoint puts Federation in the mode set, stated with its endpoint.
func TestDeclareFederation(t *testing.T) {
	cfg := &config.Config{Path: "x.yaml", Mechanism: config.External}
	d := Declaration(cfg)
	if slices.Contains(d.ModeSet, "Federation") || d.Federation != "" {
		t.Fatalf("federation declared while off: %v", d.ModeSet)
	}
	cfg.Federation.Listen = "127.0.0.1:8765"
	cfg.Federation.Downstreams = []config.FederationDownstream{{ID: "files", URL: "http://127.0.0.1:1/mcp"}}
	d = Declaration(cfg)
	if !slices.Equal(d.ModeSet, []string{"Transparent", "Federation"}) || !strings.Contains(d.Federation, "127.0.0.1:8765/mcp, 1 downstream") {
		t.Fatalf("mode set %v, federation %q", d.ModeSet, d.Federation)
	}
	if b := Declaration(nil); !slices.Contains(b.ModeSet, "Federation") {
		t.Fatalf("the build does not declare Federation: %v", b.ModeSet)
	}
}

// TestDeclareSidecar: Sidecar is in the mode set, with its statement and the inbound mechanism,
// exactly when the inbound section is on (draft: an intermediary declares its modes).
func TestDeclareSidecar(t *testing.T) {
	cfg := &config.Config{Path: "x.yaml", Mechanism: config.External}
	if d := Declaration(cfg); slices.Contains(d.ModeSet, ModeSidecar) || d.Sidecar != "" {
		t.Fatalf("sidecar declared while off: %v", d.ModeSet)
	}
	cfg.Inbound.Ports = []config.PortRange{{From: 3001, To: 3001}}
	cfg.Inbound.ListenPort = 15006
	d := Declaration(cfg)
	if !slices.Equal(d.ModeSet, []string{"Transparent", ModeSidecar}) || !strings.Contains(d.Sidecar, "pre-request") ||
		!strings.Contains(d.Sidecar, "ports [3001]") {
		t.Fatalf("mode set %v, sidecar %q", d.ModeSet, d.Sidecar)
	}
	if !slices.ContainsFunc(d.Interception, func(i telemetry.Interception) bool { return i.Mechanism == "nftables-inbound" && i.InEffect }) {
		t.Fatalf("the inbound mechanism is not declared: %+v", d.Interception)
	}
	if b := Declaration(nil); !slices.Contains(b.ModeSet, ModeSidecar) || b.Sidecar == "" {
		t.Fatalf("the build does not declare Sidecar: %v", b.ModeSet)
	}
}

// TestDeclareCredentials: a route with credentials is declared as what it is, an explicit
// exception to the token passthrough the draft recommends in Transparent mode.
func TestDeclareCredentials(t *testing.T) {
	lvl := 2
	cfg := &config.Config{Path: "x.yaml", Mechanism: config.External, Routes: []config.Route{
		{Name: "plain", TLS: config.TLSTerminate, Level: &lvl},
	}}
	if d := Declaration(cfg); strings.Contains(d.Authentication, "injection") || strings.Contains(d.Authentication, "RFC 8693") {
		t.Fatalf("credentials declared while none: %q", d.Authentication)
	}
	in := config.Route{Name: "gh", TLS: config.TLSTerminate, Level: &lvl}
	in.Credentials.Inject.File = "/etc/x.token"
	ex := config.Route{Name: "dex", TLS: config.TLSTerminate, Level: &lvl}
	ex.Credentials.Exchange.TokenEndpoint = "https://as.test/token"
	cfg.Routes = append(cfg.Routes, in, ex)
	d := Declaration(cfg)
	for _, want := range []string{"credential injection (not token passthrough) on routes gh", "token exchange, RFC 8693 (not token passthrough) on routes dex", "DPoP-bound tokens are refused"} {
		if !strings.Contains(d.Authentication, want) {
			t.Fatalf("authentication %q lacks %q", d.Authentication, want)
		}
	}
}
