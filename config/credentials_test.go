package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func credFile(t *testing.T, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("v\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCredentialsRefusals: a credential goes only where a route names the destination and the
// appliance verifies it, from a file only its owner reads; every refusal names the key.
func TestCredentialsRefusals(t *testing.T) {
	good := credFile(t, 0o600)
	loose := credFile(t, 0o644)
	route := func(rest string) string {
		return withRoutes + "  - {name: r, " + rest + "}\n"
	}
	inject := "credentials: {inject: {file: " + good + "}}"
	tests := []struct{ name, src, key, msg string }{
		{"passthrough", route("tls: passthrough, match: {sni: [a.test]}, " + inject), "routes[0].credentials", "needs tls: terminate or plaintext"},
		{"level 0", route("tls: terminate, level: 0, match: {sni: [a.test]}, " + inject), "routes[0].credentials", "needs level 1 or 2"},
		{"no destination", route("tls: terminate, match: {ports: [443]}, " + inject), "routes[0].credentials", "must name its server in match.sni"},
		{"terminate by address only", route("tls: terminate, match: {destinations: [104.16.0.1/32]}, " + inject), "routes[0].credentials", "must name its server in match.sni"},
		{"wildcard sni", route("tls: terminate, match: {sni: ['*.workers.dev']}, " + inject), "routes[0].credentials", "wildcard"},
		{"plaintext wide prefix", route("tls: plaintext, development: true, match: {destinations: [0.0.0.0/0]}, " + inject), "routes[0].credentials", "single addresses"},
		{"upgrade", route("tls: terminate, match: {sni: [a.test]}, allow_upgrade: [websocket], " + inject), "routes[0].credentials", "no upgrade"},
		{"endpoint query", route("tls: terminate, match: {sni: [a.test]}, credentials: {exchange: {token_endpoint: 'https://as.test/t?client_secret=x', client_id: c, client_secret_file: " + good + "}}"), "routes[0].credentials.exchange.token_endpoint", "query"},
		{"plaintext by name", route("tls: plaintext, development: true, match: {sni: [a.test]}, " + inject), "routes[0].credentials", "named by address"},
		{"loose file", route("tls: terminate, match: {sni: [a.test]}, credentials: {inject: {file: " + loose + "}}"), "routes[0].credentials.inject.file", "chmod 600"},
		{"missing file", route("tls: terminate, match: {sni: [a.test]}, credentials: {inject: {file: /nonexistent/x}}"), "routes[0].credentials.inject.file", "no such file"},
		{"both", route("tls: terminate, match: {sni: [a.test]}, credentials: {inject: {file: " + good + "}, exchange: {token_endpoint: https://as.test/t, client_id: c, client_secret_file: " + good + "}}"), "routes[0].credentials.exchange", "exclusive"},
		{"neither", route("tls: terminate, match: {sni: [a.test]}, credentials: {placeholder: x}"), "routes[0].credentials", "needs inject or exchange"},
		{"other", route("tls: terminate, match: {sni: [a.test]}, credentials: {inject: {file: " + good + "}, other: drop}"), "routes[0].credentials.other", "refuse"},
		{"dpop scheme", route("tls: terminate, match: {sni: [a.test]}, credentials: {inject: {file: " + good + ", scheme: DPoP}}"), "routes[0].credentials.inject.scheme", "DPoP"},
		{"framing header", route("tls: terminate, match: {sni: [a.test]}, credentials: {inject: {file: " + good + ", header: Host}}"), "routes[0].credentials.inject.header", "frames the message"},
		{"placeholder with space", route("tls: terminate, match: {sni: [a.test]}, credentials: {inject: {file: " + good + "}, placeholder: 'a b'}"), "routes[0].credentials.placeholder", "one token"},
		{"http endpoint", route("tls: terminate, match: {sni: [a.test]}, credentials: {exchange: {token_endpoint: http://as.test/t, client_id: c, client_secret_file: " + good + "}}"), "routes[0].credentials.exchange.token_endpoint", "is http"},
		{"no client id", route("tls: terminate, match: {sni: [a.test]}, credentials: {exchange: {token_endpoint: https://as.test/t, client_secret_file: " + good + "}}"), "routes[0].credentials.exchange.client_id", "required"},
		{"reserved param", route("tls: terminate, match: {sni: [a.test]}, credentials: {exchange: {token_endpoint: https://as.test/t, client_id: c, client_secret_file: " + good + ", params: [subject_token=x]}}"), "routes[0].credentials.exchange.params[0]", "set by the appliance"},
		{"subject type", route("tls: terminate, match: {sni: [a.test]}, credentials: {exchange: {token_endpoint: https://as.test/t, client_id: c, client_secret_file: " + good + ", subject_token_type: saml}}"), "routes[0].credentials.exchange.subject_token_type", "access_token"},
		{"default_route", minimal + "default_route: {tls: terminate, credentials: {inject: {file: " + good + "}}}\n", "default_route.credentials", "takes no credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.src), Overrides{})
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err %v, want a refusal", err)
			}
			for _, e := range errs {
				if e.Key == tt.key && strings.Contains(e.Msg, tt.msg) {
					return
				}
			}
			t.Fatalf("no error at %s containing %q:\n%v", tt.key, tt.msg, err)
		})
	}
}

func TestCredentialsAccepted(t *testing.T) {
	good := credFile(t, 0o600)
	src := withRoutes +
		"  - {name: a, tls: terminate, match: {sni: [a.test]}, credentials: {inject: {file: " + good + "}, placeholder: ph}}\n" +
		"  - {name: b, tls: plaintext, development: true, level: 2, match: {destinations: [10.0.0.1/32]}, credentials: {inject: {file: " + good + ", header: X-Api-Key}, other: strip}}\n" +
		"  - {name: c, tls: terminate, match: {sni: [c.test]}, credentials: {exchange: {token_endpoint: https://as.test/token, client_id: mcpi, client_secret_file: " + good + ", params: [connector_id=up]}}}\n" +
		"  - {name: d, tls: terminate, match: {sni: [d.test]}}\n"
	c, err := Parse("test.yaml", []byte(src), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	a, b, x, d := c.Routes[0].Credentials, c.Routes[1].Credentials, c.Routes[2].Credentials, c.Routes[3].Credentials
	switch {
	case a.Action() != "inject" || a.HeaderName() != "Authorization" || a.SchemeName() != "Bearer" || a.Other != CredentialsRefuse || a.Source() != "file:"+good:
		t.Fatalf("a: %+v", a)
	case b.HeaderName() != "X-Api-Key" || b.SchemeName() != "" || b.Other != CredentialsStrip:
		t.Fatalf("b: %+v", b)
	case x.Action() != "exchange" || x.Exchange.SubjectTokenType != TokenTypeAccess || x.Exchange.Timeout.Duration != DefaultExchangeTimeout || x.SchemeName() != "Bearer":
		t.Fatalf("c: %+v", x)
	case d.On() || d.Other != "":
		t.Fatalf("a route without credentials got %+v", d)
	}
}

func TestCredentialsWarnings(t *testing.T) {
	good := credFile(t, 0o600)
	src := withRoutes +
		"  - {name: a, tls: terminate, level: 1, match: {sni: [a.test]}, credentials: {inject: {file: " + good + "}}}\n" +
		"  - {name: b, tls: terminate, level: 2, match: {sni: [b.test]}, credentials: {exchange: {token_endpoint: https://as.test/token, client_id: mcpi, client_secret_file: " + good + "}}}\n" +
		"  - {name: c, tls: terminate, level: 2, match: {sni: [c.test]}, credentials: {inject: {file: " + good + "}}}\n"
	c, err := Parse("test.yaml", []byte(src), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(c.Warnings(), "\n")
	if strings.Contains(w, "(a)") || !strings.Contains(w, "routes[1] (b): credentials.exchange with token_audience: on") || strings.Contains(w, "(c)") {
		t.Fatalf("warnings:\n%s", w)
	}
}

// TestCredentialsDefaults: other and subject_token_type may be left out (refuse, access_token, as
// documented); a wrong value of either is still refused.
func TestCredentialsDefaults(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "x.token")
	if err := os.WriteFile(secret, []byte("v\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	route := func(creds string) string {
		return withRoutes + "  - name: c\n    match: {destinations: [10.0.0.1/32], ports: [443]}\n    tls: plaintext\n" +
			"    level: 2\n    development: true\n    credentials:\n" + creds
	}
	inject := "      inject: {file: " + secret + "}\n"
	exchange := "      exchange:\n        token_endpoint: https://as.example/token\n        client_id: me\n" +
		"        client_secret_file: " + secret + "\n"
	for name, src := range map[string]string{"inject": route(inject), "exchange": route(exchange)} {
		c, err := Parse("test.yaml", []byte(src), Overrides{})
		if err != nil {
			t.Fatalf("%s without other (and subject_token_type): %v", name, err)
		}
		if cr := c.Routes[0].Credentials; !cr.On() || cr.Other != CredentialsRefuse {
			t.Errorf("%s: credentials %+v", name, cr)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{route(inject + "      other: drop\n"), `credentials.other: unknown value "drop" (valid: refuse, strip)`},
		{route(exchange + "        subject_token_type: saml\n"), `credentials.exchange.subject_token_type: unknown value "saml"`},
	} {
		_, err := Parse("test.yaml", []byte(tc.src), Overrides{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
