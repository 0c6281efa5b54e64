package appliance

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"mcpintercept/config"
)

// TestDumpConfigElides: what may be a secret is replaced, everything else stays as the file
// spells it.
func TestDumpConfigElides(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "introspection.secret")
	if err := os.WriteFile(secretFile, []byte("client-secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, filepath.Join(dir, "c.yaml"), `mechanism: external
external: {original_dst: local-address}
listen: {addresses: [127.0.0.1], port: 15001}
intercept: {destinations: [127.0.0.0/8], ports: [3000-3010]}
telemetry:
  otlp:
    endpoint: http://127.0.0.1:4318
    headers: {Authorization: "Bearer otlp-secret-1", x-api-key: api-secret-2}
tokens:
  opaque_tokens: introspect
  issuers:
    - {issuer: "https://idp.example", jwks_url: "https://jwks-user:jwks-pass-3@idp.example/jwks", audiences: ["https://mcp.example/mcp"]}
  introspection: {url: "https://idp.example/introspect", client_id: appliance, client_secret_file: `+secretFile+`}
routes:
  - name: lab
    match: {ports: [3000-3004]}
    tls: plaintext
    level: 1
    development: true
    token_audience: "off"
`)
	tree, err := DumpConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	dump := string(b)
	for _, tc := range []struct {
		name string
		text string
		want bool // in the dump or not
	}{
		{name: "otlp authorization header value", text: "otlp-secret-1", want: false},
		{name: "otlp api key header value", text: "api-secret-2", want: false},
		{name: "password in a URL", text: "jwks-pass-3", want: false},
		{name: "introspection secret file contents", text: "client-secret-value", want: false},
		{name: "header names stay", text: `"x-api-key":"` + Elided + `"`, want: true},
		{name: "user of a URL stays", text: "jwks-user", want: true},
		{name: "secret file path stays", text: secretFile, want: true},
		{name: "port range as the file spells it", text: `"3000-3004"`, want: true},
		{name: "route name", text: `"name":"lab"`, want: true},
		{name: "token_audience is a setting", text: `"token_audience":"off"`, want: true},
		{name: "opaque_tokens is a setting", text: `"opaque_tokens":"introspect"`, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Contains(dump, tc.text); got != tc.want {
				t.Errorf("%q in the dump: %v, want %v\n%s", tc.text, got, tc.want, dump)
			}
		})
	}
}

// TestConfigDumpEndpoint: GET /config_dump needs the admin token, elides the OTLP headers and
// shows the configuration a reload applied.
func TestConfigDumpEndpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tools")
	closed, err := net.Listen("tcp", "127.0.0.1:0") // an OTLP endpoint nobody answers on
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + closed.Addr().String()
	closed.Close()
	src := strings.NewReplacer("DIR", dir, "EXTRA", "").Replace(pinnedLike) +
		"telemetry:\n  otlp:\n    endpoint: " + endpoint + "\n    headers: {x-api-key: header-secret-value}\n"
	path := filepath.Join(t.TempDir(), "dump.yaml")
	cfg := writeConfig(t, path, src)
	cfg.Admin.Listen = "127.0.0.1:0"
	a, err := New(context.Background(), cfg, Options{Mechanism: &fakeMech{}, Listeners: []*net.TCPListener{loopbackListener(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, config.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))

	dump := func(t *testing.T, query string) ConfigDump {
		t.Helper()
		code, body := adminDo(t, a, "GET", "/config_dump"+query, token, "")
		if code != 200 {
			t.Fatalf("GET /config_dump%s: %d %s", query, code, body)
		}
		if strings.Contains(body, "header-secret-value") {
			t.Fatalf("the dump shows the OTLP header's value:\n%s", body)
		}
		var d ConfigDump
		if query == "?format=yaml" {
			err = yaml.Unmarshal([]byte(body), &d)
		} else {
			err = json.Unmarshal([]byte(body), &d)
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
		return d
	}
	routes := func(d ConfigDump) []string {
		var names []string
		c, _ := d.Config.(map[string]any)
		rs, _ := c["routes"].([]any)
		for _, r := range rs {
			if m, ok := r.(map[string]any); ok {
				names = append(names, m["name"].(string))
			}
		}
		return names
	}
	for _, tc := range []struct {
		name, token string
		code        int
	}{
		{name: "no token", token: "", code: 401},
		{name: "wrong token", token: strings.Repeat("0", 64), code: 401},
		{name: "admin token", token: token, code: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := adminDo(t, a, "GET", "/config_dump", tc.token, ""); code != tc.code {
				t.Errorf("GET /config_dump: %d, want %d\n%s", code, tc.code, body)
			} else if code != 200 && strings.Contains(body, "pinned") {
				t.Errorf("a refused request got the configuration:\n%s", body)
			}
		})
	}
	if code, _ := adminDo(t, a, "GET", "/config_dump?format=xml", token, ""); code != 400 {
		t.Errorf("format=xml: %d, want 400", code)
	}

	before := dump(t, "")
	if before.Reloaded || before.Path != path || strings.Join(routes(before), ",") != "pinned" {
		t.Fatalf("before the reload: reloaded %v, path %q, routes %v", before.Reloaded, before.Path, routes(before))
	}
	if err := os.WriteFile(path, []byte(strings.Replace(src, "  - name: pinned\n", "  - name: renamed\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(""); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"", "?format=yaml"} {
		after := dump(t, q)
		if !after.Reloaded || strings.Join(routes(after), ",") != "renamed" {
			t.Errorf("after the reload (%q): reloaded %v, routes %v", q, after.Reloaded, routes(after))
		}
	}
}
