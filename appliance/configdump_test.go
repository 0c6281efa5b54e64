package appliance

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cel.dev/cel-go/common"
	"cel.dev/cel-go/parser"
	"go.yaml.in/yaml/v3"

	"mcpintercept/admin"
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
    - {issuer: "https://idp2.example", jwks_url: "https://user-token-4@idp2.example/jwks?tenant=query-secret-5&sig=query-secret-6#frag-secret-7", audiences: ["https://mcp.example/mcp"]}
  introspection: {url: "https://idp.example/introspect?api_key=query-secret-8", client_id: appliance, client_secret_file: `+secretFile+`}
routes:
  - name: lab
    match: {ports: [3000-3004]}
    tls: plaintext
    level: 1
    development: true
    token_audience: "off"
    rule_set: lits
rule_sets:
  lits:
    - name: literals
      when: |
        mcp.method == "lit-secret-10" && mcp.name != 'lit-secret-11'
        || mcp.name == "esc\"lit-secret-12\"" || mcp.name == r"lit-secret-13\"
        || mcp.name == """lit-secret-14 " still"""
        || mcp.name == '''lit-secret-15''' || b"lit-secret-16" == b'\x00'
        || size(mcp.name) == 987654 || 4242u == 4242u || 31.4159 > 2.5e3 // lit-secret-17
        || "https://u:lit-secret-18@h/?q=lit-secret-19".size() > 0
      action: deny
    - name: bucket
      when: mcp.method == "tools/call"
      action: rate_limit
      rate_limit: {key: 'client.address + "lit-secret-20"', rate: 1, burst: 1}
  hide:
    - name: canaries
      when: 'mcp.direction == "server_to_client"'
      action: redact
      reason: operator prose stays
      redact:
        paths: ['$..password']
        patterns: ['sk-live-pat-21[0-9a-z]{8}', 'canary-pat-22']
        marker: '[gone]'
tool_integrity:
  patterns:
    - {name: canary, regex: 'tool-pat-23'}
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
		{name: "user of a URL", text: "jwks-user", want: false},
		{name: "token as a URL user name", text: "user-token-4", want: false},
		{name: "query value", text: "query-secret-5", want: false},
		{name: "second query value", text: "query-secret-6", want: false},
		{name: "fragment", text: "frag-secret-7", want: false},
		{name: "query value named like a credential", text: "query-secret-8", want: false},
		{name: "query keys stay", text: "idp2.example/jwks?tenant=" + Elided + `\u0026sig=` + Elided, want: true},
		{name: "user info shown as elided", text: "https://" + Elided + "@idp.example/jwks", want: true},
		{name: "double-quoted literal", text: "lit-secret-10", want: false},
		{name: "single-quoted literal", text: "lit-secret-11", want: false},
		{name: "literal with escaped quotes", text: "lit-secret-12", want: false},
		{name: "raw literal ending in a backslash", text: "lit-secret-13", want: false},
		{name: "triple-quoted literal with a quote inside", text: "lit-secret-14", want: false},
		{name: "still inside the triple-quoted literal", text: "still", want: false},
		{name: "triple single-quoted literal", text: "lit-secret-15", want: false},
		{name: "bytes literal", text: "lit-secret-16", want: false},
		{name: "int literal", text: "987654", want: false},
		{name: "uint literal", text: "4242u", want: false},
		{name: "float literals", text: "31.4159", want: false},
		{name: "exponent literal", text: "2.5e3", want: false},
		{name: "comment", text: "lit-secret-17", want: false},
		{name: "URL inside a literal", text: "lit-secret-18", want: false},
		{name: "query inside a literal", text: "lit-secret-19", want: false},
		{name: "rate limit key literal", text: "lit-secret-20", want: false},
		{name: "expression shape stays", text: `mcp.method == \"` + Elided + `\" \u0026\u0026 mcp.name != '` + Elided + `'`, want: true},
		{name: "bytes shape stays", text: `b\"` + Elided + `\" == b'` + Elided + `'`, want: true},
		{name: "numbers shape stays", text: "size(mcp.name) == " + Elided, want: true},
		{name: "rate limit key shape stays", text: `"key":"client.address + \"` + Elided + `\""`, want: true},
		{name: "redact pattern", text: "sk-live-pat-21", want: false},
		{name: "second redact pattern", text: "canary-pat-22", want: false},
		{name: "redact patterns counted", text: `"patterns":["` + Elided + `","` + Elided + `"]`, want: true},
		{name: "redact paths stay", text: `"paths":["$..password"]`, want: true},
		{name: "redact marker stays", text: `"marker":"[gone]"`, want: true},
		{name: "rule reason stays", text: "operator prose stays", want: true},
		{name: "tool integrity pattern", text: "tool-pat-23", want: false},
		{name: "tool integrity pattern name stays", text: `"name":"canary","regex":"` + Elided + `"`, want: true},
		{name: "secret file path stays", text: secretFile, want: true},
		{name: "port range as the file spells it", text: `"3000-3004"`, want: true},
		{name: "route name", text: `"name":"lab"`, want: true},
		{name: "token_audience is a setting", text: `"token_audience":"off"`, want: true},
		{name: "opaque_tokens is a setting", text: `"opaque_tokens":"introspect"`, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Contains(dump, tc.text); got != tc.want {
				t.Errorf("%q in the dump: %v, want %v", tc.text, got, tc.want)
			}
		})
	}
	if t.Failed() {
		t.Logf("the dump:\n%s", dump)
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

	dump := func(t *testing.T, query string) admin.ConfigDump {
		t.Helper()
		code, body := adminDo(t, a, "GET", "/config_dump"+query, token, "")
		if code != 200 {
			t.Fatalf("GET /config_dump%s: %d %s", query, code, body)
		}
		if strings.Contains(body, "header-secret-value") {
			t.Fatalf("the dump shows the OTLP header's value:\n%s", body)
		}
		var d admin.ConfigDump
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
	routes := func(d admin.ConfigDump) []string {
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

// TestElideCEL: every literal and comment goes, where CEL's lexer ends it (escaped quotes, raw,
// triple-quoted, bytes), the rest of the expression stays as written and still parses.
func TestElideCEL(t *testing.T) {
	for _, tt := range []struct {
		name, src, want string
	}{
		{name: "double quotes", src: `mcp.name == "s3cret"`, want: `mcp.name == "[elided]"`},
		{name: "single quotes", src: `mcp.name == 's3cret'`, want: `mcp.name == '[elided]'`},
		{name: "escaped quote", src: `x == "a\"s3cret" && y`, want: `x == "[elided]" && y`},
		{name: "escaped backslash before the quote", src: `x == "a\\" + "s3cret"`, want: `x == "[elided]" + "[elided]"`},
		{name: "raw string ending in a backslash", src: `x == r"s3cret\" || y == "z"`, want: `x == r"[elided]" || y == "[elided]"`},
		{name: "raw upper case", src: `x == R's3cret'`, want: `x == R'[elided]'`},
		{name: "triple double quotes with quotes inside", src: `x == """s3cret "q" ""x"" """ && y`, want: `x == """[elided]""" && y`},
		{name: "triple single quotes over lines", src: "x == '''line1\ns3cret''' && y", want: `x == '''[elided]''' && y`},
		{name: "bytes", src: `x == b"s3cret" || x == B'\x00\377'`, want: `x == b"[elided]" || x == B'[elided]'`},
		{name: "raw bytes", src: `x == br"s3cret\" || x == bR'z'`, want: `x == br"[elided]" || x == bR'[elided]'`},
		{name: "numbers", src: `size(x) > 10 && y == -42 && z == 7u && w < 3.5e-2 && h == 0xFF`, want: `size(x) > [elided] && y == -[elided] && z == [elided] && w < [elided] && h == [elided]`},
		{name: "comment", src: "x == 1 // s3cret\n&& y", want: "x == [elided] // [elided]\n&& y"},
		{name: "slashes inside a string are not a comment", src: `x == "http://s3cret" && y`, want: `x == "[elided]" && y`},
		{name: "quote inside a comment", src: "x // it's s3cret\n|| y == 'z'", want: "x // [elided]\n|| y == '[elided]'"},
		{name: "map and list literals", src: `{"k": "s3cret", 'k2': [1, "v"]}["k"]`, want: `{"[elided]": "[elided]", '[elided]': [[elided], "[elided]"]}["[elided]"]`},
		{name: "escaped identifier stays", src: "x.`my-field` == 's3cret'", want: "x.`my-field` == '[elided]'"},
		{name: "booleans and null stay", src: `x == true || y != null || z == false`, want: `x == true || y != null || z == false`},
		{name: "non-ASCII before a literal", src: `"é" == x && y == "s3cret"`, want: `"[elided]" == x && y == "[elided]"`},
		{name: "identifiers with digits stay", src: `x1 == v2`, want: `x1 == v2`},
		{name: "unterminated string elided whole", src: `x == "s3cret`, want: Elided},
		{name: "unlexable elided whole", src: `x == # s3cret`, want: Elided},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ElideCEL(tt.src)
			if got != tt.want {
				t.Errorf("ElideCEL(%q)\n got %q\nwant %q", tt.src, got, tt.want)
			}
			if strings.Contains(got, "s3cret") {
				t.Errorf("the literal survived: %q", got)
			}
			if tt.want != Elided {
				if err := celParses(tt.src); err != nil {
					t.Fatalf("test input is not CEL: %v", err)
				}
				if err := celParses(got); err != nil {
					t.Errorf("the elided expression no longer parses: %v\n%s", err, got)
				}
			}
		})
	}
}

// TestElideURL: the whole user information, query values and the fragment of every URL go; the
// scheme, host, path and query keys stay.
func TestElideURL(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
	}{
		{name: "user and password", in: "https://u:p@h.example/x", want: "https://[elided]@h.example/x"},
		{name: "token as the user name", in: "https://tok123@h.example/", want: "https://[elided]@h.example/"},
		{name: "at sign in the password", in: "https://u:p@ss@h.example/", want: "https://[elided]@h.example/"},
		// A password or token written with an unescaped '/', '?', '#' or '\\' ends the authority
		// early for every parser: whatever precedes the last '@' may be user information, so a
		// URL with an '@' past the authority is elided after its scheme (an '@' in a path or a
		// query, rare in configured URLs, costs the host's display).
		{name: "slash in the password", in: "https://user:pa/ss@host.example/x", want: "https://[elided]"},
		{name: "question mark in the password", in: "https://user:pa?ss@host.example/x", want: "https://[elided]"},
		{name: "number sign in the password", in: "https://user:pa#ss@host.example/x", want: "https://[elided]"},
		{name: "backslash in the password", in: "https://user:pa\\ss@host.example/x", want: "https://[elided]"},
		{name: "base64 token with a slash as the user name", in: "https://AbC/dEf+g@h.example/", want: "https://[elided]"},
		{name: "at sign in the path", in: "https://h.example/a@b", want: "https://[elided]"},
		{name: "at sign in the query", in: "https://h.example?x=a@b", want: "https://[elided]"},
		{name: "at sign in the fragment", in: "https://h.example/#a@b", want: "https://[elided]"},
		{name: "query values", in: "https://h.example/p?tenant=t1&sig=abc&empty=&flag", want: "https://h.example/p?tenant=[elided]&sig=[elided]&empty=&[elided]"},
		{name: "semicolon stays inside a value", in: "https://h/?a=1;b=2", want: "https://h/?a=[elided]"},
		{name: "fragment", in: "https://h/p#access_token=abc", want: "https://h/p#[elided]"},
		{name: "empty fragment and query", in: "https://h/p?#", want: "https://h/p?#"},
		{name: "no URL", in: "plain text, host:443", want: "plain text, host:443"},
		{name: "URL inside text", in: "see https://u@h/?k=v and http://h2/?a=b.", want: "see https://[elided]@h/?k=[elided] and http://h2/?a=[elided]"},
		{name: "nested URL in a value", in: "https://h/?r=https://u:p@x/", want: "https://[elided]"}, // an '@' past the authority
		{name: "nested URL in a value, no user info", in: "https://h/?r=https://x/", want: "https://h/?r=[elided]"},
		{name: "host and port stay", in: "http://127.0.0.1:4318/v1/traces", want: "http://127.0.0.1:4318/v1/traces"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := elideURL(tt.in); got != tt.want {
				t.Errorf("elideURL(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func celParses(src string) error {
	p, err := parser.NewParser(parser.Macros(parser.AllMacros...), parser.EnableOptionalSyntax(true))
	if err != nil {
		return err
	}
	if _, iss := p.Parse(common.NewTextSource(src)); len(iss.GetErrors()) > 0 {
		return errors.New(iss.ToDisplayString())
	}
	return nil
}

// TestAdminHostsWired: admin.hosts reaches the admin listener: its name is answered, another
// name gets 421 — /config_dump included, token or not.
func TestAdminHostsWired(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tools")
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "hosts.yaml"), strings.NewReplacer("DIR", dir, "EXTRA", "").Replace(pinnedLike))
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Admin.Hosts = []string{"scrape.example"}
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
	for _, tt := range []struct {
		name, path, host string
		want             int
	}{
		{name: "metrics by the configured name", path: "/metrics", host: "scrape.example:9464", want: 200},
		{name: "metrics by another name", path: "/metrics", host: "rebind.attacker.example:9464", want: 421},
		{name: "tools by another name", path: "/tools", host: "rebind.attacker.example", want: 421},
		{name: "config_dump by another name, with the token", path: "/config_dump", host: "rebind.attacker.example", want: 421},
		{name: "config_dump on loopback", path: "/config_dump", host: "127.0.0.1", want: 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", "http://"+a.AdminAddr().String()+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("GET %s Host %s: %d, want %d", tt.path, tt.host, resp.StatusCode, tt.want)
			}
		})
	}
}
