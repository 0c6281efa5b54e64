package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTokensValid(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "defaults: 60s skew, opaque allowed, 8KiB",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				if c.Tokens.ClockSkew.Duration != time.Minute || c.Tokens.OpaqueTokens != TokensAllow || c.Tokens.MaxHeader != 8<<10 {
					t.Errorf("tokens = %+v", c.Tokens)
				}
			},
		},
		{
			// The draft's Confused Deputy MUST: on wherever a token can be read, nowhere else.
			name: "token_audience on by default on routes that read HTTP only",
			src: withRoutes + "  - {name: t, tls: terminate}\n  - {name: p, tls: plaintext, level: 2}\n" +
				"  - {name: o, tls: passthrough}\n  - {name: z, tls: plaintext, level: 0}\n",
			check: func(t *testing.T, c *Config) {
				for i, want := range []string{On, On, "", ""} {
					if r := c.Routes[i]; r.TokenAudience != want || r.TokenAudienceOn() != (want == On) {
						t.Errorf("routes[%d] token_audience = %q (on %v), want %q", i, r.TokenAudience, r.TokenAudienceOn(), want)
					}
				}
				for _, w := range c.Warnings() {
					if strings.Contains(w, "token_audience") {
						t.Errorf("warning %q with every check on", w)
					}
				}
			},
		},
		{
			name: "off is kept and warned about; audiences and issuers read",
			src: withRoutes + "  - {name: t, tls: terminate, token_audience: off, audiences: [https://a.example/mcp]}\n" +
				"tokens:\n  issuers:\n    - {issuer: https://idp.example, jwks_file: keys.json, audiences: [https://b.example]}\n" +
				"  opaque_tokens: introspect\n  introspection: {url: https://idp.example/introspect, client_id: me, client_secret_file: s}\n",
			check: func(t *testing.T, c *Config) {
				r := c.Routes[0]
				if r.TokenAudience != Off || r.TokenAudienceOn() || len(r.Audiences) != 1 {
					t.Errorf("route = %+v", r)
				}
				w := c.Warnings()
				if len(w) != 1 || !strings.Contains(w[0], "routes[0] (t)") || !strings.Contains(w[0], "token_audience: off") {
					t.Errorf("warnings = %q", w)
				}
				is := c.Tokens.Issuers
				if len(is) != 1 || is[0].Issuer != "https://idp.example" || is[0].JWKSFile != filepath.Join("conf", "keys.json") {
					t.Errorf("issuers = %+v", is)
				}
				if got := c.Tokens.Introspection.ClientSecretFile; got != filepath.Join("conf", "s") {
					t.Errorf("client_secret_file = %q, not resolved against the file", got)
				}
			},
		},
		{
			name: "true and false spell on and off",
			src:  withRoutes + "  - {name: t, tls: terminate, token_audience: false}\n",
			check: func(t *testing.T, c *Config) {
				if c.Routes[0].TokenAudience != Off {
					t.Errorf("token_audience = %q, want off", c.Routes[0].TokenAudience)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("conf/test.yaml", []byte(tt.src), Overrides{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestTokensErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []wantErr
	}{
		{name: "token_audience on a passthrough route", src: withRoutes + "  - {name: a, tls: passthrough, token_audience: on}\n",
			want: []wantErr{{5, "routes[0].token_audience", "needs a route that reads HTTP"}}},
		{name: "audiences at level 0", src: withRoutes + "  - {name: a, tls: plaintext, level: 0, audiences: [https://a.example]}\n",
			want: []wantErr{{5, "routes[0].audiences", "needs a route that reads HTTP"}}},
		{name: "token_audience neither on nor off", src: withRoutes + "  - {name: a, tls: terminate, token_audience: maybe}\n",
			want: []wantErr{{5, "routes[0].token_audience", `unknown value "maybe"`}}},
		{name: "audience not a URI", src: withRoutes + "  - {name: a, tls: terminate, audiences: [mcp-server]}\n",
			want: []wantErr{{5, "routes[0].audiences[0]", "absolute URI"}}},
		{name: "issuer without keys", src: minimal + "tokens:\n  issuers:\n    - {issuer: https://idp.example}\n",
			want: []wantErr{{6, "tokens.issuers[0]", "needs jwks_file or jwks_url"}}},
		{name: "issuer with both keys", src: minimal + "tokens:\n  issuers:\n    - {issuer: https://idp.example, jwks_file: k, jwks_url: https://idp.example/k}\n",
			want: []wantErr{{6, "tokens.issuers[0].jwks_url", "exclusive"}}},
		{name: "issuer without iss", src: minimal + "tokens:\n  issuers:\n    - {jwks_file: k}\n",
			want: []wantErr{{6, "tokens.issuers[0].issuer", "required"}}},
		{name: "introspect without url", src: minimal + "tokens: {opaque_tokens: introspect}\n",
			want: []wantErr{{4, "tokens.introspection.url", "required by opaque_tokens: introspect"}}},
		{name: "opaque_tokens unknown", src: minimal + "tokens: {opaque_tokens: sometimes}\n",
			want: []wantErr{{4, "tokens.opaque_tokens", `unknown value "sometimes"`}}},
		{name: "max_header too small", src: minimal + "tokens: {max_header: 10}\n",
			want: []wantErr{{4, "tokens.max_header", "must be between 256"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.src), Overrides{})
			if c != nil {
				t.Fatal("got a config despite errors")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				e := errs[i]
				if e.Line != w.line || e.Key != w.key || !strings.Contains(e.Msg, w.msg) || e.Column == 0 {
					t.Errorf("error %d = %q (line %d col %d, key %q)\nwant line %d, key %q, message containing %q",
						i, e.Error(), e.Line, e.Column, e.Key, w.line, w.key, w.msg)
				}
			}
		})
	}
}
