package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// fedOn is a valid federation section on line 4 of a file: listen on line 5, downstreams[0] on
// line 7. Cases append keys to downstreams[0] (line 8 on) or replace lines.
const fedOn = minimal + "federation:\n  listen: 127.0.0.1:8765\n  downstreams:\n    - id: files\n      url: https://files.example/mcp\n"

// fedContract is the section as the users write it (the contract with the lead).
const fedContract = minimal + `audit: {dir: /var/lib/mcpintercept/audit}
federation:
  listen: 127.0.0.1:8765
  tls: {cert_file: a.pem, key_file: a.key}
  development: false
  refresh: 60s
  rule_set: federation
  limits: {pages: 8, tools: 1000, bytes: 4MiB, result_bytes: 4MiB, request_bytes: 1MiB}
  aggregate_limits: {tools: 5000}
  downstreams:
    - {id: files, url: https://files.example/mcp, headers: {Authorization: {file: /etc/mcpintercept/files.token}, X-Team: {value: blue}}, ca_file: ca.pem, timeout: 30s}
rule_sets:
  federation:
    - {name: d, action: deny, when: 'false'}
`

func TestFederationDefaults(t *testing.T) {
	defaults := FederationConfig{
		Refresh: Duration{DefaultFederationRefresh}, ToolPins: Off, TokenAudience: On,
		Limits: FederationLimits{Pages: DefaultFederationPages, Tools: DefaultFederationTools, Bytes: DefaultFederationBytes,
			ResultBytes: DefaultFederationResultBytes, RequestBytes: DefaultFederationRequestBytes},
		AggregateLimits: FederationAggregateLimits{Tools: DefaultFederationAggregate},
	}
	on := defaults
	on.Listen = "127.0.0.1:8765"
	on.Downstreams = []FederationDownstream{{ID: "files", URL: "https://files.example/mcp", Timeout: Duration{DefaultFederationTimeout}}}
	for _, tt := range []struct {
		name, src string
		want      FederationConfig
	}{
		{"no section: off, with the section's defaults", minimal, defaults},
		{"empty section", minimal + "federation: {}\n", defaults},
		{"explicit empty listen", minimal + "federation: {listen: \"\"}\n", defaults},
		{"on: a downstream gets its timeout", fedOn, on},
		{"explicit values at the bounds are kept", minimal + "federation:\n" +
			"  refresh: 1s\n  limits: {pages: 1000, tools: 1, bytes: 1KiB, result_bytes: 256MiB, request_bytes: 1024}\n" +
			"  aggregate_limits: {tools: 1000000}\n  downstreams: [{id: a, url: 'http://a', timeout: 100ms}, {id: b, url: 'http://b', timeout: 10m}]\n",
			FederationConfig{Refresh: Duration{time.Second}, ToolPins: Off, TokenAudience: On,
				Limits:          FederationLimits{Pages: 1000, Tools: 1, Bytes: 1 << 10, ResultBytes: 256 << 20, RequestBytes: 1024},
				AggregateLimits: FederationAggregateLimits{Tools: 1_000_000},
				Downstreams: []FederationDownstream{
					{ID: "a", URL: "http://a", Timeout: Duration{100 * time.Millisecond}},
					{ID: "b", URL: "http://b", Timeout: Duration{10 * time.Minute}}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.src, Overrides{})
			if !reflect.DeepEqual(c.Federation, tt.want) {
				t.Errorf("got  %+v\nwant %+v", c.Federation, tt.want)
			}
			if c.FederationOn() != (tt.want.Listen != "") {
				t.Errorf("FederationOn() = %v", c.FederationOn())
			}
			if err := c.Validate(); err != nil {
				t.Errorf("does not re-validate: %v", err)
			}
		})
	}
	t.Run("Default has the section's defaults", func(t *testing.T) {
		if got := Default(NftablesTProxy).Federation; !reflect.DeepEqual(got, defaults) {
			t.Errorf("got %+v", got)
		}
	})
}

// TestFederationContract: every key of the contract, its relative paths resolved against the
// config file's directory (as ca.dir and the *_file keys are), headers in file order.
func TestFederationContract(t *testing.T) {
	want := func(dir string) FederationConfig {
		p := func(s string) string {
			if dir == "" {
				return s
			}
			return dir + "/" + s
		}
		return FederationConfig{
			Listen:          "127.0.0.1:8765",
			TLS:             FederationTLS{CertFile: p("a.pem"), KeyFile: p("a.key")},
			Refresh:         Duration{time.Minute},
			RuleSet:         "federation",
			ToolPins:        Off,
			TokenAudience:   On,
			Limits:          FederationLimits{Pages: 8, Tools: 1000, Bytes: 4 << 20, ResultBytes: 4 << 20, RequestBytes: 1 << 20},
			AggregateLimits: FederationAggregateLimits{Tools: 5000},
			Downstreams: []FederationDownstream{{
				ID: "files", URL: "https://files.example/mcp",
				Headers: map[string]FederationHeader{
					"Authorization": {File: "/etc/mcpintercept/files.token"},
					"X-Team":        {Value: "blue"},
				},
				HeaderOrder: []string{"Authorization", "X-Team"},
				CAFile:      p("ca.pem"),
				Timeout:     Duration{30 * time.Second},
			}},
		}
	}
	for _, tt := range []struct{ name, file, dir string }{
		{"absolute config path", "/etc/mcpintercept/config.yaml", "/etc/mcpintercept"},
		{"relative config path", "conf/mcpi.yaml", "conf"},
		{"config in the working directory", "mcpi.yaml", ""},
		{"no file name: left as written", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.file, []byte(fedContract), Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			if w := want(tt.dir); !reflect.DeepEqual(c.Federation, w) {
				t.Errorf("got  %+v\nwant %+v", c.Federation, w)
			}
			roundTrip(t, c)
		})
	}
}

// TestFederationHeaderFile: a header's file is relative to the config file, an absolute one
// stays, like every other *_file key.
func TestFederationHeaderFile(t *testing.T) {
	for _, tt := range []struct{ name, config, file, want string }{
		{"relative to an absolute config path", "/etc/mcpintercept/config.yaml", "files.token", "/etc/mcpintercept/files.token"},
		{"up from a relative config path", "conf/mcpi.yaml", "../secrets/t", "secrets/t"},
		{"absolute stays", "conf/mcpi.yaml", "/run/secrets/t", "/run/secrets/t"},
		{"no file name: as written", "", "./t", "./t"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.config, []byte(fedOn+"      headers: {Authorization: {file: '"+tt.file+"'}}\n"), Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Federation.Downstreams[0].Headers["Authorization"].File; got != tt.want {
				t.Errorf("file = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFederationValid(t *testing.T) {
	for _, tt := range []struct{ name, src string }{
		{"every address of loopback", strings.Replace(fedOn, "127.0.0.1:8765", "127.9.9.9:8765", 1)},
		{"IPv6 loopback", strings.Replace(fedOn, "127.0.0.1:8765", "\"[::1]:8765\"", 1)},
		{"localhost", strings.Replace(fedOn, "127.0.0.1:8765", "localhost:8765", 1)},
		{"non-loopback with tls", strings.Replace(fedOn, "127.0.0.1:8765", "0.0.0.0:8765\n  tls: {cert_file: c.pem, key_file: c.key}", 1)},
		{"non-loopback plaintext in development", strings.Replace(fedOn, "127.0.0.1:8765", "10.0.0.1:8765\n  development: true", 1)},
		{"plaintext url to a non-loopback host (lab)", strings.Replace(fedOn, "https://files.example/mcp", "http://10.200.3.7:8080/mcp?x=1", 1)},
		{"upper-case scheme", strings.Replace(fedOn, "https://files.example/mcp", "HTTPS://files.example/mcp", 1)},
		{"off: no downstream needed, rule_set not looked up, audit.fail open", minimal + "audit: {fail: open}\nfederation: {rule_set: nowhere}\n"},
		{"ids at the edges of their syntax", fedOn + "    - {id: 0_-, url: 'https://b'}\n    - {id: " + strings.Repeat("z", 63) + ", url: 'https://c'}\n"},
		{"header names that only look odd", fedOn + "      headers: {x_api-key: {value: k}, \"true\": {value: v}, \"!#$%&'*+.^_`|~\": {value: w}}\n"},
		{"a header value with a tab", fedOn + "      headers: {X-A: {value: \"a\\tb\"}}\n"},
		{"empty headers", fedOn + "      headers: {}\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.src, Overrides{})
			if err := c.Validate(); err != nil {
				t.Errorf("does not re-validate: %v", err)
			}
			roundTrip(t, c)
		})
	}
}

// TestFederationErrors pins every refusal of the section with its position and its exact text.
func TestFederationErrors(t *testing.T) {
	ds := func(extra string) string { return fedOn + "      " + extra + "\n" } // downstreams[0]'s next key, line 9
	listen := func(l string) string { return strings.Replace(fedOn, "127.0.0.1:8765", l, 1) }
	sec := func(body string) string { return minimal + "federation:\n" + body } // body from line 5
	for _, tt := range []struct {
		name, src string
		want      []string
	}{
		// Bounds of each value, decoded or validated.
		{"refresh too short", sec("  refresh: 500ms\n"), []string{"test.yaml:5:12: federation.refresh: must be between 1s and 24h0m0s, got 500ms"}},
		{"refresh too long", sec("  refresh: 25h\n"), []string{"test.yaml:5:12: federation.refresh: must be between 1s and 24h0m0s, got 25h0m0s"}},
		{"refresh without a unit", sec("  refresh: 60\n"), []string{`test.yaml:5:12: federation.refresh: invalid duration "60": write a number with a unit, e.g. "5s" or "1m30s"`}},
		{"pages 0", sec("  limits: {pages: 0}\n"), []string{"test.yaml:5:19: federation.limits.pages: must be between 1 and 1000, got 0"}},
		{"pages too many", sec("  limits: {pages: 1001}\n"), []string{"test.yaml:5:19: federation.limits.pages: must be between 1 and 1000, got 1001"}},
		{"tools too many", sec("  limits: {tools: 100001}\n"), []string{"test.yaml:5:19: federation.limits.tools: must be between 1 and 100000, got 100001"}},
		{"bytes too few", sec("  limits: {bytes: 1023}\n"), []string{"test.yaml:5:19: federation.limits.bytes: must be between 1KiB (1024) and 256MiB (268435456), got 1023"}},
		{"bytes too many", sec("  limits: {bytes: 257MiB}\n"), []string{"test.yaml:5:19: federation.limits.bytes: must be between 1KiB (1024) and 256MiB (268435456), got 269484032"}},
		{"bytes in MB", sec("  limits: {bytes: 4MB}\n"), []string{`test.yaml:5:19: federation.limits.bytes: invalid size "4MB": write bytes, or a whole number with KiB, MiB, GiB or TiB, e.g. "100MiB"`}},
		{"result_bytes too many", sec("  limits: {result_bytes: 1GiB}\n"), []string{"test.yaml:5:26: federation.limits.result_bytes: must be between 1KiB (1024) and 256MiB (268435456), got 1073741824"}},
		{"request_bytes 0", sec("  limits: {request_bytes: 0}\n"), []string{"test.yaml:5:27: federation.limits.request_bytes: must be between 1KiB (1024) and 256MiB (268435456), got 0"}},
		{"aggregate tools 0", sec("  aggregate_limits: {tools: 0}\n"), []string{"test.yaml:5:29: federation.aggregate_limits.tools: must be between 1 and 1000000, got 0"}},
		{"aggregate tools too many", sec("  aggregate_limits: {tools: 1000001}\n"), []string{"test.yaml:5:29: federation.aggregate_limits.tools: must be between 1 and 1000000, got 1000001"}},
		{"timeout too short", ds("timeout: 99ms"), []string{"test.yaml:9:16: federation.downstreams[0].timeout: must be between 100ms and 10m0s, got 99ms"}},
		{"timeout too long", ds("timeout: 11m"), []string{"test.yaml:9:16: federation.downstreams[0].timeout: must be between 100ms and 10m0s, got 11m0s"}},
		{"development not a boolean", sec("  development: yes please\n"), []string{`test.yaml:5:16: federation.development: expected true or false, got string "yes please"`}},

		// listen.
		{"listen without a port", listen("127.0.0.1"), []string{`test.yaml:5:11: federation.listen: must be host:port such as 127.0.0.1:8765 or "[::1]:8765" ("" leaves federation off), got "127.0.0.1"`}},
		{"listen not a string", listen("8765"), []string{"test.yaml:5:11: federation.listen: expected a string, got integer 8765"}},
		{"listen without a host", listen(`":8765"`), []string{`test.yaml:5:11: federation.listen: needs a host: an IP address or localhost (for every address, say so: 0.0.0.0 or "[::]")`}},
		{"listen on a name", listen("mcp.example:8765"), []string{`test.yaml:5:11: federation.listen: host "mcp.example" must be an IP address or localhost (a name could resolve elsewhere)`}},
		{"listen port 0", listen("127.0.0.1:0"), []string{`test.yaml:5:11: federation.listen: port "0" must be a number between 1 and 65535`}},
		{"listen port too large", listen("127.0.0.1:65536"), []string{`test.yaml:5:11: federation.listen: port "65536" must be a number between 1 and 65535`}},
		{"listen with a zone", listen(`"[fe80::1%eth0]:8765"`), []string{`test.yaml:5:11: federation.listen: host "fe80::1%eth0": an address with a zone is not supported`}},
		{"plaintext on every address", listen("0.0.0.0:8765"), []string{`test.yaml:5:11: federation.listen: not a loopback address, and federation.tls is not set: clients' calls and the tokens they carry would cross the network in plaintext; set tls (cert_file and key_file), listen on 127.0.0.1 or "[::1]", or set development: true`}},
		{"plaintext on a LAN address, development false", listen("192.0.2.1:8765\n  development: false"), []string{`test.yaml:5:11: federation.listen: not a loopback address, and federation.tls is not set: clients' calls and the tokens they carry would cross the network in plaintext; set tls (cert_file and key_file), listen on 127.0.0.1 or "[::1]", or set development: true`}},

		// tls.
		{"cert_file without key_file", listen("127.0.0.1:8765\n  tls: {cert_file: c.pem}"), []string{"test.yaml:6:3: federation.tls.key_file: required with cert_file: the certificate's private key (PEM)"}},
		{"key_file without cert_file, federation off", sec("  tls: {key_file: c.key}\n"), []string{"test.yaml:5:3: federation.tls.cert_file: required with key_file: the endpoint's certificate (PEM)"}},
		{"half a tls: its own error only", listen("10.0.0.1:8765\n  tls: {cert_file: c.pem}"), []string{
			"test.yaml:6:3: federation.tls.key_file: required with cert_file: the certificate's private key (PEM)"}},

		// downstreams: the list.
		{"listen without downstreams", sec("  listen: 127.0.0.1:8765\n"), []string{"test.yaml:5:11: federation.downstreams: required with federation.listen: at least one downstream, e.g. [{id: files, url: https://files.example/mcp}]"}},
		{"listen with an empty list", sec("  listen: 127.0.0.1:8765\n  downstreams: []\n"), []string{"test.yaml:6:16: federation.downstreams: required with federation.listen: at least one downstream, e.g. [{id: files, url: https://files.example/mcp}]"}},
		{"downstreams not a list", sec("  downstreams: {id: a}\n"), []string{"test.yaml:5:16: federation.downstreams: expected a list of downstreams, got a mapping"}},
		{"a downstream not a mapping", sec("  downstreams: [files]\n"), []string{`test.yaml:5:17: federation.downstreams[0]: expected a mapping, got string "files"`}},

		// id.
		{"id missing", strings.Replace(fedOn, "- id: files\n      url", "- url", 1), []string{"test.yaml:7:7: federation.downstreams[0].id: required: the downstream's id, which prefixes its tools' names (<id>.<tool>), e.g. files"}},
		{"id with a dot", strings.Replace(fedOn, "id: files", "id: files.v2", 1), []string{`test.yaml:7:11: federation.downstreams[0].id: invalid id "files.v2": '.' separates the id from the tool name in published names (<id>.<tool>), so an id cannot contain one; use '-' or '_'`}},
		{"id in upper case", strings.Replace(fedOn, "id: files", "id: Files", 1), []string{`test.yaml:7:11: federation.downstreams[0].id: invalid id "Files": lower-case letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters`}},
		{"id starting with '-'", strings.Replace(fedOn, "id: files", "id: -files", 1), []string{`test.yaml:7:11: federation.downstreams[0].id: invalid id "-files": lower-case letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters`}},
		{"id of 64 characters", strings.Replace(fedOn, "id: files", "id: "+strings.Repeat("a", 64), 1), []string{`test.yaml:7:11: federation.downstreams[0].id: invalid id "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…": lower-case letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters`}},
		{"id duplicated", fedOn + "    - {id: tools, url: 'https://t'}\n    - {id: files, url: 'https://f2'}\n", []string{`test.yaml:10:12: federation.downstreams[2].id: duplicate id "files" (also federation.downstreams[0])`}},
		{"id not a string", strings.Replace(fedOn, "id: files", "id: [files]", 1), []string{"test.yaml:7:11: federation.downstreams[0].id: expected a string, got a list"}},

		// url.
		{"url missing", strings.Replace(fedOn, "      url: https://files.example/mcp\n", "", 1), []string{"test.yaml:7:7: federation.downstreams[0].url: required: the downstream's Streamable HTTP endpoint, an absolute http or https URL such as https://files.example/mcp"}},
		{"url without a scheme", strings.Replace(fedOn, "https://files.example/mcp", "files.example/mcp", 1), []string{`test.yaml:8:12: federation.downstreams[0].url: must be an absolute http or https URL such as https://files.example/mcp, got "files.example/mcp"`}},
		{"url of another scheme", strings.Replace(fedOn, "https://files.example/mcp", "ws://files.example/mcp", 1), []string{`test.yaml:8:12: federation.downstreams[0].url: must be an absolute http or https URL such as https://files.example/mcp, got "ws://files.example/mcp"`}},
		{"url without a host", strings.Replace(fedOn, "https://files.example/mcp", "https:///mcp", 1), []string{`test.yaml:8:12: federation.downstreams[0].url: must be an absolute http or https URL such as https://files.example/mcp (with a host), got "https:///mcp"`}},
		{"url with user information", strings.Replace(fedOn, "https://files.example/mcp", "https://bob:s3cret@files.example/mcp", 1), []string{"test.yaml:8:12: federation.downstreams[0].url: must not carry credentials (user information) in the URL: put them in headers, e.g. Authorization: {file: /etc/mcpintercept/files.token}"}},
		{"url with a fragment", strings.Replace(fedOn, "https://files.example/mcp", "https://files.example/mcp#top", 1), []string{"test.yaml:8:12: federation.downstreams[0].url: must not have a fragment (#…): it is never sent to the server"}},
		{"url with an empty fragment", strings.Replace(fedOn, "https://files.example/mcp", "https://files.example/mcp#", 1), []string{"test.yaml:8:12: federation.downstreams[0].url: must not have a fragment (#…): it is never sent to the server"}},
		{"url port 0", strings.Replace(fedOn, "https://files.example/mcp", "https://files.example:0/mcp", 1), []string{`test.yaml:8:12: federation.downstreams[0].url: port "0" must be a number between 1 and 65535`}},
		{"ca_file with a plaintext url", strings.Replace(fedOn, "https://files.example/mcp", "http://files.example/mcp\n      ca_file: ca.pem", 1), []string{"test.yaml:9:16: federation.downstreams[0].ca_file: the url is plaintext (http://): a CA file is only for https"}},

		// headers.
		{"header set by the appliance", ds("headers: {Host: {value: x}}"), []string{`test.yaml:9:17: federation.downstreams[0].headers.Host: header "Host" is set by the appliance per call; it cannot be configured`}},
		{"reserved names ignore case", ds("headers: {content-TYPE: {value: x}, TraceParent: {value: y}, mcp-protocol-version: {value: z}}"), []string{
			`test.yaml:9:17: federation.downstreams[0].headers.content-TYPE: header "content-TYPE" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:43: federation.downstreams[0].headers.TraceParent: header "TraceParent" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:68: federation.downstreams[0].headers.mcp-protocol-version: header "mcp-protocol-version" is set by the appliance per call; it cannot be configured`}},
		{"every reserved header", ds("headers: {Content-Length: {value: x}, Accept: {value: x}, Transfer-Encoding: {value: x}, Connection: {value: x}, Mcp-Session-Id: {value: x}, Mcp-Method: {value: x}, Mcp-Name: {value: x}, Last-Event-ID: {value: x}, tracestate: {value: x}}"), []string{
			`test.yaml:9:17: federation.downstreams[0].headers.Content-Length: header "Content-Length" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:45: federation.downstreams[0].headers.Accept: header "Accept" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:65: federation.downstreams[0].headers.Transfer-Encoding: header "Transfer-Encoding" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:96: federation.downstreams[0].headers.Connection: header "Connection" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:120: federation.downstreams[0].headers.Mcp-Session-Id: header "Mcp-Session-Id" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:148: federation.downstreams[0].headers.Mcp-Method: header "Mcp-Method" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:172: federation.downstreams[0].headers.Mcp-Name: header "Mcp-Name" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:194: federation.downstreams[0].headers.Last-Event-ID: header "Last-Event-ID" is set by the appliance per call; it cannot be configured`,
			`test.yaml:9:221: federation.downstreams[0].headers.tracestate: header "tracestate" is set by the appliance per call; it cannot be configured`}},
		{"header name not a token", ds("headers: {\"X Team\": {value: x}, \"X:Y\": {value: y}}"), []string{
			`test.yaml:9:17: federation.downstreams[0].headers."X Team": header name "X Team": not an HTTP token`,
			`test.yaml:9:39: federation.downstreams[0].headers."X:Y": header name "X:Y": not an HTTP token`}},
		{"header duplicated in another case", ds("headers: {Authorization: {value: a}, authorization: {file: t}}"), []string{
			`test.yaml:9:44: federation.downstreams[0].headers.authorization: duplicate header "authorization" (also "Authorization": header names are case-insensitive)`}},
		{"header duplicated exactly", ds("headers: {X-A: {value: a}, X-A: {value: b}}"), []string{
			`test.yaml:9:34: federation.downstreams[0].headers.X-A: duplicate key "X-A" (first at line 9)`}},
		{"header with value and file", ds("headers: {X-A: {value: a, file: t}}"), []string{"test.yaml:9:39: federation.downstreams[0].headers.X-A.file: value and file are exclusive: give the value, or the file holding it"}},
		{"header with neither", ds("headers: {X-A: {}}"), []string{"test.yaml:9:17: federation.downstreams[0].headers.X-A: needs value or file: the header's value (not empty), or the file holding it, e.g. {file: /etc/mcpintercept/token}"}},
		{"header with an empty value", ds("headers: {X-A: {value: \"\"}}"), []string{"test.yaml:9:17: federation.downstreams[0].headers.X-A: needs value or file: the header's value (not empty), or the file holding it, e.g. {file: /etc/mcpintercept/token}"}},
		{"header value with CR LF", ds("headers: {X-A: {value: \"a\\r\\nX-B: b\"}}"), []string{"test.yaml:9:30: federation.downstreams[0].headers.X-A.value: the value contains CR, LF or NUL (not shown): it would split the request's header"}},
		{"header value with LF", ds("headers: {X-A: {value: \"a\\nb\"}}"), []string{"test.yaml:9:30: federation.downstreams[0].headers.X-A.value: the value contains CR, LF or NUL (not shown): it would split the request's header"}},
		{"header value with NUL", ds("headers: {X-A: {value: \"a\\0b\"}}"), []string{"test.yaml:9:30: federation.downstreams[0].headers.X-A.value: the value contains CR, LF or NUL (not shown): it would split the request's header"}},
		{"header value with another control character", ds("headers: {X-A: {value: \"a\\x01b\"}}"), []string{"test.yaml:9:30: federation.downstreams[0].headers.X-A.value: the value contains a control character (not shown)"}},
		{"header file with a control character", ds("headers: {X-A: {file: \"/t\\x01\"}}"), []string{"test.yaml:9:29: federation.downstreams[0].headers.X-A.file: contains the control character U+0001"}},
		{"header given as a bare string", ds("headers: {X-Team: blue}"), []string{`test.yaml:9:25: federation.downstreams[0].headers.X-Team: expected {value: …} or {file: …} (e.g. {file: /etc/mcpintercept/token}), got string "blue"`}},
		{"headers as a list", ds("headers: [X-Team]"), []string{"test.yaml:9:16: federation.downstreams[0].headers: expected a mapping of header names to {value: …} or {file: …}, got a list"}},
		{"header value not a string", ds("headers: {X-N: {value: 5}}"), []string{"test.yaml:9:30: federation.downstreams[0].headers.X-N.value: expected a string, got integer 5"}},

		// Typos get a "did you mean".
		{"typo in a downstream key", ds("tiemout: 5s"), []string{`test.yaml:9:7: federation.downstreams[0].tiemout: unknown key "tiemout" (did you mean timeout? valid: id, url, headers, ca_file, timeout)`}},
		{"typo in a short downstream key", ds("ulr: https://x"), []string{`test.yaml:9:7: federation.downstreams[0].ulr: unknown key "ulr" (did you mean url? valid: id, url, headers, ca_file, timeout)`}},
		{"key in the wrong case", ds("Timeout: 5s"), []string{`test.yaml:9:7: federation.downstreams[0].Timeout: unknown key "Timeout" (did you mean timeout? valid: id, url, headers, ca_file, timeout)`}},
		{"no near key: no guess", ds("retries: 3"), []string{`test.yaml:9:7: federation.downstreams[0].retries: unknown key "retries" (valid: id, url, headers, ca_file, timeout)`}},
		{"typo in a header's keys", ds("headers: {X-A: {vaule: a}}"), []string{
			"test.yaml:9:17: federation.downstreams[0].headers.X-A: needs value or file: the header's value (not empty), or the file holding it, e.g. {file: /etc/mcpintercept/token}",
			`test.yaml:9:23: federation.downstreams[0].headers.X-A.vaule: unknown key "vaule" (did you mean value? valid: value, file)`}},
		{"unknown section key", sec("  listn: x\n"), []string{`test.yaml:5:3: federation.listn: unknown key "listn" (valid: listen, tls, development, refresh, rule_set, tool_pins, token_audience, limits, aggregate_limits, downstreams)`}},

		// rule_set.
		{"rule_set typo", strings.Replace(fedOn, "  downstreams:", "  rule_set: federatoin\n  downstreams:", 1) + "rule_sets:\n  federation: []\n  other: []\n", []string{
			`test.yaml:6:13: federation.rule_set: unknown rule set "federatoin" (did you mean "federation"? defined: "federation", "other")`}},
		{"rule_set far from any", strings.Replace(fedOn, "  downstreams:", "  rule_set: zzz\n  downstreams:", 1) + "rule_sets:\n  federation: []\n", []string{
			`test.yaml:6:13: federation.rule_set: unknown rule set "zzz" (defined: "federation")`}},
		{"rule_set without rule_sets", strings.Replace(fedOn, "  downstreams:", "  rule_set: federation\n  downstreams:", 1), []string{
			`test.yaml:6:13: federation.rule_set: unknown rule set "federation": rule_sets defines none`}},

		// audit.
		{"audit fail open", "audit: {fail: open}\n" + fedOn, []string{
			"test.yaml:1:15: audit.fail: must be closed while federation.listen is set: federation records every call durably before dispatching it, and open would let a call whose record could not be written reach the downstream"}},
		{"audit without a dir", "audit: {dir: \"\"}\n" + fedOn, []string{
			"test.yaml:6:11: federation.listen: needs audit.dir: federation records every call durably before dispatching it"}},

		// Off: the section's own values are still checked, nothing else is.
		{"off: a downstream's own values", sec("  downstreams: [{id: a.b, url: 'ftp://x'}]\n"), []string{
			`test.yaml:5:22: federation.downstreams[0].id: invalid id "a.b": '.' separates the id from the tool name in published names (<id>.<tool>), so an id cannot contain one; use '-' or '_'`,
			`test.yaml:5:32: federation.downstreams[0].url: must be an absolute http or https URL such as https://files.example/mcp, got "ftp://x"`}},
	} {
		t.Run(tt.name, func(t *testing.T) { wantParseErrors(t, tt.src, tt.want) })
	}
}

// TestFederationValidateInCode: a config built in code is held to the same rules, its headers
// without HeaderOrder taken in name order.
func TestFederationValidateInCode(t *testing.T) {
	base := func() *Config {
		c := Default(NftablesTProxy)
		c.Intercept.Destinations = Default(NftablesTProxy).UpstreamDeny[:1]
		c.Intercept.Ports = []PortRange{{443, 443}}
		c.Federation.Listen = "127.0.0.1:8765"
		c.Federation.Downstreams = []FederationDownstream{{ID: "a", URL: "https://a/mcp", Timeout: Duration{time.Second},
			Headers: map[string]FederationHeader{"X-B": {Value: "b"}, "X-A": {File: "/t"}}}}
		return c
	}
	if err := base().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := base().Federation.Downstreams[0].HeaderNames(); !slices.Equal(got, []string{"X-A", "X-B"}) {
		t.Errorf("HeaderNames() = %q", got)
	}
	for _, tt := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"zero timeout", func(c *Config) { c.Federation.Downstreams[0].Timeout = Duration{} },
			"federation.downstreams[0].timeout: must be between 100ms and 10m0s, got 0s"},
		{"reserved header", func(c *Config) { c.Federation.Downstreams[0].Headers["mcp-name"] = FederationHeader{Value: "x"} },
			`federation.downstreams[0].headers.mcp-name: header "mcp-name" is set by the appliance per call; it cannot be configured`},
		{"no downstream", func(c *Config) { c.Federation.Downstreams = nil },
			"federation.downstreams: required with federation.listen: at least one downstream, e.g. [{id: files, url: https://files.example/mcp}]"},
		{"zero limits", func(c *Config) { c.Federation.Limits = FederationLimits{} },
			"federation.limits.pages: must be between 1 and 1000, got 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.edit(c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error()+"\n", tt.want+"\n") {
				t.Errorf("Validate() = %v, want %s", err, tt.want)
			}
		})
	}
}

// TestFederationMarshal: a downstream is written with its headers in file order, each as the one
// key it was given, and reads back the same.
func TestFederationMarshal(t *testing.T) {
	ds := FederationDownstream{ID: "a", URL: "https://a/mcp", Timeout: Duration{time.Second},
		Headers:     map[string]FederationHeader{"Z": {Value: "z"}, "A": {File: "/a"}, "true": {Value: "yes"}},
		HeaderOrder: []string{"Z", "true", "A"}}
	out, err := yaml.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	want := "id: a\nurl: https://a/mcp\nheaders:\n    Z:\n        value: z\n    \"true\":\n        value: \"yes\"\n    A:\n        file: /a\nca_file: \"\"\ntimeout: 1s\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	for _, f := range []string{"testdata/federation.yaml", "testdata/full.yaml"} {
		t.Run(f, func(t *testing.T) {
			c, err := Load(f, Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c)
		})
	}
}

// TestFederationExamples: full.yaml sets every federation key to something other than its
// default (listen excepted: that file sets audit.fail open, which federation refuses), and
// federation.yaml turns the endpoint on.
func TestFederationExamples(t *testing.T) {
	c, err := Load("testdata/full.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	f, d := c.Federation, Default(c.Mechanism).Federation
	for _, x := range []struct {
		key       string
		got, dflt any
	}{
		{"tls.cert_file", f.TLS.CertFile, d.TLS.CertFile},
		{"tls.key_file", f.TLS.KeyFile, d.TLS.KeyFile},
		{"development", f.Development, d.Development},
		{"refresh", f.Refresh, d.Refresh},
		{"rule_set", f.RuleSet, d.RuleSet},
		{"limits.pages", f.Limits.Pages, d.Limits.Pages},
		{"limits.tools", f.Limits.Tools, d.Limits.Tools},
		{"limits.bytes", f.Limits.Bytes, d.Limits.Bytes},
		{"limits.result_bytes", f.Limits.ResultBytes, d.Limits.ResultBytes},
		{"limits.request_bytes", f.Limits.RequestBytes, d.Limits.RequestBytes},
		{"aggregate_limits.tools", f.AggregateLimits.Tools, d.AggregateLimits.Tools},
		{"downstreams", f.Downstreams, d.Downstreams},
	} {
		if reflect.DeepEqual(x.got, x.dflt) {
			t.Errorf("full.yaml sets federation.%s to its default %v", x.key, x.got)
		}
	}
	if len(f.Downstreams) != 1 {
		t.Fatalf("full.yaml: %d downstreams", len(f.Downstreams))
	}
	ds := f.Downstreams[0]
	if ds.CAFile == "" || ds.Timeout.Duration == DefaultFederationTimeout || len(ds.HeaderOrder) != 2 ||
		ds.Headers[ds.HeaderOrder[0]].File == "" || ds.Headers[ds.HeaderOrder[1]].Value == "" {
		t.Errorf("full.yaml's downstream leaves a key at its default or lacks a header of each kind: %+v", ds)
	}
	on, err := Load("testdata/federation.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if !on.FederationOn() || len(on.Federation.Downstreams) < 2 {
		t.Errorf("federation.yaml: %+v", on.Federation)
	}
}

// TestFederationSchemaCoversEveryField is TestSchemaCoversEveryField for the downstream and header
// tables.
func TestFederationSchemaCoversEveryField(t *testing.T) {
	for _, tt := range []struct {
		name  string
		typ   reflect.Type
		paths []string
		docs  []string
	}{
		{"downstream", reflect.TypeFor[FederationDownstream](), paths(federationDownstreamTable), docs(federationDownstreamTable)},
		{"header", reflect.TypeFor[FederationHeader](), paths(federationHeaderTable), docs(federationHeaderTable)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := yamlPaths(tt.typ, "")
			got := slices.Clone(tt.paths)
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("table keys\n%v\nstruct fields\n%v", got, want)
			}
			for i, d := range tt.docs {
				if strings.TrimSpace(d) == "" {
					t.Errorf("%s has no doc", tt.paths[i])
				}
			}
		})
	}
}

func TestClosest(t *testing.T) {
	keys := []string{"id", "url", "headers", "ca_file", "timeout"}
	for _, tt := range []struct{ in, want string }{
		{"tiemout", "timeout"}, // swapped letters
		{"timout", "timeout"},  // dropped
		{"timeoutt", "timeout"},
		{"TIMEOUT", "timeout"},
		{"cafile", "ca_file"},
		{"header", "headers"},
		{"di", "id"},
		{"ur", "url"},
		{"uri", "url"},
		{"u", ""}, // two edits from a three-letter key
		{"tmeot", "timeout"},
		{"tmot", ""},
		{"retries", ""},
		{"", ""},
		{strings.Repeat("x", 1000), ""},
	} {
		if got := closest(tt.in, keys); got != tt.want {
			t.Errorf("closest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// wantParseErrors parses src as test.yaml and wants exactly the errors want, in order.
func wantParseErrors(t *testing.T, src string, want []string) {
	t.Helper()
	_, err := Parse("test.yaml", []byte(src), Overrides{})
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v; want %q\ninput:\n%s", err, want, src)
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s\ninput:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), src)
	}
}
